"""Which values are plain data: their pickle calls nothing but numpy, pandas and Python's own types.

A session's warm parent may load an input ahead of the cells that read it, to
know its fingerprint once instead of in every cell (agent/session/parent.py). It must
not run the notebook's code, or a library's, to do so: unpickling can call
anything the pickle names, and a thread or a connection made in the warm
parent would be in every cell forked from it. So it only loads values whose
pickle names nothing else, read from the pickle's opcodes without running them.
"""

from __future__ import annotations

import pickletools

from . import payload

#: Modules whose callables rebuild data and nothing else.
PLAIN_MODULES = ("numpy", "pandas", "builtins", "copyreg", "collections", "datetime", "_codecs")
_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"})
_MEMO_GETS = frozenset({"BINGET", "LONG_BINGET", "GET"})
_MEMO_PUTS = frozenset({"BINPUT", "LONG_BINPUT", "PUT"})


def _plain_module(name: str | None) -> bool:
    return name is not None and name.partition(".")[0] in PLAIN_MODULES


def plain_pickle(body: bytes | memoryview) -> bool:
    """Whether the pickle ``body`` only names callables of :data:`PLAIN_MODULES` (False when unsure)."""
    pushed: list[str | None] = []  # what each op pushed, when it was a string (the module and name of a global)
    memo: dict[int, str | None] = {}
    try:
        for op, arg, _ in pickletools.genops(bytes(body)):
            name = op.name
            if name in _STRINGS:
                pushed.append(arg)
            elif name == "MEMOIZE":
                memo[len(memo)] = pushed[-1] if pushed else None
            elif name in _MEMO_PUTS:
                memo[int(arg)] = pushed[-1] if pushed else None
            elif name in _MEMO_GETS:
                pushed.append(memo.get(int(arg)))
            elif name == "STACK_GLOBAL":
                if len(pushed) < 2 or not _plain_module(pushed[-2]):
                    return False
                pushed.append(None)
            elif name in ("BINPERSID", "PERSID"):  # refers to another input: it cannot be loaded on its own
                return False
            elif name in ("GLOBAL", "INST"):
                if not _plain_module(str(arg).partition(" ")[0]):
                    return False
                pushed.append(None)
            else:
                pushed.append(None)
    except (ValueError, TypeError):  # not a pickle we can read: not plain
        return False
    return True


def plain_value(data: bytes | bytearray | memoryview) -> bool:
    """Whether a one-value blob (:func:`.payload.encode`) holds plain data."""
    try:
        blob = payload.Blob.parse(data)
    except payload.BlobError:
        return False
    return len(blob.bodies) == 1 and plain_pickle(blob.bodies[0])
