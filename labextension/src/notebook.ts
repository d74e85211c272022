import { JupyterFrontEnd } from '@jupyterlab/application';
import { showErrorMessage } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';

import { BurstApi, errorMessage } from './api';
import { formatCost, formatElapsed, formatTime, isTerminal } from './format';

/**
 * The bridge between the job views in notebooks and the rest of JupyterLab.
 *
 * A job view is an ipywidget in a cell's output. Its button callbacks run in
 * the kernel, which cannot run them while the cell waits for the job (the
 * kernel is busy). So clicks are taken here first:
 *
 * - Cancel goes through the server extension (which cancels the job in the
 *   Store; the waiting cell sees the job end), busy kernel or not.
 * - Detach, while the view's cell waits, interrupts the kernel: an interrupted
 *   `%%burst` cell detaches from its job. Otherwise the widget's own callback runs.
 * - "in the sidebar" opens the job in the Burst jobs sidebar.
 *
 * And the other way, `showJobCell` finds the cell whose output follows a job
 * (display metadata `{"nbburst": {"job": id}}`), for the sidebar's "Show cell".
 *
 * Once a widget's model is gone (a restarted kernel), the notebook shows the
 * view's static summary instead (style/notebook.css); `refreshStaticSummaries`
 * keeps the state line of those of unfinished jobs current from the server.
 *
 * This module knows notebooks only through the public shape of their widgets
 * (`content.widgets`, `model.outputs`, `sessionContext`), so the extension does
 * not depend on the notebook package.
 */

/** Classes of the job view (nbburst.ui.style) that the bridge acts on. */
const VIEW = '.nbburst-view';
const CANCEL = '.nbburst-view-cancel';
const DETACH = '.nbburst-view-detach';
/** The attribute of the "in the sidebar" link, and of the element that holds the view's job id. */
const OPEN = 'data-nbburst-open';
const JOB = 'data-nbburst-job';
/** The key of the display metadata that names a job. */
const METADATA_KEY = 'nbburst';
/** The static summary of a view, and its line the server's answer refreshes. */
const STATIC = '.nbburst-view-static';
const LIVE = '[data-nbburst-live]';
/** How often the static summaries on screen of unfinished jobs are refreshed (ms). */
const STATIC_INTERVAL = 10_000;

/** What the bridge needs of a notebook panel. */
interface INotebookLike {
  id: string;
  node: HTMLElement;
  content: {
    widgets: ReadonlyArray<ICellLike>;
    activeCellIndex: number;
    scrollToCell?: (cell: ICellLike, align?: string) => Promise<void>;
  };
  sessionContext?: {
    session?: { kernel?: { interrupt(): Promise<void> } | null } | null;
  };
}

interface ICellLike {
  node: HTMLElement;
  model: {
    outputs?: {
      length: number;
      get(index: number): { metadata?: { [METADATA_KEY]?: { job?: unknown } } };
    };
    executionState?: string;
  };
}

function isNotebook(widget: unknown): widget is INotebookLike {
  const w = widget as INotebookLike;
  return !!w && !!w.content && Array.isArray(w.content.widgets) && 'activeCellIndex' in w.content;
}

/** The open notebooks, in the main area. */
function notebooks(app: JupyterFrontEnd): INotebookLike[] {
  const found: INotebookLike[] = [];
  for (const widget of app.shell.widgets('main')) {
    if (isNotebook(widget)) {
      found.push(widget);
    }
  }
  return found;
}

/** Whether an output of `cell` follows job `id`. */
function cellShowsJob(cell: ICellLike, id: string): boolean {
  const outputs = cell.model.outputs;
  if (!outputs) {
    return false;
  }
  for (let i = 0; i < outputs.length; i++) {
    const meta = outputs.get(i).metadata?.[METADATA_KEY];
    if (meta && meta.job === id) {
      return true;
    }
  }
  return false;
}

/** Activate and scroll to the last cell that follows job `id`; false if no open notebook has one. */
export function showJobCell(app: JupyterFrontEnd, id: string): boolean {
  for (const panel of notebooks(app)) {
    const cells = panel.content.widgets;
    for (let index = cells.length - 1; index >= 0; index--) {
      if (cellShowsJob(cells[index], id)) {
        app.shell.activateById(panel.id);
        panel.content.activeCellIndex = index;
        if (panel.content.scrollToCell) {
          void panel.content.scrollToCell(cells[index], 'center');
        } else {
          cells[index].node.scrollIntoView({ block: 'center' });
        }
        return true;
      }
    }
  }
  return false;
}

/** The job id of the view around `node`. */
function viewJob(node: Element): string | null {
  const view = node.closest(VIEW);
  return view?.querySelector(`[${JOB}]`)?.getAttribute(JOB) ?? null;
}

/**
 * Take clicks on job views in notebooks (capture phase: before the widget's own handler).
 * `showJob` opens a job in the sidebar.
 */
export function bridgeJobViews(
  app: JupyterFrontEnd,
  api: BurstApi,
  showJob: (id: string) => void
): void {
  document.addEventListener(
    'click',
    event => {
      const target = event.target as Element | null;
      if (!target || !target.closest || !target.closest('.jp-Notebook')) {
        return;
      }
      const open = target.closest(`[${OPEN}]`);
      if (open) {
        event.preventDefault();
        showJob(open.getAttribute(OPEN) ?? '');
        return;
      }
      const cancel = target.closest(CANCEL) as HTMLButtonElement | null;
      const job = cancel ? viewJob(cancel) : null;
      if (cancel && job) {
        event.preventDefault();
        event.stopPropagation();
        cancel.disabled = true;
        cancel.title = 'Cancelling…';
        api.cancelJob(job).catch(error => {
          cancel.disabled = false;
          void showErrorMessage('Cannot cancel the burst job', errorMessage(error));
        });
        return;
      }
      const detach = target.closest(DETACH);
      if (detach) {
        // Only the cell that shows the view waits for its job (the kernel's status says little: requests on
        // other channels report "idle" while a cell runs).
        const panel = notebooks(app).find(p => p.node.contains(detach));
        const cell = panel?.content.widgets.find(c => c.node.contains(detach));
        const kernel = panel?.sessionContext?.session?.kernel;
        if (kernel && cell?.model.executionState === 'running') {
          event.preventDefault();
          event.stopPropagation();
          void kernel.interrupt();
        }
      }
    },
    true
  );
}

/** Refresh the static summaries on screen whose job had not ended when their kernel last wrote them. */
async function refreshShownSummaries(api: BurstApi): Promise<void> {
  const shown = Array.from(document.querySelectorAll<HTMLElement>(`.jp-Notebook ${STATIC}`)).filter(
    node =>
      node.offsetParent !== null &&
      node.dataset.nbburstJob &&
      node.dataset.nbburstRefresh !== 'off' &&
      !isTerminal(node.dataset.nbburstState)
  );
  for (const node of shown) {
    const line = node.querySelector<HTMLElement>(LIVE);
    try {
      const job = await api.getJob(node.dataset.nbburstJob ?? '');
      node.dataset.nbburstState = job.state;
      if (line) {
        const cost = job.backend === 'local' ? 'local' : formatCost(job.cost_usd);
        line.textContent =
          `${job.state} · attempt ${job.attempt} · ${formatElapsed(job.elapsed_s)} · ${cost}` +
          ` (as the Jupyter server sees it at ${formatTime(Date.now() / 1000)})`;
      }
    } catch {
      // The job is not in the server's Store (or is gone): the summary stays as its kernel wrote it.
      node.dataset.nbburstRefresh = 'off';
    }
  }
}

/** Keep the static summaries of unfinished jobs current while the page is visible. */
export function refreshStaticSummaries(api: BurstApi): Poll {
  return new Poll({
    name: 'nbburst:static-summaries',
    factory: () => refreshShownSummaries(api),
    frequency: { interval: STATIC_INTERVAL, backoff: false },
    standby: 'when-hidden'
  });
}
