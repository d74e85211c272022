import { Dialog, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { caretLeftIcon } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { BurstApi, errorMessage } from './api';
import { h, setAttr, setHidden, setText } from './dom';
import {
  dashboardPath,
  formatSpend,
  formatElapsed,
  formatRate,
  formatFullTime,
  formatTime,
  isTerminal,
  keptSummary,
  machineDetail,
  progressFraction,
  progressSummary,
  stateClass,
  stateLabel,
  workersSummary
} from './format';
import { LogChange, LogFollower } from './logfollower';
import { VisiblePoll } from './visiblepoll';
import { IJobDetail } from './wire';

/**
 * The detail view of one job: state, machine, cost and attempts, a live tail
 * of its log with an attempt selector, and a Cancel button.
 *
 * A `VisiblePoll` refreshes the job and tails its log (a `LogFollower`) every
 * 2 s while the view is visible; it goes to standby when hidden and once the
 * job is finished and its log complete.
 */
export class JobDetailView extends Widget {
  constructor(api: BurstApi) {
    super();
    this.api = api;
    this.addClass('nbburst-detail-view');
    this.node.tabIndex = -1;

    this._back = h('button', {
      className: 'nbburst-icon-button nbburst-back',
      type: 'button',
      title: 'Back to the job list'
    });
    caretLeftIcon.element({ container: this._back, tag: 'span' });
    this._back.appendChild(h('span', {}, 'Back'));
    this._cancel = h(
      'button',
      {
        className: 'nbburst-cancel',
        type: 'button',
        title: 'Cancel this job and delete its machine',
        hidden: true
      },
      'Cancel job'
    );
    this._showCell = h(
      'button',
      {
        className: 'nbburst-show-cell',
        type: 'button',
        title: 'Show the notebook cell that follows this job (in the open notebooks)'
      },
      'Show cell'
    );
    this._name = h('h3', { className: 'nbburst-detail-name' });
    this._badge = h('span', { className: 'nbburst-state-badge' });
    this._fields = h('dl', { className: 'nbburst-detail-fields' });
    this._progressFill = h('div', { className: 'nbburst-progress-fill' });
    this._progress = h('div', { className: 'nbburst-progress', hidden: true }, this._progressFill);
    this._message = h('div', { className: 'nbburst-detail-message', hidden: true });
    this._error = h('div', {
      className: 'nbburst-error',
      role: 'alert',
      hidden: true
    });
    this._attemptSelect = h('select', {
      className: 'nbburst-attempt-select',
      'aria-label': 'Attempt',
      title: 'Show the log of another attempt'
    });
    this._attemptLabel = h(
      'label',
      { className: 'nbburst-attempt-label', hidden: true },
      'Attempt ',
      this._attemptSelect
    );
    this._logStatus = h('span', { className: 'nbburst-log-status' });
    this._logNode = h('pre', {
      className: 'nbburst-log',
      tabindex: 0,
      'aria-label': 'Job log',
      'aria-live': 'off'
    });

    this.node.append(
      h(
        'div',
        { className: 'nbburst-detail-toolbar' },
        this._back,
        h('span', { className: 'nbburst-spacer' }),
        this._showCell,
        this._cancel
      ),
      h(
        'div',
        { className: 'nbburst-detail-header' },
        h('div', { className: 'nbburst-detail-title' }, this._name, this._badge),
        this._fields,
        this._dashboard,
        this._progress,
        this._message,
        this._error
      ),
      h(
        'div',
        { className: 'nbburst-log-toolbar' },
        h('span', { className: 'nbburst-log-title' }, 'Log'),
        this._attemptLabel,
        h('span', { className: 'nbburst-spacer' }),
        this._logStatus
      ),
      this._logNode
    );

    this._back.addEventListener('click', () => this._closed.emit());
    this._cancel.addEventListener('click', () => void this._confirmCancel());
    this._showCell.addEventListener('click', () => {
      if (this._jobId) {
        this._cellRequested.emit(this._jobId);
      }
    });
    this._attemptSelect.addEventListener('change', () => {
      const attempt = Number(this._attemptSelect.value);
      if (attempt) {
        this.selectAttempt(attempt);
      }
    });
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Escape' && !(event.target instanceof HTMLSelectElement)) {
        this._closed.emit();
      }
    });

    this._poll = new VisiblePoll({
      name: 'nbburst:job',
      fetch: () => this._tick(),
      due: () => !!this._jobId && !this._finished
    });
  }

  readonly api: BurstApi;

  /** Emitted when the user asks to go back to the list. */
  get closed(): ISignal<this, void> {
    return this._closed;
  }

  /** Emitted after a job was cancelled. */
  get cancelled(): ISignal<this, string> {
    return this._cancelled;
  }

  /** Emitted with the job's id when the user asks for the notebook cell of the job. */
  get cellRequested(): ISignal<this, string> {
    return this._cellRequested;
  }

  /** Say why the cell of the job cannot be shown (no open notebook has it). */
  showProblem(message: string): void {
    setText(this._error, message);
    this._error.hidden = false;
  }

  /** The job shown, if any. */
  get jobId(): string | null {
    return this._jobId;
  }

  /** Whether the view is on screen; the poll pauses when it is not. */
  get visible(): boolean {
    return this._poll.visible;
  }
  set visible(value: boolean) {
    this._poll.visible = value;
  }

  /** Show a job (and start tailing its log). */
  open(id: string): void {
    this._generation++;
    this._jobId = id;
    this._job = null;
    this._finished = false;
    this._cancelling = false;
    this._error.hidden = true;
    this._log.clear();
    setText(this._name, id);
    this._render();
    void this._poll.refresh();
  }

  /** Stop showing a job. */
  close(): void {
    this._generation++;
    this._jobId = null;
    this._job = null;
    this._log.clear();
  }

  /** Show the log of one attempt (the latest one is followed automatically). */
  selectAttempt(attempt: number): void {
    if (this._log.select(attempt)) {
      this._generation++;
      this._finished = false;
      void this._poll.refresh();
    }
  }

  /** Fetch now. */
  refresh(): Promise<void> {
    this._finished = false;
    return this._poll.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  private async _tick(): Promise<void> {
    const id = this._jobId;
    if (!id) {
      return;
    }
    const generation = this._generation;
    try {
      const job = await this.api.getJob(id);
      if (generation !== this._generation) {
        return;
      }
      this._job = job;
      this._log.jobSeen(
        job.attempt || 1,
        (job.attempts ?? []).map(a => a.attempt)
      );
      this._render();
      await this._log.follow((attempt, offset) => this.api.getLogs(id, { attempt, offset }));
      if (generation !== this._generation) {
        return;
      }
      this._setError(null);
      this._finished = isTerminal(job.state) && this._log.complete;
      this._render();
    } catch (error) {
      if (generation === this._generation) {
        this._setError(errorMessage(error));
      }
      throw error;
    }
  }

  /** Show a change of the log, keeping the end in view if it was. */
  private _showLog(change: LogChange): void {
    const pre = this._logNode;
    if (change.kind === 'reset') {
      pre.textContent = '';
    } else if (change.kind === 'append' || change.kind === 'replace') {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 24;
      if (change.kind === 'append') {
        pre.appendChild(document.createTextNode(change.text));
      } else {
        pre.textContent = this._log.text;
      }
      if (atBottom) {
        pre.scrollTop = pre.scrollHeight;
      }
    }
    this._renderLogStatus();
  }

  private _renderLogStatus(): void {
    const status = this._log.status(!!this._job && isTerminal(this._job.state));
    setText(this._logStatus, status);
    this._logStatus.classList.toggle('nbburst-mod-live', status === 'live');
    if (this._log.empty) {
      setText(this._logNode, '(no output)');
    }
  }

  private _setError(message: string | null): void {
    setText(this._error, message ?? '');
    setHidden(this._error, !message);
  }

  private _render(): void {
    const job = this._job;
    if (!job) {
      setHidden(this._cancel, true);
      setText(this._badge, '');
      this._badge.className = 'nbburst-state-badge';
      setHidden(this._badge, true);
      this._fields.textContent = '';
      this._fieldsKey = '';
      setHidden(this._progress, true);
      setHidden(this._message, true);
      setHidden(this._attemptLabel, true);
      return;
    }
    setText(this._name, job.name || job.id);
    setAttr(this._name, 'title', job.name ? `${job.name} (${job.id})` : job.id);
    const cls = `nbburst-state-badge ${stateClass(job.state)}`;
    if (this._badge.className !== cls) {
      this._badge.className = cls;
    }
    setText(this._badge, stateLabel(job.state));
    setHidden(this._badge, false);

    const terminal = isTerminal(job.state);
    setHidden(this._cancel, terminal);
    this._cancel.disabled = this._cancelling;
    setText(this._cancel, this._cancelling ? 'Cancelling…' : 'Cancel job');

    const attempt = job.attempt || 1;
    const rows: [string, string, string?][] = [
      ['Job', job.id],
      ['Machine', machineDetail(job)],
      ['Elapsed', formatElapsed(job.elapsed_s)],
      [
        'Cost',
        terminal || !job.cost_per_hour_usd
          ? formatSpend(job)
          : `${formatSpend(job)} (${formatRate(job.cost_per_hour_usd)})`
      ],
      ['Attempts', attempt > 1 ? `${attempt} (relaunched ${attempt - 1}×)` : String(attempt)],
      [
        'Started',
        formatTime(job.started ?? job.created),
        formatFullTime(job.started ?? job.created)
      ]
    ];
    if (job.ended) {
      rows.push(['Ended', formatTime(job.ended), formatFullTime(job.ended)]);
    }
    const progress = progressSummary(job.progress);
    if (progress) {
      rows.push(['Progress', progress]);
    }
    const workers = workersSummary(job.workers);
    if (workers) {
      rows.push(['Workers', workers]);
    }
    const kept = keptSummary(job.kept);
    if (kept) {
      rows.push(['Machine kept', kept]);
    }
    this._renderFields(rows);
    const dashboard = dashboardPath(job.id, job.workers);
    setHidden(this._dashboard, dashboard === null || terminal);
    setAttr(
      this._dashboard,
      'href',
      dashboard === null ? null : URLExt.join(this.api.serverSettings.baseUrl, dashboard)
    );

    const fraction = terminal ? null : progressFraction(job.progress);
    setHidden(this._progress, fraction === null);
    const width = fraction === null ? '0%' : `${(fraction * 100).toFixed(1)}%`;
    if (this._progressFill.style.width !== width) {
      this._progressFill.style.width = width;
    }

    setText(this._message, job.message || '');
    setHidden(this._message, !job.message);
    this._message.classList.toggle(
      'nbburst-mod-failed',
      String(job.state).toUpperCase() === 'FAILED'
    );

    this._renderAttempts();
    this._renderLogStatus();
  }

  private _renderFields(rows: [string, string, string?][]): void {
    const key = JSON.stringify(rows);
    if (key === this._fieldsKey) {
      return;
    }
    this._fieldsKey = key;
    this._fields.textContent = '';
    for (const [name, value, title] of rows) {
      this._fields.append(h('dt', {}, name), h('dd', { title: title ?? value }, value));
    }
  }

  private _renderAttempts(): void {
    const attempts = this._log.attempts;
    setHidden(this._attemptLabel, attempts.length <= 1);
    const info = new Map((this._job?.attempts ?? []).map(a => [a.attempt, a] as const));
    const latest = this._log.latest;
    const labels = attempts.map(a => {
      const i = info.get(a);
      const state = i?.state ? ` · ${stateLabel(i.state)}` : '';
      return `${a}${state}${a === latest && attempts.length > 1 ? ' (latest)' : ''}`;
    });
    const key = JSON.stringify(labels);
    if (key !== this._attemptsKey) {
      this._attemptsKey = key;
      this._attemptSelect.textContent = '';
      attempts.forEach((a, i) => {
        this._attemptSelect.appendChild(h('option', { value: String(a) }, labels[i]));
      });
    }
    const selected = String(this._log.attempt ?? latest);
    if (this._attemptSelect.value !== selected) {
      this._attemptSelect.value = selected;
    }
  }

  private async _confirmCancel(): Promise<void> {
    const job = this._job;
    const id = this._jobId;
    if (!id || !job || isTerminal(job.state) || this._cancelling) {
      return;
    }
    const name = job.name || job.id;
    const result = await showDialog({
      title: 'Cancel burst job?',
      body:
        `Cancel “${name}”? Its machine is deleted and the work it has ` +
        'not checkpointed is lost.',
      buttons: [
        Dialog.cancelButton({ label: 'Keep running' }),
        Dialog.warnButton({ label: 'Cancel job' })
      ],
      defaultButton: 0
    });
    if (!result.button.accept || this._jobId !== id) {
      return;
    }
    this._cancelling = true;
    this._render();
    try {
      const answer = await this.api.cancelJob(id);
      if (this._jobId === id && this._job && answer?.state) {
        this._job = { ...this._job, state: answer.state };
      }
      this._setError(null);
      this._cancelled.emit(id);
    } catch (error) {
      this._setError(`Could not cancel the job: ${errorMessage(error)}`);
    } finally {
      this._cancelling = false;
      this._render();
      void this.refresh();
    }
  }

  private _poll: VisiblePoll;
  private _log = new LogFollower(change => this._showLog(change));
  private _closed = new Signal<this, void>(this);
  private _cancelled = new Signal<this, string>(this);
  private _cellRequested = new Signal<this, string>(this);
  private _showCell: HTMLButtonElement;
  private _generation = 0;
  private _jobId: string | null = null;
  private _job: IJobDetail | null = null;
  private _finished = false;
  private _cancelling = false;
  private _attemptsKey = '';
  private _fieldsKey = '';
  private _dashboard = h(
    'a',
    {
      className: 'nbburst-dashboard-link',
      target: '_blank',
      rel: 'noopener noreferrer',
      title: "The Dask dashboard of the job's workers",
      hidden: true
    },
    'Dask dashboard'
  );

  private _back: HTMLButtonElement;
  private _cancel: HTMLButtonElement;
  private _name: HTMLHeadingElement;
  private _badge: HTMLSpanElement;
  private _fields: HTMLDListElement;
  private _progress: HTMLDivElement;
  private _progressFill: HTMLDivElement;
  private _message: HTMLDivElement;
  private _error: HTMLDivElement;
  private _attemptLabel: HTMLLabelElement;
  private _attemptSelect: HTMLSelectElement;
  private _logStatus: HTMLSpanElement;
  private _logNode: HTMLPreElement;
}
