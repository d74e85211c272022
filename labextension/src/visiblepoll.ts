import { Poll } from '@lumino/polling';

/** How often a view on screen is refreshed (ms). */
export const LIST_INTERVAL = 2000;

/** The longest wait between two polls after errors (ms). */
export const MAX_INTERVAL = 60000;

/** What a `VisiblePoll` fetches, and when there is something to fetch. */
export interface IVisiblePollOptions {
  /** The poll's name (for debugging). */
  name: string;
  /** One fetch; a rejection makes the poll back off, up to `MAX_INTERVAL`. */
  fetch: () => Promise<void>;
  /** Whether there is anything to fetch while the view is on screen (always, unless said). */
  due?: () => boolean;
  /** Whether something needs the fetch while the view is off screen (never, unless said). */
  offScreen?: () => boolean;
}

/**
 * The one polling rule of the sidebar's views (job list, sessions, one job's detail): fetch every
 * `LIST_INTERVAL` while the view is on screen and has something to fetch, back off after errors,
 * and stand by while the browser tab is hidden or nobody looks. A view that comes on screen is
 * refreshed at once.
 */
export class VisiblePoll {
  constructor(options: IVisiblePollOptions) {
    const due = options.due ?? (() => true);
    const offScreen = options.offScreen ?? (() => false);
    this._poll = new Poll({
      name: options.name,
      factory: options.fetch,
      frequency: { interval: LIST_INTERVAL, backoff: true, max: MAX_INTERVAL },
      standby: () => ((this._visible ? due() : offScreen()) ? 'when-hidden' : true)
    });
  }

  /** Whether the view is on screen. */
  get visible(): boolean {
    return this._visible;
  }
  set visible(value: boolean) {
    if (value === this._visible) {
      return;
    }
    this._visible = value;
    if (value) {
      void this.refresh();
    }
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Fetch now (unless there is nothing to fetch), and wait for that fetch. */
  async refresh(): Promise<void> {
    if (this._poll.isDisposed) {
      return;
    }
    await this._poll.refresh();
    await this._poll.tick;
  }

  dispose(): void {
    this._poll.dispose();
  }

  private _poll: Poll;
  private _visible = false;
}
