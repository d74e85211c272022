/**
 * Following one job's log through `GET /nbburst/api/jobs/{id}/logs` (docs/rest-api.md): which
 * attempt is shown, how far its log has been read, whether it is complete, and the text kept.
 *
 * No DOM and no JupyterLab here, so that node unit-tests it (test/logfollower.test.js); the job's
 * detail view (jobdetail.ts) shows what it reports.
 */

import { cleanLog } from './format';
import { ILogChunk } from './wire';

/** The most log text kept (characters); older text is dropped, whole lines at a time. */
export const LOG_LIMIT = 2_000_000;

/** At most this many log requests per `follow`, to catch up on a long log. */
export const LOG_PAGES_PER_FOLLOW = 8;

/** What stands in place of the text dropped above `LOG_LIMIT`. */
export const TRIMMED_NOTE = '[… earlier output not shown …]\n';

/** Text a terminal would redraw: what comes after it changes lines already shown. */
const REDRAWS = /[\r\x1b]/; // eslint-disable-line no-control-regex

/**
 * What changed, for the view to show:
 * - `reset`: the log starts over (another attempt, another job): show nothing yet;
 * - `append`: `text` follows what is shown, as is;
 * - `replace`: show `LogFollower.text` in place of everything (a redraw, a trim, a restart);
 * - `read`: nothing new to show, but the offset or `complete` may have moved.
 */
export type LogChange =
  { kind: 'reset' } | { kind: 'append'; text: string } | { kind: 'replace' } | { kind: 'read' };

/** Reads a slice of the log: one attempt's (null: the latest) from a character offset. */
export type LogReader = (attempt: number | null, offset: number) => Promise<ILogChunk>;

/** The log's state for humans: `live`, `finishing…` (the job ended, its last chunks are on their way), `complete`. */
export type LogStatus = '' | 'live' | 'finishing…' | 'complete';

/**
 * The log of one job, followed page by page: the latest attempt by default (a relaunch is
 * followed), or one chosen attempt. Answers that arrive after the log started over are dropped.
 */
export class LogFollower {
  /** `onChange` is told every change, in order; `limit`: the most text kept. */
  constructor(
    private readonly onChange: (change: LogChange) => void = () => undefined,
    private readonly limit: number = LOG_LIMIT
  ) {}

  /** The attempt whose log is followed; null until the server named the latest. */
  get attempt(): number | null {
    return this._attempt;
  }

  /** How many characters of the attempt's log have been read. */
  get offset(): number {
    return this._offset;
  }

  /** Whether the attempt's log has been read to its end, and will not grow. */
  get complete(): boolean {
    return this._complete;
  }

  /** Every attempt of the job known so far, in order. */
  get attempts(): ReadonlyArray<number> {
    return this._attempts;
  }

  /** The latest attempt known (1 before any is). */
  get latest(): number {
    return this._attempts.length ? this._attempts[this._attempts.length - 1] : 1;
  }

  /** Whether a relaunch switches to the new attempt's log (false once an earlier one was chosen). */
  get followsLatest(): boolean {
    return this._followLatest;
  }

  /** The text to show: the log kept, cleaned as a terminal shows it, with a note where text was dropped. */
  get text(): string {
    return (this._trimmed ? TRIMMED_NOTE : '') + cleanLog(this._raw);
  }

  /** Whether the attempt's log is known to be complete and empty. */
  get empty(): boolean {
    return !this._raw && this._attempt !== null && this._complete;
  }

  /** The log's state, given whether the job has ended. */
  status(jobEnded: boolean): LogStatus {
    if (this._attempt === null && this._offset === 0) {
      return '';
    }
    if (this._complete) {
      return 'complete';
    }
    return jobEnded ? 'finishing…' : 'live';
  }

  /** Forget the job: the next `follow` starts on the latest attempt of whatever the reader reads. */
  clear(): void {
    this._attempts = [];
    this._followLatest = true;
    this._restart(null);
  }

  /** Show one attempt's log; the latest one is followed through relaunches. True if the log starts over. */
  select(attempt: number): boolean {
    this._followLatest = attempt >= Math.max(attempt, ...this._attempts);
    if (attempt === this._attempt) {
      return false;
    }
    this._restart(attempt);
    return true;
  }

  /** What the job says of its attempts (`attempts`, and `current`, its latest): a relaunch is followed. */
  jobSeen(current: number, attempts: number[]): void {
    this._merge(attempts, current);
    if (this._followLatest && this._attempt !== null && current > this._attempt) {
      this._restart(current);
    }
  }

  /**
   * Read what is new, up to `pages` requests: until the log is complete, or a request brings nothing
   * new. A reader's failure is thrown after what was read before it is kept.
   */
  async follow(read: LogReader, pages: number = LOG_PAGES_PER_FOLLOW): Promise<void> {
    for (let page = 0; page < pages && !this._complete; page++) {
      const epoch = this._epoch;
      const chunk = await read(this._attempt, this._offset);
      if (epoch !== this._epoch) {
        return; // the log started over while the request was out: its answer is of no use
      }
      if (!this._take(chunk)) {
        return;
      }
    }
  }

  /** Start the log over on `attempt` (null: the latest). */
  private _restart(attempt: number | null): void {
    this._epoch++;
    this._attempt = attempt;
    this._offset = 0;
    this._complete = false;
    this._raw = '';
    this._trimmed = false;
    this.onChange({ kind: 'reset' });
  }

  /** Take one answer; whether it brought anything new (another page may follow). */
  private _take(chunk: ILogChunk): boolean {
    if (this._attempt === null) {
      this._attempt = chunk.attempt;
    } else if (chunk.attempt !== this._attempt) {
      this._restart(chunk.attempt); // the server answered for another attempt: start over with it
    }
    this._merge(chunk.attempts ?? [], chunk.attempt);
    const text = chunk.text ?? '';
    const moved = chunk.offset !== this._offset;
    if (moved && chunk.offset === 0) {
      this._raw = ''; // the server restarted from the beginning: replace the text
    }
    const change = this._add(text, moved);
    const next =
      typeof chunk.next_offset === 'number' ? chunk.next_offset : this._offset + text.length;
    const advanced = next > this._offset;
    this._offset = next;
    this._complete = !!chunk.complete;
    this.onChange(change);
    return advanced && !!text;
  }

  /** Add `text` to the log kept (`replace`: what is shown no longer matches); how the view must change. */
  private _add(text: string, replace: boolean): LogChange {
    if (!text && !replace) {
      return { kind: 'read' };
    }
    const lastLine = this._raw.slice(this._raw.lastIndexOf('\n') + 1);
    this._raw += text;
    if (this._raw.length > this.limit) {
      const cut = this._raw.indexOf('\n', this._raw.length - this.limit);
      this._raw = this._raw.slice(cut === -1 ? this._raw.length - this.limit : cut + 1);
      this._trimmed = true;
      replace = true;
    }
    if (replace || REDRAWS.test(text) || REDRAWS.test(lastLine)) {
      return { kind: 'replace' };
    }
    return { kind: 'append', text };
  }

  private _merge(attempts: number[], current: number): void {
    const all = new Set<number>(this._attempts);
    for (const a of attempts) {
      if (a > 0) {
        all.add(a);
      }
    }
    for (let a = 1; a <= current; a++) {
      all.add(a);
    }
    this._attempts = Array.from(all).sort((a, b) => a - b);
  }

  private _epoch = 0;
  private _attempt: number | null = null;
  private _offset = 0;
  private _complete = false;
  private _raw = '';
  private _trimmed = false;
  private _attempts: number[] = [];
  private _followLatest = true;
}
