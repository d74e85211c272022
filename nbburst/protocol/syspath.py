"""The entries a notebook added to ``sys.path``, as process state carried both ways.

``sys.path.insert(0, "../src")`` or ``sys.path.append(os.path.abspath("lib"))`` in one cell, ``import mymodule``
in the next: in the kernel the path stays. What travels is not the path (each side has its own
``site-packages``) but the entries the notebook put before and after it, each named as the kernel names it
(:mod:`.workingdir`: the machine's working folder stands for the kernel's).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import workingdir

#: The path the notebook's entries are added to: in the kernel, as the first cell that runs elsewhere finds it;
#: on a machine, as it is when the kernel's entries arrive (the machine's own, the notebook's modules' folder).
_base: list[str] | None = None


def _path(entry: Any) -> str | None:
    """An entry as the path it names (``sys.path.append(Path("src"))`` names one too); None for anything else."""
    return os.fspath(entry) if isinstance(entry, (str, os.PathLike)) else None


def current() -> dict[str, list[Any]]:
    """``{"front": [...], "back": [...]}``: the entries added before the first of ``_base`` still there, and after."""
    global _base
    if _base is None:
        _base = list(sys.path)
    kept = set(_base)
    first = next((i for i, entry in enumerate(sys.path) if entry in kept), len(sys.path))
    added = [(i, path) for i, entry in enumerate(sys.path) if entry not in kept and (path := _path(entry)) is not None]
    return {
        "front": [workingdir.as_kernel(path) for i, path in added if i < first],
        "back": [workingdir.as_kernel(path) for i, path in added if i > first],
    }


def apply(value: dict[str, list[Any]]) -> None:
    """Put ``value``'s entries around this side's path, instead of the ones applied or added before (an entry
    that names no path never travels, and stays)."""
    global _base
    if _base is None:
        _base = list(sys.path)
    front, back = [workingdir.as_here(e) for e in value["front"]], [workingdir.as_here(e) for e in value["back"]]
    kept, wanted = set(_base), {*front, *back}
    sys.path[:] = [e for e in sys.path if e in kept or (path := _path(e)) is None or path in wanted]
    present = {_path(e) for e in sys.path}
    for entry in reversed(front):
        if entry not in present:
            sys.path.insert(0, entry)
    sys.path.extend(entry for entry in back if entry not in present)
