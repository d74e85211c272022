import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { BurstApi, errorMessage } from './api';
import { h, setAttr, setHidden, setText, syncRows } from './dom';
import { formatCost, sessionSummary, sessionTimeLeft, stateClass, stateLabel } from './format';
import { VisiblePoll } from './visiblepoll';
import { ISessionInfo } from './wire';

/** The elements of one session row, kept to update it in place. */
interface IRow {
  node: HTMLLIElement;
  name: HTMLSpanElement;
  badge: HTMLSpanElement;
  summary: HTMLSpanElement;
  left: HTMLSpanElement;
  cost: HTMLSpanElement;
  stop: HTMLButtonElement;
}

/**
 * The warm sessions, above the job list: name, state, backend, cores, cells,
 * time left and cost so far, and a Stop button for each. Hidden while there
 * are none. A `VisiblePoll` refreshes it every 2 s while it is on screen.
 */
export class SessionsView extends Widget {
  constructor(api: BurstApi) {
    super();
    this.api = api;
    this.addClass('nbburst-sessions-view');
    this._error = h('div', { className: 'nbburst-error', role: 'alert', hidden: true });
    this._list = h('ul', { className: 'nbburst-sessions', 'aria-label': 'Burst sessions' });
    this.node.append(
      h(
        'div',
        { className: 'nbburst-header' },
        h('h2', { className: 'nbburst-title' }, 'Sessions')
      ),
      this._error,
      this._list
    );
    this._list.addEventListener('click', this._onListClick);
    this._poll = new VisiblePoll({ name: 'nbburst:sessions', fetch: () => this._fetch() });
    this.update();
  }

  readonly api: BurstApi;

  /** Whether the view is on screen; the poll pauses when it is not. */
  get visible(): boolean {
    return this._poll.visible;
  }
  set visible(value: boolean) {
    this._poll.visible = value;
  }

  /** Fetch now. */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  protected onUpdateRequest(): void {
    setText(this._error, this._problem ?? '');
    setHidden(this._error, !this._problem);
    setHidden(this.node, !this._sessions.length && !this._problem);
    const now = Date.now() / 1000;
    syncRows(
      this._list,
      this._rows,
      this._sessions,
      session => session.name,
      createRow,
      (row, session) => updateRow(row, session, now, this._stopping.has(session.name))
    );
  }

  private async _fetch(): Promise<void> {
    try {
      this._sessions = await this.api.listSessions();
      this._problem = null;
    } catch (error) {
      this._problem = `Could not list the sessions: ${errorMessage(error)}`;
      this.update();
      throw error; // so that the poll backs off
    }
    this.update();
  }

  private _onListClick = (event: MouseEvent): void => {
    const button = (event.target as HTMLElement).closest<HTMLButtonElement>(
      '.nbburst-session-stop'
    );
    const name = button?.closest<HTMLElement>('.nbburst-session')?.dataset.sessionName;
    if (name) {
      void this._confirmStop(name);
    }
  };

  private async _confirmStop(name: string): Promise<void> {
    if (this._stopping.has(name)) {
      return;
    }
    const result = await showDialog({
      title: 'Stop burst session?',
      body: `Stop the session “${name}”? Its machine is deleted; a cell running on it ends.`,
      buttons: [
        Dialog.cancelButton({ label: 'Keep it' }),
        Dialog.warnButton({ label: 'Stop session' })
      ],
      defaultButton: 0
    });
    if (!result.button.accept) {
      return;
    }
    this._stopping.add(name);
    this.update();
    try {
      await this.api.stopSession(name);
      this._problem = null;
    } catch (error) {
      this._problem = `Could not stop the session ${name}: ${errorMessage(error)}`;
    } finally {
      this._stopping.delete(name);
      void this.refresh();
    }
  }

  private _poll: VisiblePoll;
  private _sessions: ISessionInfo[] = [];
  private _problem: string | null = null;
  private _stopping = new Set<string>();
  private _rows = new Map<string, IRow>();
  private _error: HTMLDivElement;
  private _list: HTMLUListElement;
}

function createRow(name: string): IRow {
  const nameNode = h('span', { className: 'nbburst-job-name' }, name);
  const badge = h('span', { className: 'nbburst-state-badge' });
  const summary = h('span', { className: 'nbburst-job-machine' });
  const left = h('span', {
    className: 'nbburst-session-left',
    title: 'Until the session ends at the latest'
  });
  const cost = h('span', { className: 'nbburst-job-cost', title: 'Cost so far' });
  const stop = h(
    'button',
    { className: 'nbburst-cancel nbburst-session-stop', type: 'button' },
    'Stop'
  );
  const node = h(
    'li',
    { className: 'nbburst-session', 'data-session-name': name },
    h('div', { className: 'nbburst-job-line' }, nameNode, badge, stop),
    h('div', { className: 'nbburst-job-line nbburst-job-line-secondary' }, summary),
    h('div', { className: 'nbburst-job-line nbburst-job-line-secondary' }, left, cost)
  );
  return { node, name: nameNode, badge, summary, left, cost, stop };
}

function updateRow(row: IRow, session: ISessionInfo, now: number, stopping: boolean): void {
  const state = stateLabel(session.state);
  const cls = `nbburst-state-badge ${stateClass(session.state)}`;
  if (row.badge.className !== cls) {
    row.badge.className = cls;
  }
  setText(row.badge, state);
  setText(row.summary, sessionSummary(session));
  setAttr(row.summary, 'title', `${sessionSummary(session)} on ${session.machine}`);
  setText(row.left, sessionTimeLeft(session, now));
  setText(row.cost, formatCost(session.cost_usd));
  setText(row.stop, stopping ? 'Stopping…' : 'Stop');
  row.stop.disabled = stopping;
  setAttr(row.stop, 'title', `Stop the session ${session.name} and its machine`);
}
