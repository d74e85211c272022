"""The cell options: each declared once, in :data:`CELL_OPTIONS`, and every front end made from it.

An option is one :class:`CellOption` (its name, what it reads, its default, its help, how it is checked).
From that one list come the ``%%burst`` flags (ui/magic.py, as ipyparallel's ``exec_args`` gives
``%%px`` and ``%pxconfig`` the same flags), :meth:`Options.build`'s checks, the configured defaults
:meth:`~nbburst.client.burst.Burst.options` fills in, the keywords of ``nbburst.submit`` and the
reference docs/options.md, so that a new option is one entry here.

One parser for each value, so ``--timeout 2h``, ``timeout="2h"`` and ``c.NBBurst.timeout = "2h"`` mean the
same thing everywhere and fail with the same message.
"""

from __future__ import annotations

import inspect
import math
import posixpath
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .errors import UsageError
from .protocol import backends, workfiles
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
    """Where ``--files PATH`` lands, relative to the cell's working folder: a relative path where the cell
    finds it (``../data/x.csv`` too, up to ``workfiles.UP_LIMIT`` folders up), any other path by its file
    name. The relative path is normalised (``./data/x.csv`` and ``data//x.csv`` are ``data/x.csv``), so
    one file has one name on both sides: the machine tells the files the cell wrote from the ones it was
    given by that name."""
    path = Path(raw).expanduser()
    if path.is_absolute():
        return path.name
    rel = posixpath.normpath(raw)
    return rel if workfiles.levels_up(rel) <= workfiles.UP_LIMIT else path.name


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


def _as_given(value: Any) -> Any:
    return value


def _backend(value: str) -> str:
    backends.get(value)  # an unknown name is a UsageError naming the known ones
    return value


def _job_name(value: str | None) -> str | None:
    if value is not None and not _NAME.match(value):
        raise UsageError(
            f"--name: {value!r} is not a valid job name; use lowercase letters, digits and '-', "
            "starting with a letter (at most 40 characters)"
        )
    return value


def _cores(value: int | None) -> int | None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise UsageError(f"--cores: must be a whole number of at least 1, got {value!r}")
    return value


def _memory(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"--memory: must be a positive number of GB, got {value!r}")
    return value


def _max_restarts(value: int) -> int:
    if value < 0:
        raise UsageError(f"--max-restarts: must be 0 or more, got {value}")
    return value


def _workers(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise UsageError(f"--workers: must be at least 1, got {value}")
    return value


def _resume(value: str | None) -> str | None:
    """``--resume JOB``: a job id or name (checked against the Store at submission)."""
    if value is None:
        return None
    ref = str(value).strip()
    if not ref or not re.match(r"^[a-z][a-z0-9-]{0,40}$", ref):
        raise UsageError(f"--resume: {value!r} is not a job id or name; `%burst jobs` lists them")
    return ref


def _keep(value: str | float | None) -> float | None:
    """``--keep 10m``: how long the machine stays warm without a cell after it (:mod:`nbburst.client.keep`)."""
    if value is None:
        return None
    if str(value).strip().startswith("-"):
        raise UsageError(f"--keep: the idle time must be positive, got {value!r}; write it like 10m or 1h")
    return parse_duration(value, "--keep")


def _session_name(value: str | None) -> str | None:
    if value is not None and not _NAME.match(value):
        raise UsageError(f"--session: {value!r} is not a valid session name (lowercase letters, digits, '-')")
    return value


@dataclass(frozen=True)
class CellOption:
    """One option of a launch: what the flag, the keyword, the check and the reference are made from."""

    #: The Python keyword; the flag is ``--`` and the name with ``-`` for ``_``.
    name: str
    #: What the flag reads: int, float or str; bool: a switch; list: one or more values.
    reads: type
    #: One line for ``%%burst?``, ``help(nbburst.submit)`` and docs/options.md.
    help: str
    #: The value when neither the user nor the configuration gives one.
    default: Any = None
    #: Checks a value and returns what :class:`Options` keeps; a bad one is a UsageError naming the flag.
    parse: Callable[[Any], Any] = _as_given
    #: The fields of :class:`Options` it fills (``resources.x``: of its Resources); by default the one
    #: named like the option. A parser of an option kept in several fields returns one value per field.
    into: tuple[str, ...] = ()
    #: Its default is the setting of the same name (``c.NBBurst.<name>``, ``%burst config``).
    configured: bool = False
    #: Also a keyword of ``nbburst.submit`` (the other options are about a cell).
    api: bool = False
    #: The Python values it takes, when more than what the flag reads (``str | float``).
    python: str = ""
    #: The values it may take, known when the flag is made.
    choices: Callable[[], tuple[str, ...]] | None = None
    #: Other options that may not be given with this one.
    excludes: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def fields(self) -> tuple[str, ...]:
        return self.into or (self.name,)

    @property
    def annotation(self) -> str:
        """Its type as a keyword of ``nbburst.submit``: None leaves it to the configuration or the default."""
        return f"{self.python or self.reads.__name__} | None"

    def argparse(self) -> dict[str, Any]:
        """The keywords of ``add_argument`` for its flag (a flag not given reads as None, a switch as False)."""
        kwargs: dict[str, Any] = {"help": self.help}
        if self.reads is bool:
            kwargs["action"] = "store_true"
        elif self.reads is list:
            kwargs["nargs"] = "+"
        elif self.reads is not str:
            kwargs["type"] = self.reads
        if self.choices is not None:
            kwargs["choices"] = self.choices()
        return kwargs


#: Every option of a launch, in the order ``%%burst?`` lists them and :meth:`Options.build` checks them.
CELL_OPTIONS: tuple[CellOption, ...] = (
    CellOption(
        "cores",
        int,
        "vCPUs of the machine (the cell sees exactly this many)",
        parse=_cores,
        into=("resources.cores",),
        api=True,
    ),
    CellOption("memory", float, "minimum memory in GB", parse=_memory, into=("resources.memory_gb",), api=True),
    CellOption(
        "machine_type", str, "Compute Engine machine type, e.g. n2-standard-64", into=("resources.machine_type",)
    ),
    CellOption(
        "gpu",
        str,
        "GPU type and count, e.g. nvidia-l4 or nvidia-tesla-t4:2",
        parse=parse_gpu,
        into=("resources.gpu", "resources.gpu_count"),
    ),
    CellOption("on_demand", bool, "a standard VM instead of spot", default=False, into=("resources.on_demand",)),
    CellOption("zone", str, "Compute Engine zone, or auto", into=("resources.zone",)),
    CellOption("image", str, "VM image", into=("resources.image",), excludes=("image_family",)),
    CellOption("image_family", str, "VM image family", into=("resources.image_family",)),
    CellOption(
        "backend",
        str,
        "where to run (default from config)",
        default="local",
        parse=_backend,
        configured=True,
        api=True,
        choices=backends.names,
    ),
    CellOption("name", str, "a name for the job (usable wherever a job id is)", parse=_job_name, api=True),
    CellOption(
        "timeout",
        str,
        "hard time limit: 90s, 30m, 2h (default 24h)",
        default="24h",
        parse=parse_duration,
        into=("timeout_s",),
        configured=True,
        api=True,
        python="str | float",
    ),
    CellOption(
        "max_restarts",
        int,
        "relaunches after preemption before failing (default 10)",
        default=10,
        parse=_max_restarts,
        configured=True,
    ),
    CellOption(
        "fallback_on_demand",
        bool,
        "relaunch on a standard VM when spot capacity is out",
        default=False,
        parse=bool,
        into=("resources.fallback_on_demand",),
        configured=True,
    ),
    CellOption("detach", bool, "return a Job handle at once instead of waiting", default=False),
    CellOption(
        "out",
        str,
        "comma-separated names to bring back (default: all assigned)",
        parse=parse_names,
        python="str | list[str]",
    ),
    CellOption(
        "files",
        list,
        "local files to place in the cell's working folder",
        parse=parse_files,
        python="list[str]",
    ),
    CellOption("workers", int, "Dask workers for scale-out", parse=_workers, into=("resources.workers",)),
    CellOption("resume", str, "begin with the latest checkpoints of this job (id or name)", parse=_resume, api=True),
    CellOption(
        "budget",
        str,
        "dollar cap on what the job's machines may cost, relaunches included, e.g. 2.50",
        parse=parse_budget,
        into=("budget_usd",),
        configured=True,
        api=True,
        python="str | float",
    ),
    CellOption(
        "session",
        str,
        "run on this warm session (default: the session started last, if any)",
        parse=_session_name,
    ),
    CellOption(
        "keep",
        str,
        "keep the machine warm for later cells of the same shape until it has been idle this long, e.g. 10m",
        parse=_keep,
        into=("keep_s",),
        api=True,
        python="str | float",
        excludes=("session", "workers"),
    ),
)

_BY_NAME = {option.name: option for option in CELL_OPTIONS}

#: The options that are also keywords of ``nbburst.submit``.
API_OPTIONS: tuple[CellOption, ...] = tuple(option for option in CELL_OPTIONS if option.api)


@dataclass
class Options:
    """Everything a user can say about one launch, checked (see :data:`CELL_OPTIONS`)."""

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
    session: str | None = None  # the warm session the cell runs on (client/session/)
    keep_s: float | None = None  # --keep: its machine stays warm this long without a cell (client/keep.py)

    @classmethod
    def build(cls, **given: Any) -> Options:
        """Check every value, in the order of :data:`CELL_OPTIONS`; the first bad one raises
        :class:`UsageError` naming it. Keywords are the options' names; one not given takes its default."""
        unknown = sorted(set(given) - set(_BY_NAME))
        if unknown:
            raise TypeError(f"Options.build: no option {', '.join(unknown)}; the options are {', '.join(_BY_NAME)}")
        top: dict[str, Any] = {}
        resources: dict[str, Any] = {}
        for option in CELL_OPTIONS:
            value = given.get(option.name, option.default)
            for excluded in option.excludes:
                if value and given.get(excluded):
                    other = _BY_NAME[excluded].flag
                    raise UsageError(f"{option.flag} and {other} exclude each other; give one of them")
            parsed = option.parse(value)
            for place, kept in zip(option.fields, parsed if len(option.fields) > 1 else (parsed,), strict=True):
                group, _, attr = place.rpartition(".")
                (resources if group else top)[attr] = kept
        return cls(resources=Resources(**resources), **top)


F = TypeVar("F", bound=Callable[..., Any])


def api_keywords(func: F) -> F:
    """Give ``func`` (``fn, *args, **kwargs``) the signature ``nbburst.submit`` shows: a keyword for each of
    :data:`API_OPTIONS` before its ``**kwargs``, so ``help()`` and completion list them."""
    signature = inspect.signature(func)
    *positional, rest = signature.parameters.values()
    keywords = [
        inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=option.annotation)
        for option in API_OPTIONS
    ]
    func.__signature__ = signature.replace(parameters=[*positional, *keywords, rest])  # type: ignore[attr-defined]
    return func


def split_api_options(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``nbburst.submit``'s keywords as (the options given, the function's keyword arguments); an option
    left at None is left to the configuration."""
    given = {name: value for name, value in kwargs.items() if name in _BY_NAME and _BY_NAME[name].api}
    rest = {name: value for name, value in kwargs.items() if name not in given}
    return {name: value for name, value in given.items() if value is not None}, rest


REGENERATE = ".venv/bin/python -m nbburst.options > docs/options.md"


def _default_text(option: CellOption) -> str:
    if option.reads is bool and not option.default:
        shown = "off"
    elif option.default is None:
        shown = "none"
    else:
        shown = f"`{option.default}`"
    return f"{shown}, or `c.NBBurst.{option.name}`" if option.configured else shown


def reference() -> str:
    """docs/options.md: every option with its flag, keyword, values and default (``python -m nbburst.options``)."""
    lines = [
        "# Cell options",
        "",
        "What a launch can be told, the same way everywhere: as `%%burst` flags, as keywords of",
        "`nbburst.submit` (those marked), and, where a setting of the same name exists, as the default",
        "from the configuration (`c.NBBurst.<name>`, `NBBURST_<NAME>`, `%burst config name=value`).",
        "",
        f"Made from `CELL_OPTIONS` in nbburst/options.py; regenerate with `{REGENERATE}`.",
        "",
        "| `%%burst` flag | `nbburst.submit` | value | default | what it does |",
        "|---|---|---|---|---|",
    ]
    for option in CELL_OPTIONS:
        value = "switch" if option.reads is bool else "`" + (option.python or option.reads.__name__) + "`"
        if option.choices is not None:
            value += ": " + ", ".join(f"`{choice}`" for choice in option.choices())
        value = value.replace("|", "\\|")  # a table cell
        what = option.help
        if option.excludes:
            what += "; not with " + " or ".join(f"`{_BY_NAME[name].flag}`" for name in option.excludes)
        keyword = f"`{option.name}=`" if option.api else ""
        lines.append(f"| `{option.flag}` | {keyword} | {value} | {_default_text(option)} | {what} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
