"""``python -m nbburst.agent JOB_URL``: run one attempt of a job on this machine.

The controller stays small and never runs user code: it forks the runner into
a process group of its own, ships its output, keeps the heartbeat, watches for
cancellation and the time limit, and commits the terminal state. Whatever the
runner does (crash, hang, eat memory), the controller can still end it and say
why.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from ..protocol import payload, signing
from ..protocol.env import python_mismatch
from ..protocol.job import (
    ENV_ATTEMPT,
    ENV_CPUS,
    ENV_JOB_KEY,
    ENV_MACHINE,
    HEARTBEAT_SECONDS,
    JobLayout,
    JobSpec,
    State,
    Status,
)
from ..protocol.metadata import metadata, on_gce
from ..protocol.outcome import commit_terminal, error_summary, timeout_reason
from ..store import NotFound, Store, open_store
from . import preemption
from .checkpoints import local_root, restore, summary
from .shipper import Shipper

CANCEL_POLL_SECONDS = 0.5
KILL_GRACE_SECONDS = 3.0


def split_job_url(job_url: str) -> tuple[str, str]:
    """``<root>/jobs/<id>`` -> (root, id)."""
    root, sep, job_id = job_url.rstrip("/").rpartition("/jobs/")
    if not sep:
        raise SystemExit(f"nbburst agent: {job_url!r} is not a job URL (<store root>/jobs/<job id>)")
    return root, job_id


class Identity:
    """Who this agent is: key, machine and attempt, handed over outside the Store."""

    def __init__(self) -> None:
        key_hex = os.environ.get(ENV_JOB_KEY) or _metadata_attribute("nbburst-key")
        if not key_hex:
            raise SystemExit("nbburst agent: no job key (neither $NBBURST_JOB_KEY nor instance metadata)")
        self.key = bytes.fromhex(key_hex)
        self.machine = os.environ.get(ENV_MACHINE) or _metadata("instance/name") or "unknown"
        self.attempt = int(os.environ.get(ENV_ATTEMPT) or _metadata_attribute("nbburst-attempt") or 1)


def _metadata(path: str) -> str | None:
    return metadata(path, timeout=2.0) if on_gce() else None


def _metadata_attribute(name: str) -> str | None:
    return _metadata(f"instance/attributes/{name}")


def load_spec(store: Store, layout: JobLayout, key: bytes) -> JobSpec:
    spec = JobSpec.from_json(store.get(layout.spec))
    signing.verify_text(key, spec.signed_payload(), spec.signature, f"job spec {layout.spec}")
    return spec


class Agent:
    def __init__(self, store: Store, layout: JobLayout, spec: JobSpec, ident: Identity):
        self.store, self.layout, self.spec, self.ident = store, layout, spec, ident
        self.attempt = ident.attempt
        self.status = Status(attempt=self.attempt, state=State.RUNNING, machine=ident.machine)
        self.status_lock = threading.Lock()
        self.shipper = Shipper(store, layout, self.attempt, on_event=self._on_event)
        self.runner_pid: int | None = None
        self._killer: threading.Timer | None = None
        self.stop_reason: tuple[State, str] | None = None
        self.done = threading.Event()
        self.control = preemption.Control()  # the runner's control pipe (preemption notice, sync)

    # -- status -------------------------------------------------------------
    def write_status(self, **changes: Any) -> None:
        with self.status_lock:
            for k, v in changes.items():
                setattr(self.status, k, v)
            self.status.heartbeat = time.time()
            self.store.put(self.layout.status(self.attempt), self.status.to_json())

    def _on_event(self, event: dict[str, Any]) -> None:
        if self.control.on_event(event):
            return
        if event.get("s") == "progress":
            with self.status_lock:
                self.status.progress = {k: event.get(k) for k in ("done", "total", "desc")}

    def commit_terminal(self, state: State, reason: str = "") -> State:
        """Write the job's end once; if someone else ended it first, theirs stands."""
        earlier = [Status.from_json(self.store.get(k)) for k in self.store.list(self.layout.status_prefix)]
        statuses = [s for s in earlier if s.attempt != self.attempt] + [self.status]  # ours is the freshest
        return commit_terminal(self.store, self.layout, self.spec, state, reason, self.attempt, "agent", statuses)

    # -- watchdog -------------------------------------------------------------
    def _watch(self) -> None:
        deadline = self.spec.created + self.spec.timeout_s
        last_beat = 0.0
        while not self.done.wait(CANCEL_POLL_SECONDS):
            try:
                if self.stop_reason is None and self.store.exists(self.layout.cancel):
                    self._stop_runner(State.CANCELLED, "cancelled by the user")
                elif self.stop_reason is None and time.time() > deadline:
                    self._stop_runner(State.FAILED, timeout_reason(self.spec))
                if time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                    self.write_status()
                    last_beat = time.monotonic()
            except Exception:  # a flaky store must not kill the watchdog
                traceback.print_exc()

    def _stop_runner(self, state: State, reason: str) -> None:
        """Ask the cell's process group to stop; it is killed outright after the grace period.

        Never blocks: the main thread reaps the runner (a probe from here would
        still see it as a zombie until then), and a timer escalates to SIGKILL.
        """
        if self.stop_reason is None:
            self.stop_reason = (state, reason)
            self.shipper.event(f"nbburst: {reason}; stopping the cell")
        if self.runner_pid is None:
            return  # not forked yet: run() sees stop_reason and never starts it
        try:
            os.killpg(self.runner_pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        self._killer = threading.Timer(KILL_GRACE_SECONDS, _kill_group, args=(self.runner_pid,))
        self._killer.daemon = True
        self._killer.start()

    # -- run ----------------------------------------------------------------
    def run(self) -> State:
        problem = python_mismatch(self._env())
        if problem:
            self.shipper.event(f"nbburst: refusing to run: {problem}")
            self.shipper.flush()
            return self.commit_terminal(State.FAILED, problem)
        if self.store.exists(self.layout.dist_manifest):  # a machine with an environment of its own
            from .envsync import sync

            sync(self)  # installs the notebook's versions of packages that differ (and then restarts this agent)
        if self.store.exists(self.layout.cancel):
            return self.commit_terminal(State.CANCELLED, "cancelled before it started")
        if self.store.exists(self.layout.result):  # an earlier attempt finished; its machine died before saying so
            return self._finish(0)
        _pin_cpus()
        workdir = os.path.join(os.getcwd(), "work", self.spec.job_id)
        os.makedirs(workdir, exist_ok=True)
        checkpoints = local_root(workdir)
        self.write_status(state=State.PROVISIONING, message="restoring checkpoints", launched=time.time())
        try:
            restored = restore(self.store, self.layout, self.ident.key, checkpoints)
        except signing.SignatureError as exc:
            self.shipper.event(f"nbburst: refusing to resume: {exc}")
            self.shipper.flush()
            return self.commit_terminal(State.FAILED, str(exc))
        if self.attempt > 1:
            self.shipper.event(
                f"nbburst: attempt {self.attempt} on {self.ident.machine}, resuming from {summary(restored)}"
            )
        if self.stop_reason is not None:  # preempted, cancelled or out of time while restoring
            self.shipper.flush()
            return self._finish(0)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ev_r, ev_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the runner
            os.setpgid(0, 0)
            os.close(out_r), os.close(err_r), os.close(ev_r), os.close(ctl_w)
            os.chdir(workdir)
            os.environ["NBBURST_CHECKPOINT_DIR"] = str(checkpoints)
            os.environ[ENV_ATTEMPT] = str(self.attempt)
            os.environ["MPLBACKEND"] = "module://nbburst.agent.mplbackend"
            os.environ.setdefault("IPYTHONDIR", os.path.join(workdir, ".ipython"))
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = 2
            try:
                from .channel import Channel
                from .runner import redirect_std, run

                redirect_std(out_w, err_w)
                code = run(
                    open_store(self.store.url), self.layout, self.spec, self.ident.key, Channel(ev_w), control_fd=ctl_r
                )
            except BaseException:
                traceback.print_exc()
            finally:
                from .channel import flush_all

                flush_all()
                os._exit(code)
        self.runner_pid = pid
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        os.close(out_w), os.close(err_w), os.close(ev_w), os.close(ctl_r)
        self.control.fd = ctl_w
        if self.stop_reason is not None:  # asked to stop while forking
            self._stop_runner(*self.stop_reason)
        self.write_status(state=State.RUNNING, started=time.time(), message="")
        self.shipper.pump(out_r, err_r, ev_r)
        watchdog = threading.Thread(target=self._watch, name="nbburst-watchdog", daemon=True)
        watchdog.start()
        _, wait_status = os.waitpid(pid, 0)
        if self._killer is not None:
            self._killer.cancel()
        _kill_group(pid)  # the cell may have left processes behind in its group; the job is over for them too
        self.control.close()
        self.shipper.join(timeout=10)
        self.done.set()
        watchdog.join()
        return self._finish(wait_status)

    def _env(self) -> dict[str, Any]:
        import json

        raw = self.store.get(self.layout.env)
        if payload.digest_bytes(raw) != self.spec.digests.get("env.json"):
            raise signing.SignatureError("env.json does not match the signed job spec")
        return json.loads(raw)

    def _finish(self, wait_status: int) -> State:
        if self.store.exists(self.layout.result):
            state = self.commit_terminal(State.SUCCEEDED)
        elif self.stop_reason is not None and self.stop_reason[0] == State.PREEMPTED:
            self.write_status(state=State.PREEMPTED, message=self.stop_reason[1])
            return State.PREEMPTED
        elif self.stop_reason is not None:
            state = self.commit_terminal(*self.stop_reason)
        elif self.store.exists(self.layout.error):
            state = self.commit_terminal(State.FAILED, error_summary(self.store, self.layout, self.ident.key))
        else:
            state = self.commit_terminal(State.FAILED, _death(wait_status))
        self.write_status(state=state)
        return state


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _death(wait_status: int) -> str:
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        hint = " (out of memory?)" if sig == signal.SIGKILL else ""
        return f"the cell's process was killed by signal {signal.Signals(sig).name}{hint}"
    return f"the cell's process exited with code {os.WEXITSTATUS(wait_status)} without a result"


def _pin_cpus() -> None:
    cpus = os.environ.get(ENV_CPUS)
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        except OSError as exc:
            print(f"nbburst agent: could not pin CPUs {cpus}: {exc}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m nbburst.agent JOB_URL", file=sys.stderr)
        return 2
    root, job_id = split_job_url(argv[0])
    store = open_store(root)
    layout = JobLayout(job_id)
    ident = Identity()
    try:
        spec = load_spec(store, layout, ident.key)
    except (NotFound, signing.SignatureError) as exc:
        print(f"nbburst agent: cannot run job {job_id}: {exc}", file=sys.stderr)
        return 3
    from .gce import end_machine

    if store.exists(layout.terminal):
        end_machine()
        return 0
    agent = Agent(store, layout, spec, ident)
    preemption.install(agent)  # SIGTERM and the metadata server's notices: soft-off (see preemption.py)
    state = agent.run()
    if state.terminal:
        end_machine()  # a Compute Engine VM deletes itself (or powers off); nothing to do locally
    return 0 if state in (State.SUCCEEDED, State.CANCELLED) else 1
