"""What a job gives back, in the kernel: a cell's variables and last value (:class:`CellResult`), or its
exception, raised here with a traceback through the cell's own lines."""

from __future__ import annotations

import ast
import linecache
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import RemoteError
from ..protocol import modulestate, pandascow, transfer
from ..protocol import processstate as process_state
from .replay import settle


def user_namespace() -> dict[str, Any]:
    """The namespace results come back to by default: the IPython kernel's, else ``__main__``'s."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


@dataclass
class CellResult:
    """What a cell sent back: the variables it assigned and its last expression."""

    values: dict[str, Any]
    deleted: list[str] = field(default_factory=list)
    has_last: bool = False
    last: Any = None
    last_bundle: tuple[dict[str, Any], dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # process state the cell changed
    failed: dict[str, str] = field(default_factory=dict)  # name -> why it could not come back (also in warnings)
    unsent: dict[str, str] = field(default_factory=dict)  # name -> its warning: its new value stayed behind
    replayable: dict[str, list[ast.stmt]] = field(default_factory=dict)  # the cell's def/class statements by name

    @classmethod
    def load(
        cls,
        data: bytes,
        namespace: dict[str, Any],
        inner: dict[str, dict[int, Any]] | None = None,
        replayable: dict[str, list[ast.stmt]] | None = None,
    ) -> CellResult:
        """Unpickle a result into ``namespace``'s terms (see :mod:`nbburst.protocol.transfer`): value by
        value, so one that cannot come back is a warning, not the loss of the others. ``inner``: the objects
        inside the inputs as they were sent, which the result may update in place; ``replayable``: the cell's
        statements that make again, in the kernel, a value that cannot come back (:mod:`nbburst.client.replay`)."""
        kernel = [namespace, *(inner or {}).values()]  # a Series made there of a kernel's frame is linked with it
        with pandascow.landing(lambda: (obj for objects in kernel for obj in objects.values())):
            loaded = transfer.load_values(data, namespace, inner)
        meta, values = loaded.meta, loaded.values
        has_last = meta["has_last"] and transfer.LAST in values
        last = values.pop(transfer.LAST, None)
        said = {
            name: f"{'the value of the cell (Out)' if name == transfer.LAST else repr(name)} could not come back: {why}"
            for name, why in loaded.failed.items()
        }
        # the names the cell bound whose new value stayed behind (not pickled there, or not unpickled here)
        unsent = {**meta.get("unsent", {}), **{n: why for n, why in said.items() if n in meta.get("bound", ())}}
        return cls(
            values=values,
            deleted=meta["deleted"],
            has_last=has_last,
            last=last,
            last_bundle=meta.get("last_bundle"),
            warnings=[*meta["warnings"], *said.values()],
            state=meta.get("state", {}),
            failed=dict(loaded.failed),
            unsent=unsent,
            replayable=dict(replayable or {}),
        )

    def merge_into(self, namespace: dict[str, Any]) -> None:
        """Bind the values, drop the deleted names, apply the process state, as the cell would have; then make
        again, or unbind, the names whose new values did not come back (:func:`nbburst.client.replay.settle`)."""
        namespace.update({n: v for n, v in self.values.items() if not modulestate.is_variable(n)})
        modulestate.bind({n: v for n, v in self.values.items() if modulestate.is_variable(n)})
        for name in self.deleted:
            namespace.pop(name, None)
        modulestate.unbind(n for n in self.deleted if modulestate.is_variable(n))
        self.warnings += process_state.restore(self.state)
        said = settle(namespace, self.unsent, self.replayable)
        told = set(self.unsent.values())
        self.warnings = [w for w in self.warnings if w not in told] + list(said.values())


def raise_remote(info: dict[str, Any]) -> None:
    """Raise the remote exception here, with a traceback through the cell's own lines."""
    __tracebackhide__ = True
    filename, source = info.get("filename"), info.get("source") or []
    if filename:
        linecache.cache[filename] = (sum(map(len, source)), None, source, filename)
    exc = info.get("exc")
    if isinstance(exc, BaseException):
        raise exc
    raise RemoteError(info["type"], info["message"], info.get("traceback", ""))
