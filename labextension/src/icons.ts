import { LabIcon } from '@jupyterlab/ui-components';

/**
 * The sidebar icon: a cloud with a lightning bolt. `jp-icon3` makes
 * JupyterLab recolour it for the light and dark themes.
 */
const burstSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M18.7 9.2A6.5 6.5 0 0 0 6.2 8.1 4.9 4.9 0 0 0 6.5 17.9h3.2l.9-1.8H6.5a3.1 3.1 0 0 1-.1-6.2h1.2l.3-1.1a4.7 4.7 0 0 1 9.1.7l.2 1.1h1.1a2.6 2.6 0 0 1 .2 5.2h-2.3l-.9 1.8h3.1a4.4 4.4 0 0 0 .3-8.8z"/>
    <path d="M13.4 10.2 9.3 17.2h3l-1.2 5.6 4.6-7.8h-3.1z"/>
  </g>
</svg>`;

export const burstIcon = new LabIcon({
  name: 'nbburst:burst',
  svgstr: burstSvg
});
