import { Widget } from '@lumino/widgets';

import { h, setAttr, setText } from './dom';
import { statusText } from './format';
import { JobsModel } from './model';

/**
 * The status-bar item: `2 burst jobs running · $3.10/h`, shown only while
 * jobs are running. Clicking it opens the sidebar.
 */
export class BurstStatus extends Widget {
  constructor(model: JobsModel, onClick: () => void) {
    super();
    this.model = model;
    this.addClass('nbburst-statusbar');
    this.addClass('jp-StatusBar-GroupItem');
    this._text = h('span', { className: 'jp-StatusBar-TextItem' });
    this.node.appendChild(this._text);
    this.node.title = 'Burst jobs: click to show them';
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', onClick);
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        onClick();
      }
    });
    model.changed.connect(this.update, this);
    this.update();
  }

  readonly model: JobsModel;

  /** Whether the item has something to show. */
  get isActive(): boolean {
    return this.model.running.length > 0;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.changed.disconnect(this.update, this);
    super.dispose();
  }

  protected onUpdateRequest(): void {
    const text = statusText([...this.model.running]);
    setText(this._text, text);
    const names = this.model.running
      .map(j => `${j.name || j.id} (${j.state.toLowerCase()})`)
      .join(', ');
    setAttr(
      this.node,
      'title',
      names ? `Burst jobs running: ${names}. Click to show them.` : 'Burst jobs'
    );
  }

  private _text: HTMLSpanElement;
}
