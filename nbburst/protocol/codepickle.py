"""cloudpickle, except that code shipped by value keeps the name of the file it was written in.

cloudpickle 3.1.3 names every code object it pickles by value ``<dynamic-code>``, to make
its payloads the same wherever a function was defined. A function from the notebook (or
from a file beside it) that raises on the machine would then show neither its file nor
its lines in the traceback that comes back. The machine gets the file's lines with the
cell (client/burst.py registers them with :mod:`linecache`), so the name is what matters.
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any

import cloudpickle

_CLOUDPICKLE_CODE = cloudpickle.Pickler.dispatch_table[types.CodeType]  # cloudpickle's own reducer


def _code_reduce(code: types.CodeType) -> tuple[Any, tuple[Any, ...]]:
    _, args = _CLOUDPICKLE_CODE(code)
    return rebuild_code, (args, code.co_filename)


def rebuild_code(args: tuple[Any, ...], filename: str) -> types.CodeType:
    """A code object from cloudpickle's arguments, in its own file."""
    return types.CodeType(*args).replace(co_filename=filename)


class Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler; code objects keep their file's name."""

    dispatch_table = ChainMap({types.CodeType: _code_reduce}, *cloudpickle.Pickler.dispatch_table.maps)


def dumps(value: Any, protocol: int = 5, buffer_callback: Any = None) -> bytes:
    out = io.BytesIO()
    Pickler(out, protocol=protocol, buffer_callback=buffer_callback).dump(value)
    return out.getvalue()
