"""cloudpickle, except that code shipped by value keeps the name of the file it was written in.

cloudpickle 3.1.3 names every code object it pickles by value ``<dynamic-code>``, to make
its payloads the same wherever a function was defined. A function from the notebook (or
from a file beside it) that raises on the machine would then show neither its file nor
its lines in the traceback that comes back. The machine gets the file's lines with the
cell (client/result.py registers them with :mod:`linecache`), so the name is what matters.

cloudpickle also ships a class or function by value when the module its ``__module__`` names
is not imported yet, which installed packages do on purpose: numpy 2 names ``np.recarray``'s
module ``numpy.rec``, a module it imports only when asked. A value of such a class then came
back as an instance of a copy of the class (``type(x) is np.recarray`` false, its methods
failing on ``super()``). The pickler imports that module first, so the class goes by reference
as it would had the module been imported.
"""

from __future__ import annotations

import importlib
import io
import sys
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


_UNIMPORTABLE: set[str] = set()  # modules named by ``__module__`` that failed to import once


def _import_home(obj: type | types.FunctionType) -> None:
    """Import the module a class or function says it lives in, when that is not done yet."""
    name = obj.__module__
    if not isinstance(name, str) or name in sys.modules or name == "__main__" or name in _UNIMPORTABLE:
        return
    try:
        importlib.import_module(name)
    except Exception:  # not a module (a made-up name): cloudpickle ships the object by value, as before
        _UNIMPORTABLE.add(name)


class Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler; code objects keep their file's name, classes of installed packages go by name."""

    dispatch_table = ChainMap({types.CodeType: _code_reduce}, *cloudpickle.Pickler.dispatch_table.maps)

    def __init__(self, *args: Any, **kwargs: Any):
        # The same reducers in a plain dict (copyreg's as registered by now): the C pickler looks one up for every
        # object it pickles, which a ChainMap answers in Python, a third of the time of a Figure's pickle.
        self.dispatch_table = _flat_reducers()
        super().__init__(*args, **kwargs)

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)):
            _import_home(obj)
        return super().reducer_override(obj)


_flat: tuple[list[dict[Any, Any]], dict[Any, Any]] = ([], {})  # (the tables as they were, merged)


def _flat_reducers() -> dict[Any, Any]:
    """:attr:`Pickler.dispatch_table` merged into one dict, made again only when one of its tables changed: a
    cell makes several picklers, and merging in Python what a kernel with many packages imported registered in
    copyreg costs more than comparing the tables, which the C dicts do themselves."""
    global _flat
    tables = Pickler.dispatch_table.maps
    if len(_flat[0]) != len(tables) or any(seen != now for seen, now in zip(_flat[0], tables, strict=True)):
        _flat = ([dict(table) for table in tables], dict(Pickler.dispatch_table))
    return _flat[1]


def dumps(value: Any, protocol: int = 5, buffer_callback: Any = None) -> bytes:
    out = io.BytesIO()
    Pickler(out, protocol=protocol, buffer_callback=buffer_callback).dump(value)
    return out.getvalue()
