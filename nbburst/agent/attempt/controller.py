"""``python -m nbburst.agent JOB_URL``: run one attempt of a job on this machine.

The controller stays small and never runs user code: it spawns the runner in a
session of its own that dies with it (:mod:`.spawn`), ships its output, keeps
the heartbeat, watches for cancellation, the time limit (by the Store's clock)
and a later attempt's claim (:mod:`..protocol.fence`), and commits the verdict
the runner hands over (:mod:`.verdict`). Whatever the runner does (crash, hang,
eat memory), the controller can still end it and say why; whatever happens to
the controller (``kill -9``, a machine going away), nothing is committed for
it, and the job reads as preempted. What the controller itself cannot get past
(a refused object, a Store that stays full or read-only once its writes have
waited for it, :mod:`.patience`) ends the job FAILED with the cause, said on the
console first (:mod:`...protocol.cause`): no relaunch would get past it either.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...protocol import budget, fence, payload, processes, signing, workfiles
from ...protocol.cause import cause_of, console_line
from ...protocol.env import python_mismatch
from ...protocol.folder import JobFolder
from ...protocol.job import (
    ENV_ATTEMPT,
    ENV_JOB_KEY,
    ENV_MACHINE,
    ENV_WORKER,
    HEARTBEAT_SECONDS,
    JobLayout,
    JobSpec,
    State,
    Status,
    attempt_of,
    attempt_tag,
    split_job_url,
    worker_id,
)
from ...protocol.metadata import metadata, on_gce
from ...protocol.outcome import commit_terminal, error_summary, holds_verdict, timeout_reason
from ...store import NotFound, Store, StoreError, open_store
from .. import scaleout
from ..machine import gce, gpu
from . import files, preemption, spawn
from .checkpoints import local_root, restore, summary
from .patience import patiently
from .runnerstart import Pipes, RunnerJob, serve
from .shipper import Shipper
from .verdict import ERROR, HANDED, RESULT, Handoff, commit

CANCEL_POLL_SECONDS = 0.5
KILL_GRACE_SECONDS = 3.0


class Identity:
    """Who this agent is: key, machine and attempt, handed over outside the Store."""

    def __init__(self) -> None:
        key_hex = os.environ.get(ENV_JOB_KEY) or gce.vm_key()
        if not key_hex:
            raise SystemExit("nbburst agent: no job key (neither $NBBURST_JOB_KEY nor $NBBURST_HOME/job-key)")
        self.key = bytes.fromhex(key_hex)
        self.machine = os.environ.get(ENV_MACHINE) or _metadata("instance/name") or "unknown"
        self.attempt = attempt_of(os.environ.get(ENV_ATTEMPT) or _metadata_attribute("nbburst-attempt") or "1")


def _metadata(path: str) -> str | None:
    return metadata(path, timeout=2.0) if on_gce() else None


def _metadata_attribute(name: str) -> str | None:
    return _metadata(f"instance/attributes/{name}")


def load_spec(store: Store, layout: JobLayout, key: bytes) -> JobSpec:
    return JobFolder(store, layout, key).spec()


class Agent:
    #: What ships the cell's output (a session's controller also wakes the waiting client: agent/session/parent.py).
    shipper_class = Shipper

    def __init__(self, store: Store, layout: JobLayout, spec: JobSpec, ident: Identity):
        self.store, self.layout, self.spec, self.ident = store, layout, spec, ident
        self.attempt = ident.attempt
        self.status = Status(attempt=self.attempt, state=State.RUNNING, machine=ident.machine)
        self.status_lock = threading.Lock()
        self.folder = JobFolder(store, layout, ident.key)  # every object of the job, sealed to its place
        self.shipper = self.shipper_class(self.folder, self.attempt, on_event=self._on_event)
        self.runner_pid: int | None = None
        self._killer: threading.Timer | None = None
        self.stop_reason: tuple[State, str] | None = None
        self.superseded = False  # a later attempt was claimed: this one commits nothing (protocol/fence.py)
        self.deadline = store.updated(layout.spec) + spec.timeout_s  # by the Store's clock, as the spec was written
        self.workdir = ""  # the cell's working folder (set in run)
        self.budget_stop: float | None = None  # when the budget left for this attempt is spent (set in run)
        self.done = threading.Event()
        self.control = preemption.Control()  # the runner's control pipe (preemption notice, sync)
        self.handed_r, self.handed_w = os.pipe()  # the shipper says here that the runner handed its verdict over
        self.unreaped: int | None = None  # a runner that handed its verdict over and is still going

    # -- status -------------------------------------------------------------
    def write_status(self, **changes: Any) -> None:
        with self.status_lock:
            for k, v in changes.items():
                setattr(self.status, k, v)
            self.status.heartbeat = time.time()
            self.folder.put_status(self.status)

    def launched(self) -> float:
        """When this attempt's machine was launched, as the client recorded it, else now: machine time (and so
        the job's cost) runs from the machine's launch, boot and environment set-up included."""
        try:
            return self.folder.status(self.attempt).launched or time.time()
        except (NotFound, ValueError, KeyError, signing.SignatureError):
            return time.time()

    def _on_event(self, event: dict[str, Any]) -> None:
        if self.control.on_event(event):
            return
        if event.get("s") == HANDED:
            os.write(self.handed_w, b"!")
            return
        if event.get("s") == "progress":
            with self.status_lock:
                self.status.progress = {k: event.get(k) for k in ("done", "total", "desc")}
        elif event.get("s") == "phase" and not self.superseded:  # reporting.phase: loading inputs, importing...
            try:
                self.write_status(message=str(event.get("x") or ""))  # at once: it matters in the first seconds
            except Exception:  # the next heartbeat carries it; the log shipping this thread does must go on
                traceback.print_exc()

    def commit_terminal(self, state: State, reason: str = "") -> State:
        """Write the job's end once; if someone else ended it first, theirs stands. A superseded attempt
        writes nothing."""
        if self.fenced():
            return State.PREEMPTED
        try:  # every line before the end: a reader stops at the end
            patiently("write the job's log", lambda: self.shipper.flush(strict=True), self.say)
        except StoreError as exc:  # the end matters more than the lines the Store would not take
            print(f"nbburst: the job's last lines are lost: {exc}", file=sys.stderr, flush=True)
        earlier = self.folder.statuses(strict=False)  # for the cost only: a forged one is left out
        statuses = [s for s in earlier if s.attempt != self.attempt] + [self.status]  # ours is the freshest
        return patiently(
            "write the job's end",
            lambda: commit_terminal(self.folder, self.spec, state, reason, self.attempt, "agent", statuses),
            self.say,
        )

    def say(self, text: str) -> None:
        """Tell the user (the job's log) and the machine's console."""
        print(text, file=sys.stderr, flush=True)
        self.shipper.event(text)

    def give_up(self, cause: str) -> State | None:
        """End the job FAILED with ``cause``, which no relaunch would get past. Said on the console first: when
        the Store cannot take the job's end either (then None), the supervisor finds it there
        (protocol/cause.py), so the machine must keep its console (it is not deleted)."""
        print(console_line(self.spec.job_id, self.attempt, cause), file=sys.stderr, flush=True)
        self.shipper.event(f"nbburst: {cause}")
        try:
            return self.commit_terminal(State.FAILED, cause)
        except Exception:
            traceback.print_exc()
            return None

    def _budget_stop(self, earlier: list[Any]) -> float | None:
        """When, by this machine's clock, the budget left for this attempt is spent. The allowance runs from the
        attempt's claim, measured by the Store's clock (``claims/<n>`` is never rewritten), so a client clock
        ahead or behind neither shortens nor stretches it."""
        launched = self.status.launched
        stop = budget.stop_time(self.spec, earlier, launched)
        if stop is None:
            return None
        try:
            since_claim = self.store.age(self.layout.claim(self.attempt))
        except NotFound:
            since_claim = 0.0
        return time.time() + (stop - launched) - since_claim

    def _budget_reason(self) -> str:
        statuses = [s for s in self.folder.statuses(strict=False) if s.attempt != self.attempt] + [self.status]
        return budget.reached(self.spec.budget_usd or 0.0, budget.spent(self.spec, statuses))

    def fenced(self) -> bool:
        """Whether a later attempt has been claimed; if so, the runner is ended at once (it must not run beside
        the next attempt) and this attempt commits nothing from now on."""
        if not self.superseded and fence.superseded(self.folder, self.attempt):
            self.superseded = True
            self.shipper.event(f"nbburst: attempt {self.attempt + 1} has taken over; attempt {self.attempt} stops")
            if self.runner_pid is not None:
                _kill_group(self.runner_pid)
        return self.superseded

    def pin(self) -> None:
        """Keep the attempt (this controller and its runner) on the machine's CPUs."""
        spawn.pin_cpus()

    def sweep(self, attempts: Callable[[int], bool]) -> None:
        """End the processes of these attempts of the job left on this machine (by their marker)."""
        processes.sweep(self.spec.job_id, attempts)

    # -- watchdog -------------------------------------------------------------
    def _watch(self) -> None:
        last_beat = 0.0
        while not self.done.wait(CANCEL_POLL_SECONDS):
            try:
                if self.stop_reason is None and self.folder.cancel_requested():
                    self.stop_runner(State.CANCELLED, "cancelled by the user")
                elif self.stop_reason is None and self.store.now() > self.deadline:
                    self.stop_runner(State.FAILED, timeout_reason(self.spec))
                elif self.stop_reason is None and self.budget_stop is not None and time.time() > self.budget_stop:
                    self.control.ask("sync", preemption.budget())  # its checkpoints up first: --resume continues it
                    self.stop_runner(State.FAILED, self._budget_reason())
                if time.monotonic() - last_beat >= HEARTBEAT_SECONDS and not self.fenced():
                    self.write_status()
                    last_beat = time.monotonic()
            except StoreError as exc:  # a Store that cannot take a heartbeat for now: said, not a traceback
                print(f"nbburst: {exc}", file=sys.stderr, flush=True)
            except Exception:  # a flaky store must not kill the watchdog
                traceback.print_exc()

    def stop_runner(self, state: State, reason: str) -> None:
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
        problem = python_mismatch(self._env()) or gpu.problem(self.spec.plan)  # before anything is installed
        if problem:
            self.shipper.event(f"nbburst: refusing to run: {problem}")
            self.shipper.flush()
            return self.commit_terminal(State.FAILED, problem)
        if self.store.exists(self.layout.dist_manifest):  # a machine with an environment of its own
            from ..machine.envsync import sync

            # installs the notebook's versions of packages that differ (and then restarts this agent)
            sync(self.store, self.layout, self.ident.key, self.shipper)
        if self.folder.cancel_requested():
            return self.commit_terminal(State.CANCELLED, "cancelled before it started")
        if holds_verdict(self.folder, self.layout.result):  # an earlier attempt's; it died before its verdict
            return self._finish()
        self.sweep(lambda n: n < self.attempt)  # an earlier attempt's leftovers on this machine
        self.pin()
        # As deep in the job's folder as the cell's ../ files climb (protocol/workfiles.py: workdir_tail).
        workdir = os.path.join(os.getcwd(), "work", self.spec.job_id, *workfiles.check_tail(self.spec.workdir_tail))
        os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        handoff = Handoff(os.path.join(os.getcwd(), "work", f".{self.spec.job_id}.verdict"), self.folder, self.attempt)
        if handoff.adopt():  # computed by an earlier attempt on this disk, never uploaded: not computed again
            self.say(f"nbburst: attempt {self.attempt} uploads the verdict an earlier attempt computed on this machine")
            return self._finish(None, handoff)
        # What the cell finds there: only what it creates or changes comes back.
        files.baseline(Path(workdir), self.spec)
        checkpoints = local_root(workdir)
        launched = self.launched()
        patiently(
            "write the attempt's state",
            lambda: self.write_status(state=State.PROVISIONING, message="restoring checkpoints", launched=launched),
            self.say,
        )
        earlier = [s for s in self.folder.statuses(strict=False) if s.attempt < self.attempt]
        self.budget_stop = self._budget_stop(earlier)
        try:
            restored = restore(self.store, self.layout, self.ident.key, checkpoints)
        except signing.SignatureError as exc:
            self.shipper.event(f"nbburst: refusing to resume: {exc}")
            self.shipper.flush()
            return self.commit_terminal(State.FAILED, str(exc))
        if self.attempt == 1 and self.spec.resumed_from:
            self.shipper.event(f"nbburst: resuming job {self.spec.resumed_from}: {summary(restored)}")
        if self.attempt > 1:
            self.shipper.event(
                f"nbburst: attempt {self.attempt} on {self.ident.machine}, resuming from {summary(restored)}"
            )
        if self.stop_reason is not None or self.fenced():  # preempted, cancelled, out of time or taken over
            self.shipper.flush()
            return self._finish()
        scheduler = self._start_scheduler() if self.spec.resources.workers else None  # --workers: agent/scaleout.py
        if self.spec.resources.workers and scheduler is None:
            return self.commit_terminal(State.FAILED, "the Dask scheduler for --workers did not start")
        job = RunnerJob(
            self.store.url,
            self.spec.to_json().decode(),
            self.ident.key.hex(),
            self.attempt,
            workdir,
            str(checkpoints),
            str(handoff.folder),
            attempt_tag(self.spec.job_id, self.attempt),
        )
        pid, (out_r, err_r, ev_r) = self.start_runner(job)
        self.runner_pid = pid
        if self.stop_reason is not None:  # asked to stop while forking
            self.stop_runner(*self.stop_reason)
        started = time.time()
        patiently(
            "write the attempt's state",
            lambda: self.write_status(state=State.RUNNING, started=started, message=""),
            self.say,
        )
        self.shipper.pump(out_r, err_r, ev_r)
        watchdog = threading.Thread(target=self._watch, name="nbburst-watchdog", daemon=True)
        watchdog.start()
        wait_status = self._wait_runner(pid, handoff)
        if self._killer is not None:
            self._killer.cancel()
        # The job is over for whatever the cell left behind, in its group or out of it (setsid, double fork):
        # then nothing holds the output pipes open any more.
        _kill_group(pid)
        if scheduler is not None:
            scheduler.stop()
        self.sweep(lambda n: n == self.attempt)
        self.control.close()
        self.shipper.join(timeout=10)
        self.done.set()
        watchdog.join()
        return self._finish(wait_status, handoff)

    def _wait_runner(self, pid: int, handoff: Handoff) -> int | None:
        """Until the runner has exited (its wait status), or has handed its verdict over and closed its output
        (None): then only its exit is left, which :meth:`reap` waits for once the verdict is committed."""
        pidfd = os.pidfd_open(pid)
        try:
            while True:
                ready, _, _ = select.select([pidfd, self.handed_r], [], [])
                if pidfd in ready:
                    return os.waitpid(pid, 0)[1]
                os.read(self.handed_r, 64)
                if handoff.taken() is not None:  # said by the runner itself, not by the cell's code
                    self.unreaped = pid
                    return None
        finally:
            os.close(pidfd)

    def reap(self) -> None:
        """Wait for a runner that was left to finish its exit."""
        pid, self.unreaped = self.unreaped, None
        if pid is not None:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def start_runner(self, job: RunnerJob) -> tuple[int, tuple[int, int, int]]:
        """Fork the cell's runner for ``job``: its pid, and the ends its stdout, stderr and events are read from
        (its control pipe becomes ``self.control``'s)."""
        pipes = Pipes()
        pid = spawn.spawn(lambda: serve(pipes, lambda: job), job.tag)
        reads, self.control.fd = pipes.in_controller()
        return pid, reads

    def _start_scheduler(self) -> scaleout.Scheduler | None:
        try:
            scheduler = scaleout.start_scheduler(
                self.folder, self.spec, self.attempt, attempt_tag(self.spec.job_id, self.attempt)
            )
        except Exception as exc:
            self.shipper.event(f"nbburst: {exc}")
            self.shipper.flush()
            return None
        self.shipper.event(f"nbburst: Dask scheduler at {scheduler.address} for {self.spec.resources.workers} workers")
        return scheduler

    def _keep_files(self) -> None:
        """The files the cell wrote in its working folder, to the job's folder in the Store (before the verdict).
        The log says nothing of them, as a plain cell prints nothing of the files it writes: the job view and
        the CLI name them from the job's manifest."""
        try:
            files.keep(self.folder, self.spec, Path(self.workdir), self.attempt)
        except Exception as exc:  # the cell's values matter more than its files: say so, and go on
            self.shipper.event(f"nbburst: could not keep the files the cell wrote ({type(exc).__name__}: {exc})")
        self.shipper.flush()

    def _env(self) -> dict[str, Any]:
        import json

        raw = self.store.get(self.layout.env)
        if payload.digest_bytes(raw) != self.spec.digests.get("env.json"):
            raise signing.SignatureError("env.json does not match the signed job spec")
        return json.loads(raw)

    def _finish(self, wait_status: int | None = None, handoff: Handoff | None = None) -> State:
        """Commit what the attempt came to. Only what the cell gave back (the verdict the runner handed over), a
        cancel or the time limit end the job; a runner stopped by a preemption or cut off from its controller
        leaves the attempt PREEMPTED for the next one; a later attempt's claim leaves everything to it."""
        verdict = handoff.taken() if handoff is not None else None
        if self.fenced():
            return State.PREEMPTED
        if handoff is not None and (
            verdict is not None or (self.stop_reason and self.stop_reason[0] != State.PREEMPTED)
        ):
            self._keep_files()  # the cell's own end (a preempted attempt's files stay: the next one writes them)
        if verdict is not None:  # waits for a Store that cannot take it now: a relaunch would compute it again
            patiently(f"upload the cell's {verdict[0]}", lambda: commit(self.folder, *verdict, self.attempt), self.say)
        if (verdict is not None and verdict[0] == RESULT) or holds_verdict(self.folder, self.layout.result):
            state = self.commit_terminal(State.SUCCEEDED)
        elif self.stop_reason is not None and self.stop_reason[0] == State.PREEMPTED:
            self.write_status(state=State.PREEMPTED, message=self.stop_reason[1])
            return State.PREEMPTED
        elif self.stop_reason is not None:
            state = self.commit_terminal(*self.stop_reason)
        elif (verdict is not None and verdict[0] == ERROR) or holds_verdict(self.folder, self.layout.error):
            state = self.commit_terminal(State.FAILED, error_summary(self.store, self.layout, self.ident.key))
        elif wait_status is not None and _exit_code(wait_status) == spawn.EXIT_ORPHANED:
            self.write_status(state=State.PREEMPTED, message="the cell's process lost its agent")
            return State.PREEMPTED
        else:
            state = self.commit_terminal(State.FAILED, _death(wait_status or 0))
        if not self.superseded:
            self.write_status(state=state)
        return state


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _exit_code(wait_status: int) -> int | None:
    return os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None


def _death(wait_status: int) -> str:
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        hint = " (out of memory?)" if sig == signal.SIGKILL else ""
        return f"the cell's process was killed by signal {signal.Signals(sig).name}{hint}"
    return f"the cell's process exited with code {os.WEXITSTATUS(wait_status)} without a result"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m nbburst.agent JOB_URL", file=sys.stderr)
        return 2
    try:
        root, job_id = split_job_url(argv[0])
    except ValueError as exc:
        raise SystemExit(f"nbburst agent: {exc}") from None
    ident = Identity()
    worker = os.environ.get(ENV_WORKER) or _metadata_attribute("nbburst-worker")  # a --workers job's worker machine
    marker = job_id if worker is None else worker_id(job_id, int(worker))
    spawn.ensure_marked(attempt_tag(marker, ident.attempt), argv)  # every process of the attempt carries it
    store = open_store(root)
    layout = JobLayout(job_id)
    try:
        spec = load_spec(store, layout, ident.key)
    except (NotFound, signing.SignatureError) as exc:  # no spec to end the job with: the supervisor has the real one
        print(console_line(job_id, ident.attempt, cause_of(exc)), file=sys.stderr, flush=True)
        return 3
    from ..machine.gce import end_machine

    if store.exists(layout.terminal):
        end_machine()
        return 0
    if worker is not None:
        scaleout.serve_worker(JobFolder(store, layout, ident.key), spec, ident.machine)
        from ..machine.envsync import settle

        settle()  # an environment it built at boot is stored before the VM goes
        end_machine()
        return 0
    agent = Agent(store, layout, spec, ident)
    preemption.install(agent)  # SIGTERM and the metadata server's notices: soft-off (see preemption.py)
    try:
        state = agent.run()
    except Exception as exc:  # a forged object the job needs, a Store that stays full: every attempt would meet it
        if not isinstance(exc, (signing.SignatureError, StoreError)):
            traceback.print_exc()  # the agent's own failure: its traceback on the console
        ended = agent.give_up(cause_of(exc))
        if ended is None:  # the console line stands for the job's end: the machine stops, and keeps it
            agent.reap()
            return 1
        state = ended
    agent.reap()
    if state.terminal:
        from ..machine.envsync import settle

        settle()  # an environment built at boot is stored before the VM goes
        end_machine()  # a Compute Engine VM deletes itself (or powers off); nothing to do locally
    return 0 if state in (State.SUCCEEDED, State.CANCELLED) else 1
