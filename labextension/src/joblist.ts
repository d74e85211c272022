import { refreshIcon } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { h, setAttr, setHidden, setText, syncRows } from './dom';
import {
  formatSpend,
  formatElapsed,
  isTerminal,
  machineSummary,
  progressFraction,
  progressSummary,
  stateClass,
  stateLabel
} from './format';
import { JobFilter, JobsModel } from './model';
import { IJobInfo } from './wire';

/** The elements of one row, kept to update it in place. */
interface IRow {
  node: HTMLLIElement;
  badge: HTMLSpanElement;
  name: HTMLSpanElement;
  elapsed: HTMLSpanElement;
  machine: HTMLSpanElement;
  cost: HTMLSpanElement;
  attempts: HTMLSpanElement;
  extra: HTMLDivElement;
  bar: HTMLDivElement;
  barFill: HTMLDivElement;
  extraText: HTMLSpanElement;
}

/**
 * The list of jobs: a header with the Running / All filter, the error and
 * empty states, and one row per job. Rows are updated in place (keyed by job
 * id) so that polling does not disturb clicks, focus or selection.
 */
export class JobListView extends Widget {
  constructor(model: JobsModel) {
    super();
    this.model = model;
    this.addClass('nbburst-list-view');

    this._runningButton = h(
      'button',
      {
        className: 'nbburst-filter-button',
        type: 'button',
        'data-filter': 'running',
        title: 'Show the jobs that are not finished'
      },
      'Running'
    );
    this._allButton = h(
      'button',
      {
        className: 'nbburst-filter-button',
        type: 'button',
        'data-filter': 'all',
        title: 'Show all jobs'
      },
      'All'
    );
    const refresh = h('button', {
      className: 'nbburst-icon-button nbburst-refresh',
      type: 'button',
      title: 'Refresh',
      'aria-label': 'Refresh'
    });
    refreshIcon.element({ container: refresh, tag: 'span' });

    const header = h(
      'div',
      { className: 'nbburst-header' },
      h('h2', { className: 'nbburst-title' }, 'Burst jobs'),
      h(
        'div',
        {
          className: 'nbburst-filter',
          role: 'group',
          'aria-label': 'Filter jobs'
        },
        this._runningButton,
        this._allButton
      ),
      refresh
    );
    this._error = h('div', {
      className: 'nbburst-error',
      role: 'alert',
      hidden: true
    });
    this._empty = h('div', { className: 'nbburst-empty', hidden: true });
    this._list = h('ul', {
      className: 'nbburst-jobs',
      'aria-label': 'Burst jobs'
    });
    this.node.append(header, this._error, this._empty, this._list);

    this._runningButton.addEventListener('click', () => {
      this.model.filter = 'running';
    });
    this._allButton.addEventListener('click', () => {
      this.model.filter = 'all';
    });
    refresh.addEventListener('click', () => {
      void this.model.refresh();
    });
    this._list.addEventListener('click', this._onListClick);
    this._list.addEventListener('keydown', this._onListKeyDown);

    this.model.changed.connect(this.update, this);
    this.update();
  }

  readonly model: JobsModel;

  /** Emitted with a job id when the user opens a job. */
  get jobSelected(): ISignal<this, string> {
    return this._jobSelected;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.changed.disconnect(this.update, this);
    super.dispose();
  }

  /** Focus the row of a job (after coming back from its detail view). */
  focusJob(id: string): void {
    const row = this._rows.get(id);
    if (row) {
      row.node.focus();
    }
  }

  protected onUpdateRequest(): void {
    this._render();
  }

  private _render(): void {
    const model = this.model;
    const filter: JobFilter = model.filter;
    setAttr(this._runningButton, 'aria-pressed', filter === 'running' ? 'true' : 'false');
    setAttr(this._allButton, 'aria-pressed', filter === 'all' ? 'true' : 'false');
    this._runningButton.classList.toggle('nbburst-mod-active', filter === 'running');
    this._allButton.classList.toggle('nbburst-mod-active', filter === 'all');

    setText(this._error, model.error ?? '');
    setHidden(this._error, !model.error);

    const jobs = model.loaded ? model.jobs : [];
    let empty = '';
    if (!model.loaded) {
      empty = model.error ? '' : 'Loading burst jobs…';
    } else if (!jobs.length) {
      empty =
        filter === 'running'
          ? 'No burst jobs are running.'
          : 'No burst jobs yet. Run a cell with %%burst to start one.';
    }
    setText(this._empty, empty);
    setHidden(this._empty, !empty);

    // Update rows in place, keyed by job id, and keep the server's order.
    syncRows(this._list, this._rows, jobs, job => job.id, createRow, updateRow);
  }

  private _onListClick = (event: MouseEvent): void => {
    const row = (event.target as HTMLElement).closest<HTMLElement>('.nbburst-job');
    const id = row?.dataset.jobId;
    if (id) {
      this._jobSelected.emit(id);
    }
  };

  private _onListKeyDown = (event: KeyboardEvent): void => {
    if (event.key !== 'Enter' && event.key !== ' ') {
      return;
    }
    const row = (event.target as HTMLElement).closest<HTMLElement>('.nbburst-job');
    const id = row?.dataset.jobId;
    if (id) {
      event.preventDefault();
      this._jobSelected.emit(id);
    }
  };

  private _runningButton: HTMLButtonElement;
  private _allButton: HTMLButtonElement;
  private _error: HTMLDivElement;
  private _empty: HTMLDivElement;
  private _list: HTMLUListElement;
  private _rows = new Map<string, IRow>();
  private _jobSelected = new Signal<this, string>(this);
}

function createRow(id: string): IRow {
  const badge = h('span', { className: 'nbburst-state-badge' });
  const name = h('span', { className: 'nbburst-job-name' });
  const elapsed = h('span', {
    className: 'nbburst-job-elapsed',
    title: 'Elapsed'
  });
  const machine = h('span', { className: 'nbburst-job-machine' });
  const cost = h('span', { className: 'nbburst-job-cost', title: 'Cost' });
  const attempts = h('span', { className: 'nbburst-job-attempts', hidden: true });
  const barFill = h('div', { className: 'nbburst-progress-fill' });
  const bar = h('div', { className: 'nbburst-progress' }, barFill);
  const extraText = h('span', { className: 'nbburst-job-extra-text' });
  const extra = h('div', { className: 'nbburst-job-extra', hidden: true }, bar, extraText);
  const node = h(
    'li',
    {
      className: 'nbburst-job',
      'data-job-id': id,
      tabindex: 0,
      role: 'button'
    },
    h('div', { className: 'nbburst-job-line' }, name, elapsed),
    h(
      'div',
      { className: 'nbburst-job-line nbburst-job-line-secondary' },
      badge,
      machine,
      h('span', { className: 'nbburst-job-cost-group' }, attempts, cost)
    ),
    extra
  );
  return {
    node,
    badge,
    name,
    elapsed,
    machine,
    cost,
    attempts,
    extra,
    bar,
    barFill,
    extraText
  };
}

function updateRow(row: IRow, job: IJobInfo): void {
  const state = stateLabel(job.state);
  const cls = `nbburst-state-badge ${stateClass(job.state)}`;
  if (row.badge.className !== cls) {
    row.badge.className = cls;
  }
  setText(row.badge, state);
  setAttr(row.badge, 'title', `State: ${state}`);
  const name = job.name || job.id;
  setText(row.name, name);
  setAttr(row.name, 'title', job.name ? `${job.name} (${job.id})` : job.id);
  setText(row.elapsed, formatElapsed(job.elapsed_s));
  const machine = machineSummary(job);
  setText(row.machine, machine);
  setAttr(row.machine, 'title', machine);
  setText(row.cost, formatSpend(job));
  const attempt = job.attempt || 1;
  setHidden(row.attempts, attempt <= 1);
  setText(row.attempts, attempt > 1 ? `×${attempt}` : '');
  setAttr(
    row.attempts,
    'title',
    attempt > 1 ? `Attempt ${attempt} (relaunched ${attempt - 1}×)` : null
  );
  setAttr(
    row.node,
    'aria-label',
    `${name}, ${state}, ${machine}, ${formatElapsed(job.elapsed_s)}, ${formatSpend(job)}`
  );
  row.node.classList.toggle('nbburst-mod-terminal', isTerminal(job.state));

  // Third line: progress while running, the message when it failed.
  let extra = '';
  let fraction: number | null = null;
  const failed = String(job.state).toUpperCase() === 'FAILED';
  if (!isTerminal(job.state) && job.progress) {
    extra = progressSummary(job.progress);
    fraction = progressFraction(job.progress);
  } else if (failed && job.message) {
    extra = job.message;
  } else if (!isTerminal(job.state) && job.message) {
    extra = job.message;
  }
  setHidden(row.extra, !extra);
  setText(row.extraText, extra);
  setAttr(row.extraText, 'title', extra || null);
  row.extra.classList.toggle('nbburst-mod-failed', failed);
  setHidden(row.bar, fraction === null);
  const width = fraction === null ? '0%' : `${(fraction * 100).toFixed(1)}%`;
  if (row.barFill.style.width !== width) {
    row.barFill.style.width = width;
  }
}
