"""Launch options shared by the magic, the Python API and the CLI.

One parser for each value, so ``--timeout 2h``, ``timeout="2h"`` and
``c.NBBurst.timeout = "2h"`` mean the same thing everywhere and fail with the
same message.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError
from .protocol import backends
from .protocol.budget import parse_budget
from .protocol.durations import parse_duration
from .protocol.job import Resources

_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")


def parse_gpu(value: str | None) -> tuple[str | None, int]:
    """``nvidia-l4`` or ``nvidia-l4:2`` -> (type, count)."""
    if not value:
        return None, 0
    name, _, count = value.partition(":")
    name = name.strip().lower()
    if not re.match(r"^[a-z0-9-]+$", name):
        raise UsageError(f"--gpu: {value!r} is not a GPU type; write it like nvidia-l4 or nvidia-tesla-t4:2")
    try:
        n = int(count) if count else 1
    except ValueError:
        raise UsageError(f"--gpu: the count in {value!r} must be a whole number, e.g. nvidia-l4:2") from None
    if n not in (1, 2, 4, 8, 16):
        raise UsageError(f"--gpu: {n} GPUs cannot be attached; use 1, 2, 4, 8 or 16")
    return name, n


def parse_names(value: str | list[str] | tuple[str, ...] | None, option: str = "--out") -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in items if n.strip()]
    bad = [n for n in names if not n.isidentifier()]
    if bad:
        raise UsageError(f"{option}: {', '.join(map(repr, bad))} is not a Python variable name")
    if not names:
        raise UsageError(f"{option}: give at least one variable name, e.g. {option} model,scores")
    return names


def file_destination(raw: str) -> str:
    """Where ``--files PATH`` lands in the cell's working folder: a relative path as given (inside the
    folder), any other path by its file name."""
    path = Path(raw).expanduser()
    return raw if not path.is_absolute() and ".." not in path.parts else path.name


def parse_files(paths: list[str] | None) -> list[str]:
    """``--files``: two files that would land at the same place are refused, naming both."""
    landed: dict[str, str] = {}
    for raw in paths or []:
        dest = file_destination(raw)
        if dest in landed:
            raise UsageError(
                f"--files: {landed[dest]!r} and {raw!r} would both be {dest!r} in the cell's working folder; "
                "rename one of them"
            )
        landed[dest] = raw
    return list(paths or [])


@dataclass
class Options:
    """Everything a user can say about one launch."""

    backend: str = "local"
    name: str | None = None
    resources: Resources = field(default_factory=Resources)
    timeout_s: float = 24 * 3600.0
    max_restarts: int = 10
    detach: bool = False
    out: list[str] | None = None
    files: list[str] = field(default_factory=list)
    resume: str | None = None  # a job whose latest checkpoints this one begins with
    budget_usd: float | None = None  # what the job's machines may cost in all
    session: str | None = None  # the warm session the cell runs on (client/session.py)

    @classmethod
    def build(
        cls,
        *,
        backend: str = "local",
        name: str | None = None,
        cores: int | None = None,
        memory: float | None = None,
        machine_type: str | None = None,
        gpu: str | None = None,
        on_demand: bool = False,
        zone: str | None = None,
        image: str | None = None,
        image_family: str | None = None,
        timeout: str | float = "24h",
        max_restarts: int = 10,
        fallback_on_demand: bool = False,
        detach: bool = False,
        out: str | list[str] | None = None,
        files: list[str] | None = None,
        workers: int | None = None,
        resume: str | None = None,
        budget: str | float | None = None,
        session: str | None = None,
    ) -> Options:
        """Validate every value; the first bad one raises :class:`UsageError` naming it."""
        backends.get(backend)  # an unknown name is a UsageError naming the known ones
        if name is not None and not _NAME.match(name):
            raise UsageError(
                f"--name: {name!r} is not a valid job name; use lowercase letters, digits and '-', "
                "starting with a letter (at most 40 characters)"
            )
        if cores is not None and (not isinstance(cores, int) or cores < 1):
            raise UsageError(f"--cores: must be a whole number of at least 1, got {cores!r}")
        if memory is not None and not (math.isfinite(memory) and memory > 0):
            raise UsageError(f"--memory: must be a positive number of GB, got {memory!r}")
        if image and image_family:
            raise UsageError("--image and --image-family exclude each other; give one of them")
        if max_restarts < 0:
            raise UsageError(f"--max-restarts: must be 0 or more, got {max_restarts}")
        if session is not None and not _NAME.match(session):
            raise UsageError(f"--session: {session!r} is not a valid session name (lowercase letters, digits, '-')")
        if workers is not None and workers < 1:
            raise UsageError(f"--workers: must be at least 1, got {workers}")
        gpu_type, gpu_count = parse_gpu(gpu)
        return cls(
            backend=backend,
            name=name,
            resources=Resources(
                cores=cores,
                memory_gb=memory,
                machine_type=machine_type,
                gpu=gpu_type,
                gpu_count=gpu_count,
                on_demand=on_demand,
                zone=zone,
                image=image,
                image_family=image_family,
                workers=workers,
                fallback_on_demand=bool(fallback_on_demand),
            ),
            timeout_s=parse_duration(timeout),
            max_restarts=max_restarts,
            detach=detach,
            out=parse_names(out),
            files=parse_files(files),
            resume=_parse_resume(resume),
            budget_usd=parse_budget(budget),
            session=session,
        )


def _parse_resume(value: str | None) -> str | None:
    """``--resume JOB``: a job id or name (checked against the Store at submission)."""
    if value is None:
        return None
    ref = str(value).strip()
    if not ref or not re.match(r"^[a-z][a-z0-9-]{0,40}$", ref):
        raise UsageError(f"--resume: {value!r} is not a job id or name; `%burst jobs` lists them")
    return ref
