"""The lines of the notebook's earlier cells that a cell's functions and classes were defined in.

A kernel keeps each cell's code in ``linecache`` under the name it compiled the cell under, so
``inspect.getsource(f)`` of a function an earlier cell defined works, and so does anything that reads it
(``f??``, ``torch.jit.script``, ``joblib.Memory``, a traceback through ``f``). A function travels by value
with its code's file name, and a machine never ran that cell: these lines go with the inputs that need them.
"""

from __future__ import annotations

import functools
import linecache
import types
from typing import Any


def _codes(value: Any) -> list[types.CodeType]:
    """The code objects of a function, a method, a partial, or of the functions of a notebook class (given
    itself or by an instance)."""
    if isinstance(value, functools.partial):
        value = value.func
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return [value.__code__]
    cls = value if isinstance(value, type) else type(value)
    if cls.__module__ != "__main__":
        return []
    found = []
    for member in vars(cls).values():
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property):
            member = member.fget
        if isinstance(member, types.FunctionType):
            found.append(member.__code__)
    return found


def collect(values: dict[str, Any]) -> dict[str, list[str]]:
    """File name -> lines, of the code the values were defined in that exists only in memory here (a cell's)."""
    names = {code.co_filename for value in values.values() for code in _codes(value)}
    entries = {name: linecache.cache.get(name) for name in names}
    # a cell's entry has no modification time: linecache never checks it against a file
    return {name: list(entry[2]) for name, entry in entries.items() if entry is not None and entry[1] is None}


def install(lines: dict[str, list[str]]) -> None:
    """Cache ``lines`` as the kernel has them, where this process has no lines of its own for that name."""
    for name, text in lines.items():
        linecache.cache.setdefault(name, (sum(map(len, text)), None, text, name))
