"""The environment variables a notebook set or removed, as process state carried both ways.

``%env OMP_NUM_THREADS=1``, ``os.environ["KMP_DUPLICATE_LIB_OK"] = "TRUE"``, ``os.environ.pop(...)``: in the
kernel these stay in force for the next cell, for what it imports and for the programs its ``!`` lines
start. What travels is not the environment (the machine has its own ``PATH``, ``HOME``, credentials) but
what the notebook changed in it: each variable set to a value other than the process started with, each
one the process started with and no longer has. The machine applies the kernel's changes before the cell
and sends back its own changes, the kernel's included, after it.

Each side keeps nbburst's own variables (``NBBURST_*``, which mark an attempt's processes) and the
IPython folder a runner is given.
"""

from __future__ import annotations

import os
from typing import Any

_OWN_PREFIX = "NBBURST_"
_OWN = frozenset({"IPYTHONDIR"})

#: What the changes are measured from: in the kernel, the environment its process started with (the first call
#: there asks for the changes); on a machine, the first call applies the kernel's, and the environment the
#: machine had until then is its own (its agent's settings, the attempt's marker), none of it the notebook's.
_base: dict[str, str] | None = None

#: The changes last applied here: a variable they set that happens to have, on this side, the value the
#: process started with is still the notebook's (the kernel did set it), and so is one they removed that
#: this side never had.
_applied: dict[str, Any] = {"set": {}, "unset": []}


def _own(name: str) -> bool:
    return name.startswith(_OWN_PREFIX) or name in _OWN


def _started() -> dict[str, str]:
    """The environment the notebook's changes are measured from (``_base``)."""
    global _base
    if _base is None:
        _base = _from_start()
    return _base


def _from_start() -> dict[str, str]:
    """The environment this process started with: what Linux shows of it (a kernel's, before ipykernel or a
    notebook cell changed anything), or else the one it has when first asked."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if b"=" in entry)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}


def _change(before: str | None, now: str) -> str | tuple[str, str]:
    """A variable's new value, or, for a list of paths the notebook extended (``PATH``, ``PYTHONPATH``), the
    entries put before and after its earlier value: the other side's own list is extended alike, not replaced
    by the kernel's."""
    at = now.find(before) if before and before != now else -1
    if at < 0:
        return now
    ahead, behind = now[:at], now[at + len(before or "") :]
    if (ahead and not ahead.endswith(os.pathsep)) or (behind and not behind.startswith(os.pathsep)):
        return now
    return ahead, behind


def _around(change: tuple[str, str], value: str | None) -> str:
    """The entries ``change`` puts before and after ``value``: alone, where this side has no such variable; none
    where ``value`` has them already (a machine started from the kernel's environment as the notebook left it)."""
    ahead, behind = change
    if value and len(value) >= len(ahead) + len(behind) and value.startswith(ahead) and value.endswith(behind):
        return value
    if value:
        return ahead + value + behind
    return os.pathsep.join(part for part in (ahead.removesuffix(os.pathsep), behind.removeprefix(os.pathsep)) if part)


def current() -> dict[str, Any]:
    """``{"set": {name: value or (before, after)}, "unset": [name]}``: the notebook's changes, as they differ
    from ``_base``."""
    start, now = _started(), os.environ
    changed = {k: _change(start.get(k), v) for k, v in now.items() if start.get(k) != v and not _own(k)}
    changed.update({k: _change(start.get(k), now[k]) for k in _applied["set"] if k in now and k not in changed})
    removed = {k for k in start if k not in now and not _own(k)}
    removed.update(k for k in _applied["unset"] if k not in now)
    return {"set": dict(sorted(changed.items())), "unset": sorted(removed)}


def apply(value: dict[str, Any]) -> None:
    """Make the environment ``_base`` changed as ``value`` says."""
    global _applied, _base
    if _base is None:
        _base = dict(os.environ)
    start, before = _started(), current()
    for name in [*before["set"], *before["unset"]]:  # the earlier changes ``value`` does not make again
        if name not in value["set"] and name not in value["unset"]:
            if name in start:
                os.environ[name] = start[name]
            else:
                os.environ.pop(name, None)
    for name, change in value["set"].items():
        text = change if isinstance(change, str) else _around(change, start.get(name))
        if os.environ.get(name) != text:
            os.environ[name] = text
    for name in value["unset"]:
        os.environ.pop(name, None)
    _applied = {"set": dict(value["set"]), "unset": list(value["unset"])}
