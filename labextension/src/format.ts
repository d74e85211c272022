/**
 * Pure formatting helpers for the nbburst panel.
 *
 * This module must not import anything from JupyterLab or the DOM so that it
 * can be unit-tested with plain node (see test/format.test.js). What it formats
 * is the server's answers (wire.ts, specified in docs/rest-api.md).
 */

import { IJobInfo, IKeptInfo, IProgressInfo, ISessionInfo, IWorkersInfo } from './wire';

/** States that never change again (docs/architecture.md, "Job states"). */
export const TERMINAL_STATES: ReadonlyArray<string> = ['SUCCEEDED', 'FAILED', 'CANCELLED'];

/** A session's second line: `local · 2 cores · 3 cells (1 running)`. */
export function sessionSummary(s: ISessionInfo): string {
  const cores = `${s.cores} ${s.cores === 1 ? 'core' : 'cores'}`;
  const cells =
    `${s.cells} ${s.cells === 1 ? 'cell' : 'cells'}` + (s.running ? ` (${s.running} running)` : '');
  return [s.backend, cores, cells].join(' · ');
}

/** The time a session has left before its hard limit, from `now` (epoch seconds). */
export function sessionTimeLeft(s: ISessionInfo, now: number = Date.now() / 1000): string {
  return `${formatElapsed(Math.max(0, s.until - now))} left`;
}

/** Whether a state is terminal (the job will not change again). */
export function isTerminal(state: string | null | undefined): boolean {
  return TERMINAL_STATES.indexOf(String(state || '').toUpperCase()) !== -1;
}

/** Whether a job counts as "running" (uses, or is about to use, a machine). */
export function isActive(job: Pick<IJobInfo, 'state'>): boolean {
  return !isTerminal(job.state);
}

/** The CSS class of a state badge: `nbburst-state-running` etc. */
export function stateClass(state: string | null | undefined): string {
  const s = String(state || 'unknown')
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, '');
  return `nbburst-state-${s || 'unknown'}`;
}

/** A state for humans: `RUNNING` -> `running`. */
export function stateLabel(state: string | null | undefined): string {
  return String(state || 'unknown').toLowerCase();
}

/**
 * A duration for humans: `42s`, `1m 12s`, `2h 05m`, `3d 4h`.
 */
export function formatElapsed(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  let s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  const days = Math.floor(s / 86400);
  s -= days * 86400;
  const hours = Math.floor(s / 3600);
  s -= hours * 3600;
  const minutes = Math.floor(s / 60);
  s -= minutes * 60;
  if (days > 0) {
    return `${days}d ${hours}h`;
  }
  if (hours > 0) {
    return `${hours}h ${String(minutes).padStart(2, '0')}m`;
  }
  return `${minutes}m ${s}s`;
}

/**
 * A cost in US dollars: `$0.03`, `$12.40`, `$1,234`; tiny non-zero costs
 * show as `<$0.01` so that a running job never looks free.
 */
export function formatCost(usd: number | null | undefined): string {
  if (usd === null || usd === undefined || !isFinite(usd)) {
    return '–';
  }
  if (usd > 0 && usd < 0.005) {
    return '<$0.01';
  }
  if (usd >= 1000) {
    return '$' + Math.round(usd).toLocaleString('en-US');
  }
  return '$' + usd.toFixed(2);
}

/** A job's cost, with its budget when it has one: `$0.42 of $2.50`. */
export function formatSpend(job: IJobInfo): string {
  const cost = formatCost(job.cost_usd);
  return job.budget ? `${cost} of ${formatCost(job.budget.usd)}` : cost;
}

/** `--keep`: `warm at $0.19/h, goes at 14:05 (in 9m) unless a cell of its shape runs`; '' when not kept. */
export function keptSummary(
  kept: IKeptInfo | null | undefined,
  now: number = Date.now() / 1000
): string {
  if (!kept) {
    return '';
  }
  const price = `warm at ${formatCost(kept.cost_per_hour_usd)}/h`;
  if (kept.until === null) {
    return `${price}, goes ${formatElapsed(kept.idle_s)} after this cell unless a cell of its shape runs`;
  }
  const left = formatElapsed(Math.max(0, kept.until - now));
  return `${price}, goes at ${formatTime(kept.until)} (in ${left}) unless a cell of its shape runs`;
}

/** A job's workers: `2 workers: 1 RUNNING, 1 PROVISIONING ($0.02)`; '' without workers. */
export function workersSummary(workers: IWorkersInfo | null | undefined): string {
  if (!workers || !workers.count) {
    return '';
  }
  const states = Object.entries(workers.states)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([state, n]) => `${n} ${state}`)
    .join(', ');
  const noun = workers.count === 1 ? 'worker' : 'workers';
  return `${workers.count} ${noun}: ${states} (${formatCost(workers.cost_usd)})`;
}

/**
 * The path (under the server's base URL) of a job's Dask dashboard page, through
 * the server's proxy, which redirects to the direct address when it cannot reach
 * it; null while the job has no dashboard.
 */
export function dashboardPath(
  jobId: string,
  workers: IWorkersInfo | null | undefined
): string | null {
  if (!workers?.dashboard) {
    return null;
  }
  const page = workers.dashboard.replace(/^https?:\/\/[^/]*\/?/, '');
  return `nbburst/dask/${encodeURIComponent(jobId)}/${page}`;
}

/** An hourly rate: `$1.23/h`. */
export function formatRate(usdPerHour: number | null | undefined): string {
  const cost = formatCost(usdPerHour);
  return cost === '–' ? cost : `${cost}/h`;
}

/**
 * A one-line machine summary: `n2-standard-64 · spot`,
 * `g2-standard-8 · nvidia-l4 · on-demand`, or the backend when the machine is
 * not known yet (`local`, `gce`).
 */
export function machineSummary(job: Pick<IJobInfo, 'machine' | 'backend'>): string {
  const m = job.machine;
  if (!m) {
    return job.backend || '';
  }
  const parts: string[] = [];
  parts.push(m.type || job.backend || 'machine');
  if (m.gpu) {
    parts.push(m.gpu);
  }
  if (job.backend !== 'local') {
    parts.push(m.spot ? 'spot' : 'on-demand');
  }
  return parts.join(' · ');
}

/** A longer machine description for the detail view. */
export function machineDetail(job: Pick<IJobInfo, 'machine' | 'backend'>): string {
  const m = job.machine;
  if (!m) {
    return job.backend ? `${job.backend} (not provisioned yet)` : '–';
  }
  const parts = [machineSummary(job)];
  const size: string[] = [];
  if (m.cores) {
    size.push(`${m.cores} cores`);
  }
  if (m.memory_gb) {
    size.push(`${formatNumber(m.memory_gb)} GB`);
  }
  if (size.length) {
    parts.push(size.join(', '));
  }
  if (m.zone) {
    parts.push(m.zone);
  }
  return parts.join(' · ');
}

/** A progress summary: `12/500 fits`, `37%`, `1,204 rows`. */
export function progressSummary(p: IProgressInfo | null | undefined): string {
  if (!p || p.done === null || p.done === undefined) {
    return '';
  }
  const desc = p.desc ? ` ${p.desc}` : '';
  if (p.total) {
    return `${formatNumber(p.done)}/${formatNumber(p.total)}${desc}`;
  }
  return `${formatNumber(p.done)}${desc}`;
}

/** Progress as a fraction in [0, 1], or null when the total is unknown. */
export function progressFraction(p: IProgressInfo | null | undefined): number | null {
  if (!p || p.done === null || !p.total || p.total <= 0) {
    return null;
  }
  return Math.min(1, Math.max(0, p.done / p.total));
}

/** The status-bar text: `2 burst jobs running · $3.10/h`. */
export function statusText(jobs: IJobInfo[]): string {
  const active = jobs.filter(isActive);
  if (!active.length) {
    return '';
  }
  const rate = active.reduce((sum, j) => sum + (j.cost_per_hour_usd || 0), 0);
  const noun = active.length === 1 ? 'burst job' : 'burst jobs';
  return `${active.length} ${noun} running · ${formatRate(rate)}`;
}

/**
 * A short local time for an epoch in seconds: the time alone for today,
 * the date and time otherwise.
 */
export function formatTime(epoch: number | null | undefined, now: Date = new Date()): string {
  if (!epoch) {
    return '–';
  }
  const d = new Date(epoch * 1000);
  const time: Intl.DateTimeFormatOptions = { hour: '2-digit', minute: '2-digit' };
  if (d.toDateString() === now.toDateString()) {
    return d.toLocaleTimeString(undefined, time);
  }
  return d.toLocaleString(undefined, { month: 'short', day: 'numeric', ...time });
}

/** A full local date-time for an epoch in seconds (for tooltips). */
export function formatFullTime(epoch: number | null | undefined): string {
  return epoch ? new Date(epoch * 1000).toLocaleString() : '–';
}

function formatNumber(n: number): string {
  if (Number.isInteger(n)) {
    return n.toLocaleString('en-US');
  }
  return n.toLocaleString('en-US', { maximumFractionDigits: 1 });
}

/** Matches ANSI escape sequences (colours, cursor moves) in terminal output. */
// eslint-disable-next-line no-control-regex
const ANSI_ESCAPE = /\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)/g;

/**
 * Make terminal output readable in a `<pre>`: drop ANSI escape sequences and
 * let a carriage return overwrite its line, as a terminal does (progress bars
 * such as tqdm redraw one line with `\r`).
 */
export function cleanLog(raw: string): string {
  const text = raw.replace(ANSI_ESCAPE, '').replace(/\r\n/g, '\n');
  if (text.indexOf('\r') === -1) {
    return text;
  }
  return text
    .split('\n')
    .map(line => {
      // A trailing \r means the line is about to be redrawn: keep what is shown.
      const trimmed = line.replace(/\r+$/, '');
      const i = trimmed.lastIndexOf('\r');
      return i === -1 ? trimmed : trimmed.slice(i + 1);
    })
    .join('\n');
}
