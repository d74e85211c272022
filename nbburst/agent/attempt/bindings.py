"""The names a cell bound, rebound or unbound that its code does not show, told by the namespace itself.

The kernel reads from a cell's code the names it binds; ``exec("made = 7")``, ``globals()["also"] = 8``, ``%run
script.py`` or a function that writes into ``globals()`` bind names no syntax shows, and plainly they stay bound
in the kernel. So the machine compares the cell's namespace after it with the namespace it found, and every name
the cell bound, rebound or unbound goes back with the ones its code shows (unless ``--out`` named what goes back),
IPython's own names left out.

The variables of the notebook's own modules that arrived as inputs (:mod:`nbburst.protocol.modulestate`) are
in their modules while the cell runs, and judged afterwards under their names as the namespace's own are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...protocol import history, modulestate


class Bindings:
    """The namespace as the cell finds it, to tell afterwards what the cell bound."""

    def __init__(self, ns: Mapping[str, Any], hidden: Mapping[str, Any], told: bool):
        """``hidden``: the shell's ``user_ns_hidden``; ``told``: ``--out`` named what goes back."""
        self.seen, self.hidden, self.told = dict(ns), hidden, told
        self.lifted: list[str] = []

    def lift(self, ns: dict[str, Any]) -> None:
        """Before the cell: the modules' variables that arrived go into their modules."""
        self.lifted = modulestate.lift(ns)

    def settle(self, ns: dict[str, Any]) -> None:
        """After the cell: the modules' variables back in ``ns``, as the modules hold them now."""
        modulestate.lower(ns, self.lifted)

    def _notebooks(self, name: str, value: Any) -> bool:
        return not (name.startswith("__") and name.endswith("__")) and not history.is_shells(name, value, self.hidden)

    def bound(self, ns: Mapping[str, Any]) -> list[str]:
        """The names bound to another object than the cell found there, or to one where it found none."""
        if self.told:
            return []
        return [n for n, v in ns.items() if (n not in self.seen or self.seen[n] is not v) and self._notebooks(n, v)]

    def unbound(self, ns: Mapping[str, Any]) -> list[str]:
        """The names the cell found bound and left unbound."""
        if self.told:
            return []
        return [n for n, v in self.seen.items() if n not in ns and self._notebooks(n, v)]
