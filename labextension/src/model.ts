import { ISignal, Signal } from '@lumino/signaling';

import { BurstApi, errorMessage } from './api';
import { isActive } from './format';
import { VisiblePoll } from './visiblepoll';
import { IJobInfo } from './wire';

/** How often the running jobs are refreshed for the status bar only (ms). */
export const BACKGROUND_INTERVAL = 15000;

export type JobFilter = 'running' | 'all';

/**
 * The list of jobs, shared by the sidebar and the status-bar item.
 *
 * One `VisiblePoll` fetches it: every 2 s while the list is on screen, every 15 s
 * when only the status bar needs it (sidebar collapsed or showing one job), never while the browser tab is hidden or
 * nobody needs it. Errors back off (up to a minute) and are kept in `error`
 * for the views to show; they are never thrown to the caller.
 */
export class JobsModel {
  constructor(api: BurstApi) {
    this.api = api;
    this._poll = new VisiblePoll({
      name: 'nbburst:jobs',
      fetch: () => this._tick(),
      offScreen: () => this._backgroundNeeded
    });
  }

  readonly api: BurstApi;

  /** Emitted after every fetch (successful or not) and on filter changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The jobs matching `filter`, newest first (from the last fetch). */
  get jobs(): ReadonlyArray<IJobInfo> {
    return this._jobs;
  }

  /** The jobs that are not in a terminal state (from the last fetch). */
  get running(): ReadonlyArray<IJobInfo> {
    return this._running;
  }

  /** The message of the last failed fetch, or null after a success. */
  get error(): string | null {
    return this._error;
  }

  /** Whether the list has been fetched at least once since the last change. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Which jobs the sidebar lists. */
  get filter(): JobFilter {
    return this._filter;
  }
  set filter(value: JobFilter) {
    if (value === this._filter) {
      return;
    }
    this._filter = value;
    this._loaded = false;
    this._changed.emit();
    void this.refresh();
  }

  /** Whether the job list is on screen; it is only polled fast then. */
  get listVisible(): boolean {
    return this._poll.visible;
  }
  set listVisible(value: boolean) {
    this._poll.visible = value;
  }

  /** Whether something (the status bar) needs the running jobs in the background. */
  get backgroundNeeded(): boolean {
    return this._backgroundNeeded;
  }
  set backgroundNeeded(value: boolean) {
    this._backgroundNeeded = value;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Fetch now. */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  dispose(): void {
    if (this._poll.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _tick(): Promise<void> {
    const now = Date.now();
    if (!this.listVisible && this._lastFetch && now - this._lastFetch < BACKGROUND_INTERVAL) {
      return;
    }
    const filter: JobFilter = this.listVisible ? this._filter : 'running';
    this._lastFetch = now;
    try {
      const jobs = await this.api.listJobs(filter);
      this._error = null;
      this._running = jobs.filter(isActive);
      if (filter === this._filter) {
        this._jobs = jobs;
        this._loaded = true;
      }
    } catch (error) {
      this._error = errorMessage(error);
      this._changed.emit();
      // Rethrow so that the poll backs off.
      throw error;
    }
    this._changed.emit();
  }

  private _poll: VisiblePoll;
  private _changed = new Signal<this, void>(this);
  private _jobs: IJobInfo[] = [];
  private _running: IJobInfo[] = [];
  private _error: string | null = null;
  private _loaded = false;
  private _filter: JobFilter = 'all';
  private _backgroundNeeded = false;
  private _lastFetch = 0;
}
