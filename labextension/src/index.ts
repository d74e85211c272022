import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';

import { BurstApi } from './api';
import { burstIcon } from './icons';
import { JobsModel } from './model';
import { BurstSidebar, SIDEBAR_ID, SIDEBAR_TITLE } from './sidebar';
import { bridgeJobViews, refreshStaticSummaries, showJobCell } from './notebook';
import { BurstStatus } from './statusbar';

/** The command that opens the sidebar. */
const CMD_SHOW = 'nbburst:show-jobs';

/** The command that opens one job in the sidebar (`{ id }`). */
const CMD_SHOW_JOB = 'nbburst:show-job';

/** The rank of the sidebar tab: after the file browser (100). */
const SIDEBAR_RANK = 150;

/**
 * The nbburst plugin: the "Burst jobs" sidebar and status-bar item.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'nbburst:plugin',
  description: 'Lists nbburst jobs: state, machine, cost and live logs.',
  autoStart: true,
  optional: [ILayoutRestorer, IStatusBar, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null
  ) => {
    const api = new BurstApi(app.serviceManager.serverSettings);
    const model = new JobsModel(api);
    const sidebar = new BurstSidebar(model);

    app.shell.add(sidebar, 'left', { rank: SIDEBAR_RANK });
    if (restorer) {
      restorer.add(sidebar, SIDEBAR_ID);
    }

    app.commands.addCommand(CMD_SHOW, {
      label: 'Show Burst Jobs',
      caption: 'Show the nbburst jobs sidebar',
      icon: burstIcon,
      execute: () => {
        app.shell.activateById(SIDEBAR_ID);
      }
    });
    if (palette) {
      palette.addItem({ command: CMD_SHOW, category: SIDEBAR_TITLE });
    }

    // A job view in a notebook links to its job in the sidebar, and the sidebar's job to its cell.
    app.commands.addCommand(CMD_SHOW_JOB, {
      label: 'Show Burst Job',
      caption: 'Show one nbburst job in the sidebar',
      execute: args => {
        const id = String(args.id ?? '');
        app.shell.activateById(SIDEBAR_ID);
        if (id) {
          sidebar.showJob(id);
        }
      }
    });
    sidebar.showCell = id => showJobCell(app, id);
    bridgeJobViews(app, api, id => void app.commands.execute(CMD_SHOW_JOB, { id }));
    refreshStaticSummaries(api);

    if (statusBar) {
      const item = new BurstStatus(model, () => {
        void app.commands.execute(CMD_SHOW);
      });
      model.backgroundNeeded = true;
      statusBar.registerStatusItem('nbburst:status', {
        item,
        align: 'left',
        rank: 50,
        isActive: () => item.isActive,
        activeStateChanged: model.changed
      });
    }
  }
};

export default plugin;
