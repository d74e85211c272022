import { Message } from '@lumino/messaging';
import { Panel } from '@lumino/widgets';

import { burstIcon } from './icons';
import { JobDetailView } from './jobdetail';
import { JobListView } from './joblist';
import { JobsModel } from './model';
import { SessionsView } from './sessions';

/** The id of the sidebar widget (tests look it up by this id). */
export const SIDEBAR_ID = 'nbburst-sidebar';

/** The caption of the sidebar tab (shown as its `title` attribute). */
export const SIDEBAR_TITLE = 'Burst jobs';

/**
 * The "Burst jobs" sidebar: the warm sessions and the job list, and the detail
 * view of one job in their place when a job is opened. Polling runs only while
 * it is visible.
 */
export class BurstSidebar extends Panel {
  constructor(model: JobsModel) {
    super();
    this.model = model;
    this.id = SIDEBAR_ID;
    this.addClass('nbburst-sidebar');
    this.title.icon = burstIcon;
    this.title.caption = SIDEBAR_TITLE;

    this.sessions = new SessionsView(model.api);
    this.list = new JobListView(model);
    this.detail = new JobDetailView(model.api);
    this.detail.hide();
    this.addWidget(this.sessions);
    this.addWidget(this.list);
    this.addWidget(this.detail);

    this.list.jobSelected.connect((_, id) => this.showJob(id), this);
    this.detail.closed.connect(() => this.showList(), this);
    this.detail.cancelled.connect(() => void this.model.refresh(), this);
    this.detail.cellRequested.connect((_, id) => {
      if (!this.showCell || !this.showCell(id)) {
        this.detail.showProblem(
          'No open notebook shows this job: open the notebook that ran it (its cell shows the job).'
        );
      }
    }, this);
  }

  /** Shows the notebook cell of a job; false when no open notebook has one (set by the plugin). */
  showCell: ((id: string) => boolean) | null = null;

  readonly model: JobsModel;
  readonly sessions: SessionsView;
  readonly list: JobListView;
  readonly detail: JobDetailView;

  /** Open the detail view of a job. */
  showJob(id: string): void {
    this.sessions.hide();
    this.list.hide();
    this.detail.show();
    this.detail.open(id);
    this._syncVisibility();
    this.detail.node.focus();
  }

  /** Go back to the job list. */
  showList(): void {
    const id = this.detail.jobId;
    this.detail.close();
    this.detail.hide();
    this.sessions.show();
    this.list.show();
    this._syncVisibility(); // refreshes the list
    if (id) {
      this.list.focusJob(id);
    }
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._syncVisibility();
  }

  protected onBeforeDetach(msg: Message): void {
    this.model.listVisible = false;
    this.sessions.visible = false;
    this.detail.visible = false;
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._syncVisibility();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._syncVisibility();
  }

  private _syncVisibility(): void {
    const visible = this.isAttached && this.isVisible;
    this.model.listVisible = visible && !this.list.isHidden;
    this.sessions.visible = visible && !this.sessions.isHidden;
    this.detail.visible = visible && !this.detail.isHidden;
    if (visible) {
      this.list.update();
    }
  }
}
