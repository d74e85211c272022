"""``nbburst doctor --smoke``: the first real run on a project, as one command whose report can be pasted.

A user with a real project wants to know, once, that nbburst works there before a long job depends on it:
that a VM boots from the default image and runs a cell, that a preempted job comes back by itself without
losing completed work, that jobs can go to another zone of the region, that a GPU works (on request), and
that the watcher relaunches a detached job with no notebook running. Each of those is a step here, timed,
that says what it found and, when it fails, why and what to do. Nothing is submitted while a doctor check
fails (nothing is paid for), and every job the run starts is ended before it returns, whatever happened.

The steps use only the client API a notebook uses (submit, wait, preempt), so the run checks what a user's
cells will meet; the functions they run are this module's, which the VM imports from its own nbburst.
"""

from __future__ import annotations

import platform
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..client.burst import Burst
from ..client.job import Job
from ..errors import BurstError
from ..machines.base import Check
from ..protocol.job import Resources, State

#: How long one step may take: a first boot installs the notebook's packages on a stock image.
STEP_SECONDS = 20 * 60.0
#: Steps of the preemption check's loop; the job is preempted after a few of them are saved.
STEPS, PAUSE_S = 30, 1.0


@dataclass
class Step:
    """One step of the run: what it checked, how long it took, what it found, and the fix when it failed."""

    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: str = ""
    fix: str = ""
    skipped: bool = False

    def line(self) -> str:
        mark = "-" if self.skipped else "✔" if self.ok else "✖"
        text = f"{mark} {self.name} ({self.seconds:.0f} s): {self.detail}"
        return text + (f"\n    fix: {self.fix}" if self.fix and not self.ok and not self.skipped else "")


@dataclass
class Report:
    """The run's steps, with a header that says where it ran, for a report pasted into an issue."""

    header: list[str]
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(step.ok or step.skipped for step in self.steps)

    def text(self) -> str:
        verdict = "all steps passed" if self.ok else f"{sum(not s.ok and not s.skipped for s in self.steps)} failed"
        return "\n".join([*self.header, *(s.line() for s in self.steps), f"smoke run: {verdict}"])


# -- what the VMs run (imported there from the VM's own nbburst) -----------------------------------------
def describe_machine() -> dict[str, Any]:
    """Where the cell ran: the first step's answer."""
    import os
    from pathlib import Path

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "home": str(Path.home()),
        "home_writable": os.access(Path.home(), os.W_OK),
    }


def count_with_checkpoints(steps: int, pause: float) -> dict[str, int]:
    """Count to ``steps``, saving each step: a preempted attempt's successor goes on from the last one saved."""
    from .. import checkpoint, progress

    done = resumed_at = checkpoint.load("smoke-count", 0)
    while done < steps:
        time.sleep(pause)
        done += 1
        checkpoint.save("smoke-count", done)
        progress(done, steps, "counting")
    return {"steps": done, "resumed_at": resumed_at}


def gpus() -> str:
    """What ``nvidia-smi -L`` lists on the VM."""
    import subprocess

    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True, timeout=120).stdout


# -- the run ---------------------------------------------------------------------------------------------
class SmokeRun:
    """The steps against one configured client; ``say`` gets each step's line as soon as it is known."""

    def __init__(self, burst: Burst, say: Callable[[str], None] = print, step_s: float = STEP_SECONDS):
        self.burst, self.say, self.step_s = burst, say, step_s
        self.tag = secrets.token_hex(3)
        self.jobs: list[Job] = []

    def run(self, checks: list[Check], gpu: str | None = None) -> Report:
        settings = self.burst.settings
        from .. import __version__

        report = Report(
            [
                f"nbburst {__version__} smoke run {self.tag}, {time.strftime('%Y-%m-%d %H:%M %Z')}",
                f"Python {platform.python_version()}, backend gce, project {settings.project or '(default)'}, "
                f"zone {settings.zone or '(default)'}, store {settings.bucket or settings.root or '(default)'}",
            ]
        )
        try:
            for step in self._steps(checks, gpu):
                report.steps.append(step)
                self.say(step.line())
                if step.name == "doctor" and not step.ok:
                    break  # nothing is paid for while a check fails
        finally:
            self._end_jobs()
        return report

    def _steps(self, checks: list[Check], gpu: str | None) -> Iterator[Step]:
        yield self._doctor(checks)
        yield self._timed("a 4-core cell on the default image", self._cell)
        yield self._timed("a preemption and its recovery", self._preemption)
        yield self._timed("a job in another zone of the region", self._second_zone)
        if gpu:
            yield self._timed(f"a GPU ({gpu})", lambda step: self._gpu(step, gpu))
        else:
            yield Step("a GPU", skipped=True, detail="not asked for (--gpu nvidia-l4 checks one)")
        yield self._timed("a detached job relaunched by the watcher", self._watcher)

    def _doctor(self, checks: list[Check]) -> Step:
        failed = [c for c in checks if c.level == "fail"]
        warned = [c for c in checks if c.level == "warn"]
        step = Step("doctor", ok=not failed, detail=f"{len(checks)} checks, {len(failed)} failed, {len(warned)} warn")
        if failed:
            step.detail += ": " + "; ".join(f"{c.name}: {c.detail}" for c in failed)
            step.fix = "; ".join(c.fix for c in failed if c.fix) or "see `nbburst doctor`"
        return step

    def _timed(self, name: str, body: Callable[[Step], None]) -> Step:
        step, start = Step(name), time.monotonic()
        try:
            body(step)
        except BurstError as exc:
            step.ok, step.detail = False, str(exc)
            step.fix = step.fix or "the message says what Compute Engine refused; `nbburst doctor` checks the rest"
        except Exception as exc:
            step.ok, step.detail = False, f"{type(exc).__name__}: {exc}"
        step.seconds = time.monotonic() - start
        return step

    def _submit(self, fn: Callable[..., Any], *args: Any, suffix: str, **options: Any) -> Job:
        opts = self.burst.options(backend="gce", name=f"smoke-{self.tag}-{suffix}", timeout="30m", **options)
        job = self.burst.submit(fn, *args, options=opts)
        self.jobs.append(job)
        return job

    def _ended(self, job: Job, step: Step, supervise: bool = True) -> bool:
        """Wait for ``job`` to end; fill ``step`` with its failure when it did not succeed."""
        state = job.wait(timeout=self.step_s, supervise=supervise)
        if state == State.SUCCEEDED:
            return True
        terminal = job.terminal
        step.detail = f"job {job.id} {state.value}" + (f": {terminal.reason}" if terminal and terminal.reason else "")
        if not state.terminal:
            step.detail += f" after {self.step_s:.0f} s"
            step.fix = f"`nbburst logs {job.id}` shows where it stands; the VM's console: `nbburst logs --console`"
        return False

    def _cell(self, step: Step) -> None:
        job = self._submit(describe_machine, suffix="cell", cores=4)
        if not self._ended(job, step):
            return
        found, plan = job.result(), job.spec.plan
        step.ok = found["home_writable"]
        step.detail = (
            f"{plan.get('machine_type')} in {plan.get('zone')}, image {plan.get('image')}, Python {found['python']}, "
            f"{found['cpus']} CPUs, HOME {found['home']}" + ("" if step.ok else " (not writable)")
        )

    def _preemption(self, step: Step) -> None:
        job = self._submit(count_with_checkpoints, STEPS, PAUSE_S, suffix="preempted", cores=2, max_restarts=3)
        deadline = time.monotonic() + self.step_s
        while time.monotonic() < deadline:  # preempt once a few steps are saved
            status = job.latest_status()
            if job.state.terminal or (status and (status.progress or {}).get("done", 0) >= 3):
                break
            job.supervise()
            time.sleep(1)
        if job.state.terminal:
            step.detail = f"job {job.id} ended ({job.state.value}) before it could be preempted"
            return
        job.preempt()
        if not self._ended(job, step):
            return
        counted = job.result()
        step.ok = job.attempt >= 2 and counted["resumed_at"] > 0
        step.detail = (
            f"preempted at step {counted['resumed_at']} of {STEPS}; attempt {job.attempt} went on from there"
            if step.ok
            else f"attempt {job.attempt}, resumed at step {counted['resumed_at']}: the preemption was not survived"
        )

    def _second_zone(self, step: Step) -> None:
        first = self._planned_zone()
        others = [z for z in self._region_zones(first) if z != first]
        if not others:
            step.ok, step.detail = True, f"the region of {first} lists no other zone"
            return
        job = self._submit(describe_machine, suffix="zone", cores=2, zone=others[0])
        if self._ended(job, step):
            step.ok = job.spec.plan.get("zone") == others[0]
            step.detail = f"ran in {job.spec.plan.get('zone')} (the default zone is {first})"

    def _gpu(self, step: Step, gpu: str) -> None:
        job = self._submit(gpus, suffix="gpu", gpu=gpu)
        if self._ended(job, step):
            listed = job.result().strip()
            step.ok, step.detail = bool(listed), listed.replace("\n", "; ") or "nvidia-smi listed no GPU"

    def _watcher(self, step: Step) -> None:
        if not self.burst.settings.watcher:
            step.ok, step.detail = True, "the watcher is off (c.NBBurst.watcher = False): nothing to check"
            return
        job = self._submit(count_with_checkpoints, STEPS, PAUSE_S, suffix="watched", cores=2, max_restarts=3)
        deadline = time.monotonic() + self.step_s
        while time.monotonic() < deadline and (job.latest_status() is None or job.state != State.RUNNING):
            time.sleep(1)  # looked at, never supervised: the watcher alone relaunches it
        if job.state != State.RUNNING:
            step.detail = f"job {job.id} is {job.state.value}, never RUNNING"
            return
        job.preempt()
        if self._ended(job, step, supervise=False):
            step.ok = job.attempt >= 2
            step.detail = f"relaunched by the watcher VM: attempt {job.attempt} succeeded with no client supervising"
            if not step.ok:
                step.detail = "the job ended on its first attempt: the preemption did not land"

    def _planned_zone(self) -> str:
        return self.burst.machines("gce").plan(Resources(cores=2)).zone or ""

    def _region_zones(self, zone: str) -> list[str]:
        """The zones of ``zone``'s region, as a plan for the region lists them (``--zone auto`` tries them)."""
        plan = self.burst.machines("gce").plan(Resources(cores=2, zone=zone.rsplit("-", 1)[0]))
        return list(plan.extra.get("zones") or [])

    def _end_jobs(self) -> None:
        """Cancel what the run started and did not see end (a failed step leaves no VM running)."""
        for job in self.jobs:
            try:
                if not job.state.terminal:
                    job.cancel()
            except Exception as exc:  # report and go on: the others must end too
                self.say(f"! could not cancel {job.id}: {exc}")
