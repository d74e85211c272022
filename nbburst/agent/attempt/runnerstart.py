"""How a controller starts its runner: the pipes between them, and what the runner is told of its job.

The runner (agent/attempt/runner.py) imports IPython and the cell's packages; this module
does not, so a controller stays light. A plain attempt forks its runner once it
knows the job; a session's controller forks one ahead, which sets up its shell and
then waits here for the job down a pipe (agent/session/controller.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ...protocol.folder import JobFolder
from ...protocol.job import ENV_ATTEMPT, JobLayout, JobSpec
from ...store import Store, open_store
from .channel import Channel, flush_all
from .spawn import EXIT_ORPHANED, pin_cpus
from .verdict import HANDED, Handoff

if TYPE_CHECKING:
    from .runner import Prepared


@dataclass
class RunnerJob:
    """What a runner is told of its job and attempt: by its controller's closure, or down a pipe."""

    store_url: str
    spec_json: str
    key_hex: str
    attempt: int
    workdir: str
    checkpoints: str
    handoff_dir: str
    tag: str  # the attempt's marker, which every process of the attempt carries (agent/attempt/spawn.py)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> RunnerJob:
        return cls(**json.loads(text))

    def enter(self) -> None:
        """The attempt's working folder, checkpoints and marker, before anything of the cell runs."""
        os.environ[ENV_ATTEMPT] = self.tag
        pin_cpus()  # a session's runner was forked before it knew its cell: it keeps to the CPUs from here
        os.chdir(self.workdir)
        os.environ["NBBURST_CHECKPOINT_DIR"] = self.checkpoints
        os.environ.setdefault("IPYTHONDIR", os.path.join(self.workdir, ".ipython"))

    def store(self) -> Store:
        """The Store the runner reads its job from (a session's pushed cell: with the objects it came with)."""
        return open_store(self.store_url)

    def run(self, channel: Channel, control_fd: int | None, prepared: Prepared | None = None) -> int:
        from .runner import run

        store = self.store()
        spec = JobSpec.from_json(self.spec_json)
        layout, key = JobLayout(spec.job_id), bytes.fromhex(self.key_hex)
        handoff = Handoff(self.handoff_dir, JobFolder(store, layout, key), self.attempt)
        return run(store, layout, spec, key, channel, handoff, control_fd, prepared)


class Pipes:
    """A runner's stdout, stderr and events (to its controller) and control pipe (from it)."""

    def __init__(self) -> None:
        self.out, self.err, self.events, self.control = os.pipe(), os.pipe(), os.pipe(), os.pipe()

    def in_runner(self) -> tuple[Channel, int]:
        """In the runner: fds 1 and 2 go to the controller; returns the event channel and the control fd."""
        from .runner import redirect_std

        for fd in (self.out[0], self.err[0], self.events[0], self.control[1]):
            os.close(fd)
        redirect_std(self.out[1], self.err[1])
        return Channel(self.events[1]), self.control[0]

    def in_controller(self) -> tuple[tuple[int, int, int], int]:
        """In the controller: the ends stdout, stderr and events are read from, and the control pipe's."""
        for fd in (self.out[1], self.err[1], self.events[1], self.control[0]):
            os.close(fd)
        return (self.out[0], self.err[0], self.events[0]), self.control[1]


def serve(
    pipes: Pipes,
    next_job: Callable[[], RunnerJob | None],
    ready: bool = False,
    prelude: tuple[bytes, bytes] = (b"", b""),
) -> int:
    """A runner's life, in the forked child: ``ready``, it sets up its shell before ``next_job()`` tells it
    its job (None: no job will come, as its controller is gone). ``prelude``: what the cell's imports printed
    (stdout, stderr) when its warm parent made them for it (agent/session/parent.py), written as the cell's first."""
    from .runner import EXIT_ERROR, EXIT_RESULT, Prepared

    channel, control_fd = pipes.in_runner()
    try:
        prepared = Prepared(channel) if ready else None
        if prepared is not None:
            prepared.warm_up()
        job = next_job()
        if job is None:
            return EXIT_ORPHANED
        job.enter()
        for fd, text in zip((1, 2), prelude, strict=True):
            while text:
                text = text[os.write(fd, text) :]
        code = job.run(channel, control_fd, prepared)
        if code in (EXIT_RESULT, EXIT_ERROR):
            _handed(channel)
        return code
    finally:
        flush_all()


def _handed(channel: Channel) -> None:
    """Close the output, then say that the verdict is handed over (the event's pipe last): the shipper reads to
    the end of each without waiting for this process to be gone."""
    flush_all()
    os.close(1)
    os.close(2)
    channel.write({"s": HANDED})
    os.close(channel.fd)
