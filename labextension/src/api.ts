import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  ICancelAnswer,
  IConfigValues,
  IJobDetail,
  IJobInfo,
  ILogChunk,
  ISessionInfo
} from './wire';

/** The REST API root, relative to the server base URL. */
export const API_ROOT = 'nbburst/api';

/** An error from the nbburst REST API, with a message fit for the panel. */
export class BurstApiError extends Error {
  constructor(
    message: string,
    readonly status: number | null = null
  ) {
    super(message);
    this.name = 'BurstApiError';
  }
}

/**
 * The client of the nbburst server extension (its routes: docs/rest-api.md).
 *
 * Every request goes through `ServerConnection.makeRequest`, which adds the
 * Jupyter token and XSRF header. Failures become `BurstApiError`s whose
 * message is meant to be shown to the user.
 */
export class BurstApi {
  constructor(serverSettings?: ServerConnection.ISettings) {
    this.serverSettings = serverSettings ?? ServerConnection.makeSettings();
  }

  readonly serverSettings: ServerConnection.ISettings;

  /** List jobs, newest first. */
  async listJobs(state: 'running' | 'all' = 'all'): Promise<IJobInfo[]> {
    const data = await this.request<{ jobs?: IJobInfo[] }>(
      `jobs?state=${encodeURIComponent(state)}`
    );
    return Array.isArray(data?.jobs) ? data.jobs : [];
  }

  /** One job with its attempts. */
  getJob(id: string): Promise<IJobDetail> {
    return this.request<IJobDetail>(`jobs/${encodeURIComponent(id)}`);
  }

  /** A slice of a job's log, from a character offset. */
  getLogs(
    id: string,
    options: { attempt?: number | null; offset?: number } = {}
  ): Promise<ILogChunk> {
    const query: string[] = [];
    if (options.attempt !== undefined && options.attempt !== null) {
      query.push(`attempt=${encodeURIComponent(String(options.attempt))}`);
    }
    query.push(`offset=${encodeURIComponent(String(options.offset ?? 0))}`);
    return this.request<ILogChunk>(`jobs/${encodeURIComponent(id)}/logs?${query.join('&')}`);
  }

  /** Cancel a job. */
  cancelJob(id: string): Promise<ICancelAnswer> {
    return this.request(`jobs/${encodeURIComponent(id)}`, {
      method: 'DELETE'
    });
  }

  /** The warm sessions, newest first, with their cost so far. */
  async listSessions(): Promise<ISessionInfo[]> {
    const data = await this.request<{ sessions?: ISessionInfo[] }>('sessions');
    return Array.isArray(data?.sessions) ? data.sessions : [];
  }

  /** End a session and its machine; its last summary. */
  stopSession(name: string): Promise<ISessionInfo> {
    return this.request(`sessions/${encodeURIComponent(name)}/stop`, { method: 'POST' });
  }

  /** The effective configuration and where each value comes from. */
  getConfig(): Promise<IConfigValues> {
    return this.request('config');
  }

  /** Make a request to the API and decode its JSON answer. */
  async request<T>(path: string, init: RequestInit = {}): Promise<T> {
    const url = URLExt.join(this.serverSettings.baseUrl, API_ROOT, path);
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.serverSettings);
    } catch (error) {
      throw new BurstApiError(`Cannot reach the Jupyter server: ${errorMessage(error)}`);
    }
    const text = await response.text();
    let data: unknown = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (!response.ok) {
      throw new BurstApiError(describeFailure(response, data), response.status);
    }
    if (text && data === null) {
      throw new BurstApiError(
        'The nbburst server extension sent an answer that is not JSON.',
        response.status
      );
    }
    return data as T;
  }
}

/** A message for any thrown value. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    return error.message;
  }
  if (typeof error === 'string') {
    return error;
  }
  try {
    return JSON.stringify(error);
  } catch {
    return String(error);
  }
}

function describeFailure(response: Response, data: unknown): string {
  const message = (data as { message?: unknown } | null)?.message;
  const serverMessage = typeof message === 'string' ? message : '';
  const status = `${response.status}${response.statusText ? ' ' + response.statusText : ''}`;
  if (response.status === 404 && !serverMessage) {
    return (
      `The nbburst server extension is not available (${status}). ` +
      'Check that it is installed and enabled: ' +
      'jupyter server extension list'
    );
  }
  if (response.status === 403 && !serverMessage) {
    return `Not allowed (${status}). Try reloading the page.`;
  }
  return serverMessage ? `${serverMessage} (${status})` : `Error ${status}`;
}
