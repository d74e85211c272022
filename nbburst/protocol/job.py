"""The job protocol: what the client and the agent agree on, and nothing else.

A job is a folder in the Store (see ``JobLayout``). The client writes the
inputs, then ``spec.json`` last: its existence means the job exists. The agent
writes per-attempt status and log chunks, the result or error (create-only),
and finally ``terminal.json`` (create-only): the one commit point of the
job's end, so a result and a cancellation can never both win.

This module must stay importable without third-party packages: the agent
imports it on a fresh machine before anything else is installed.
"""

from __future__ import annotations

import calendar
import enum
import json
import re
import secrets
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar


class State(str, enum.Enum):
    SUBMITTED = "SUBMITTED"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    def __str__(self) -> str:
        return self.value


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})

#: A heartbeat older than this means the agent is gone (crashed, preempted, killed).
HEARTBEAT_SECONDS = 2.0
STALE_AFTER_SECONDS = 15.0
#: A started machine whose heartbeat is this late is asked whether it still exists.
QUICK_STALE_SECONDS = 2 * HEARTBEAT_SECONDS + 1.0
#: The backend is asked about a job's machine at most this often by one Job handle.
DESCRIBE_SECONDS = 2.0

_ID_RE = re.compile(r"^[a-z][a-z0-9-]{2,40}$")


def new_job_id() -> str:
    """A sortable, DNS-safe id (it also names the machine): ``b20261121-172640-3fa2c1``."""
    return time.strftime("b%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def job_id_time(job_id: str) -> float | None:
    """When a job id made by :func:`new_job_id` was made (seconds since the epoch); None for other ids."""
    try:
        return float(calendar.timegm(time.strptime(job_id[:16], "b%Y%m%d-%H%M%S")))
    except ValueError:
        return None


def valid_job_id(job_id: str) -> bool:
    return bool(_ID_RE.match(job_id))


class JobLayout:
    """Keys of one job's objects, relative to the Store root."""

    def __init__(self, job_id: str):
        if not valid_job_id(job_id):
            raise ValueError(f"not a job id: {job_id!r}")
        self.job_id = job_id
        self.prefix = f"jobs/{job_id}/"

    def key(self, name: str) -> str:
        return self.prefix + name

    spec = property(lambda self: self.key("spec.json"))
    code = property(lambda self: self.key("code.py"))
    inputs = property(lambda self: self.key("inputs.json"))
    env = property(lambda self: self.key("env.json"))
    dist_manifest = property(lambda self: self.key("dist/manifest.json"))
    result = property(lambda self: self.key("result.pkl"))
    error = property(lambda self: self.key("error.pkl"))
    terminal = property(lambda self: self.key("terminal.json"))
    cancel = property(lambda self: self.key("cancel.json"))
    lease_prefix = property(lambda self: self.key("lease/"))  # lease/<n>.json: the supervisor's lease (supervisor.py)
    relaunch = property(lambda self: self.key("relaunch.json"))  # the supervisor's retry state and history
    files = property(lambda self: self.key("files.json"))
    checkpoints = property(lambda self: self.key("checkpoints/"))
    status_prefix = property(lambda self: self.key("status/"))
    logs_prefix = property(lambda self: self.key("logs/"))

    def status(self, attempt: int) -> str:
        return self.key(f"status/{attempt:04d}.json")

    claims_prefix = property(lambda self: self.key("claims/"))

    def claim(self, attempt: int) -> str:
        """Created once when ``attempt`` is claimed and never rewritten: its Store time is the claim's (fence.py)."""
        return self.key(f"claims/{attempt:04d}")

    def cluster(self, attempt: int) -> str:
        """Where attempt ``attempt``'s Dask scheduler says its address (``--workers``, agent/scaleout.py)."""
        return self.key(f"cluster/{attempt:04d}.json")

    cluster_prefix = property(lambda self: self.key("cluster/"))

    def log_chunk(self, attempt: int, seq: int) -> str:
        return self.key(f"logs/{attempt:04d}/{seq:08d}")

    def attempt_logs(self, attempt: int) -> str:
        return self.key(f"logs/{attempt:04d}/")


BLOBS_PREFIX = "blobs/"


def blob_key(digest: str) -> str:
    return BLOBS_PREFIX + digest


def jobs_prefix() -> str:
    return "jobs/"


def job_url(root: str, job_id: str) -> str:
    """The URL of a job's folder, ``<store root>/jobs/<id>``: what the agent is started with."""
    return f"{root}/jobs/{job_id}"


def split_job_url(url: str) -> tuple[str, str]:
    """``<store root>/jobs/<id>`` -> (store root, job id); ValueError when ``url`` is not a job URL."""
    root, sep, job_id = url.rstrip("/").rpartition("/jobs/")
    if not sep:
        raise ValueError(f"{url!r} is not a job URL (<store root>/jobs/<job id>)")
    return root, job_id


@dataclass
class Resources:
    """What the user asked for; the Machines adapter turns it into a machine."""

    cores: int | None = None
    memory_gb: float | None = None
    machine_type: str | None = None
    gpu: str | None = None
    gpu_count: int = 0
    on_demand: bool = False
    zone: str | None = None
    image: str | None = None
    image_family: str | None = None
    workers: int | None = None
    fallback_on_demand: bool = False  # relaunch on a standard VM when spot capacity is out


@dataclass
class JobSpec:
    """Everything needed to run the job, written last (its existence = the job exists).

    ``digests`` pins the sha256 of code.py, inputs.json and env.json, and the
    spec is sealed under the per-job key (:mod:`.sealed`), so the agent can
    prove that nothing it is about to execute was altered.
    """

    job_id: str
    name: str
    backend: str
    kind: str  # "cell" (a notebook cell) or "call" (nbburst.submit)
    resources: Resources
    timeout_s: float
    max_restarts: int
    outputs: list[str] | None  # names to send back; None = all assigned names
    deleted: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    workdir_tail: list[str] = field(default_factory=list)  # the cell's working folder's own and parents' names
    folders: list[str] = field(default_factory=list)  # the working folder's subfolders, made before the cell
    owner: str = ""
    created: float = field(default_factory=time.time)
    client_version: str = ""
    python: str = ""
    digests: dict[str, str] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)  # the machine the adapter chose, and why
    resumed_from: str = ""  # the job whose checkpoints this one began with (--resume)
    budget_usd: float | None = None  # what the job's machines may cost in all (--budget); a launch gets what is left
    kept_s: float = 0.0  # --keep: its machine stays warm for later cells until idle this long after its last one
    code_name: str = ""  # the file name the kernel gives the cell's code; the machine compiles it under that name

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> JobSpec:
        data = json.loads(raw)
        data["resources"] = Resources(**data.get("resources", {}))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


_R = TypeVar("_R", bound="_StateRecord")


class _StateRecord:
    """JSON round trip of a record with a ``state``; unknown keys (from newer versions) are ignored."""

    state: State

    def to_json(self) -> bytes:
        data = asdict(self)  # type: ignore[call-overload]
        data["state"] = self.state.value
        return json.dumps(data).encode()

    @classmethod
    def from_json(cls: type[_R], raw: bytes | str) -> _R:
        data = json.loads(raw)
        data["state"] = State(data["state"])
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Status(_StateRecord):
    """One attempt's state, rewritten by the agent at every heartbeat."""

    attempt: int
    state: State
    heartbeat: float = field(default_factory=time.time)
    started: float = field(default_factory=time.time)
    machine: str = ""
    message: str = ""
    progress: dict[str, Any] | None = None  # {"done": n, "total": m, "desc": str}
    launched: float = 0.0  # when the machine was started (0: a launch is still in progress)


@dataclass
class Terminal(_StateRecord):
    """The job's end, written once (create-only) by whoever ends it."""

    state: State
    reason: str = ""
    attempt: int = 0
    at: float = field(default_factory=time.time)
    by: str = "agent"
    cost: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None  # the ending attempt's last progress (its final status may come later)


# Log records. A chunk is UTF-8 JSON lines, one record a line:
#   {"t": 1.0, "s": "stdout"|"stderr", "x": "text"}
#   {"t": 1.0, "s": "display", "data": {mime: ...}, "metadata": {...}, "transient": {...}, "update": true}
#   {"t": 1.0, "s": "event", "x": "attempt 2 started on ..."}
# and what the machine's IPython publishes as a kernel would (agent/attempt/shell.py), replayed in the kernel:
#   {"t": 1.0, "s": "clear", "wait": false}                        clear_output
#   {"t": 1.0, "s": "result", "data": {mime: ...}, "metadata": {...}}    the cell's Out (execute_result)
#   {"t": 1.0, "s": "page", "data": {mime: ...}, "start": 0}        the pager payload (obj?)
#   {"t": 1.0, "s": "comm", "msg_type": "comm_open"|"comm_msg"|"comm_close", "comm_id": ..., "data": ...,
#    "metadata": ..., "buffers": [base64, ...], "target_name": ...}      a widget's messages
SHELL_RECORDS = ("display", "clear", "result", "page", "comm")
#: The machine's stand-in for the id of the notebook's execute_request (Output widgets capture under it).
CELL_MSG_ID = "nbburst-cell"


def encode_records(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)


def decode_records(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def attempt_marker(attempt: int) -> dict[str, Any]:
    """The event record a reader puts where attempt ``attempt`` (2, 3, ...) of a job's log begins."""
    return {"s": "event", "x": f"--- attempt {attempt} ---\n", "attempt": attempt}


def record_text(record: dict[str, Any]) -> str:
    """A log record as plain text (``Job.logs``, terminals, the server): streams as written, an event,
    ``Out`` and the pager's text on lines of their own, a display record as the MIME types it holds
    (its updates not again); other records have no text."""
    kind = record.get("s")
    if kind in ("stdout", "stderr"):
        return record.get("x", "")
    if kind == "display" and not record.get("update"):
        return f"[display: {', '.join(sorted(record.get('data') or {}))}]\n"
    if kind in ("event", "result", "page"):
        text = record.get("x", "") if kind == "event" else (record.get("data") or {}).get("text/plain", "")
        return text if text.endswith("\n") else text + "\n"
    return ""


# Environment passed to the agent process (local backend) or read from
# instance metadata (Compute Engine): the key never enters the Store.
ENV_JOB_KEY = "NBBURST_JOB_KEY"
ENV_MACHINE = "NBBURST_MACHINE"
ENV_ATTEMPT = "NBBURST_ATTEMPT"  # <job id>:<attempt>, in every process of the attempt (see agent/attempt/spawn.py)
ENV_CPUS = "NBBURST_CPUS"
ENV_SCHEDULER = "NBBURST_SCHEDULER"  # the Dask scheduler's address, in the runner of a --workers job
ENV_WORKER = "NBBURST_WORKER"  # the index of a worker machine (its agent serves a Dask worker)


def worker_id(job_id: str, index: int) -> str:
    """What stands for the job id in the marker of worker machine ``index``'s processes
    (``$NBBURST_ATTEMPT=<job>-w<index>:<n>``): sweeping the job never ends a worker, and sweeping a
    worker never ends the job."""
    return f"{job_id}-w{index}"


def attempt_tag(job_id: str, attempt: int) -> str:
    """The value of ``$NBBURST_ATTEMPT`` in the processes of one attempt: ``<job id>:<attempt>``."""
    return f"{job_id}:{attempt}"


def attempt_of(tag: str) -> int:
    """The attempt number in a ``$NBBURST_ATTEMPT`` value (a bare number too); 0 when there is none."""
    number = tag.rpartition(":")[2]
    return int(number) if number.isdigit() else 0
