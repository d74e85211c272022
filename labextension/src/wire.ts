/**
 * What the nbburst server extension answers, as the panel reads it.
 *
 * The routes, their parameters and every key are specified in docs/rest-api.md (a job's keys are
 * those of `Job.info()`); change that page and the server's tests with these types. Types only:
 * nothing here runs.
 */

/** The states a job goes through (docs/architecture.md, "Job states"); `UNVERIFIED` is not one. */
export type JobState =
  | 'SUBMITTED'
  | 'PROVISIONING'
  | 'RUNNING'
  | 'PREEMPTED'
  | 'SUCCEEDED'
  | 'FAILED'
  | 'CANCELLED'
  | 'UNVERIFIED';

/** The machine a job runs on (`Job.info()["machine"]`), from its plan. */
export interface IMachineInfo {
  type: string;
  cores: number;
  memory_gb: number;
  gpu: string | null;
  gpu_count?: number | null;
  spot: boolean;
  zone: string | null;
}

/** Progress reported by the job with `nbburst.progress` (`done` is null once a loop ended). */
export interface IProgressInfo {
  done: number | null;
  total: number | null;
  desc: string;
}

/** One job, as listed by `GET /nbburst/api/jobs` (`Job.info()`). */
export interface IJobInfo {
  id: string;
  name: string;
  state: JobState | string;
  /** Set, with the reason in `message`, when the job's objects cannot be verified here. */
  unverified?: 'no key' | 'refused';
  attempt: number;
  backend: 'local' | 'gce' | string | null;
  /** `cell` or `call` (`nbburst.submit`). */
  kind?: string | null;
  machine: IMachineInfo | null;
  created: number;
  started: number | null;
  ended: number | null;
  elapsed_s: number;
  cost_usd: number;
  cost_per_hour_usd: number;
  /** What the job saved against on-demand prices. */
  saving_usd?: number;
  /** The cost by component (`vcpu`, `memory`, `gpu`, `disk`, `total`, ...). */
  cost?: { [key: string]: unknown } | null;
  progress: IProgressInfo | null;
  /** Spend against `--budget`, when the job has one. */
  budget?: IBudgetInfo | null;
  /** The job whose checkpoints this one resumed (`--resume JOB`). */
  resumed_from?: string | null;
  /** A `--workers` job's worker machines. */
  workers?: IWorkersInfo | null;
  /** `--keep`: its machine stays warm after it for later cells of its shape. */
  kept?: IKeptInfo | null;
  message: string;
}

/** A job whose machine is kept warm by `--keep` (`Job.info()["kept"]`). */
export interface IKeptInfo {
  /** The machine goes after this long without a cell (each cell of its shape renews it). */
  idle_s: number;
  /** When it goes unless another cell runs on it; null while the job runs. */
  until: number | null;
  cost_per_hour_usd: number;
}

/** A `--workers` job's worker machines (`Job.info()["workers"]`). */
export interface IWorkersInfo {
  count: number;
  /** Each worker machine and its state. */
  machines?: { name: string; state: string }[];
  /** How many workers are in each machine state. */
  states: { [state: string]: number };
  /** Their share of the job's cost. */
  cost_usd: number;
  /** The Dask dashboard's direct address, once the scheduler runs. */
  dashboard: string | null;
}

/** A job's dollar cap and what its machines have cost so far (`Job.info()["budget"]`). */
export interface IBudgetInfo {
  usd: number;
  spent: number;
  left: number;
  share: number;
}

/** One attempt of a job (a job is relaunched after a preemption). */
export interface IAttemptInfo {
  attempt: number;
  state: string;
  started: number | null;
  ended?: number | null;
  seconds?: number | null;
  machine: string;
  message?: string;
}

/** One job with its attempts, as returned by `GET /nbburst/api/jobs/{id}`. */
export interface IJobDetail extends IJobInfo {
  attempts?: IAttemptInfo[];
}

/** What `DELETE /nbburst/api/jobs/{id}` answers: the state the job ended in. */
export interface ICancelAnswer {
  id: string;
  state: string;
}

/** A slice of a job log, as returned by `GET /nbburst/api/jobs/{id}/logs`. */
export interface ILogChunk {
  attempt: number;
  attempts: number[];
  offset: number;
  next_offset: number;
  text: string;
  complete: boolean;
}

/** A warm session, as listed by `GET /nbburst/api/sessions` (`Session.info()`). */
export interface ISessionInfo {
  name: string;
  /** `RUNNING` while its machine is up, `ENDED` once it ended itself (idle), `STOPPED` once stopped. */
  state: string;
  backend: string;
  machine: string;
  cores: number;
  cells: number;
  running: number;
  /** How many blobs the session's machine holds in memory for the next cells. */
  held_blobs?: number;
  started: number;
  idle_s: number;
  /** When the session ends at the latest (epoch seconds). */
  until: number;
  cost_per_hour_usd: number;
  cost_usd: number;
}

/** `GET /nbburst/api/config`: each setting's value and where it comes from. */
export interface IConfigValues {
  values: { [key: string]: { value: unknown; source: string } };
}
