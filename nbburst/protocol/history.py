"""The names IPython binds in a notebook's namespace at every cell: its input and output history.

The kernel sends them only to a cell that reads them (``_ * 3``, ``Out[4]``), and the machine, whose shell
binds its own at the cell it runs, never sends them back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: ``_``, ``__``, ``___``, ``_N``, ``_i``, ``_iN``... rebound by IPython at every cell.
NAMES = re.compile(r"^(_|__|___|_i|_ii|_iii|_i\d+|_\d+|_ih|_oh|_dh)$")
#: The history's lists, bound once: a notebook may bind the names to values of its own.
LISTS = frozenset({"In", "Out"})


def is_shells(name: str, value: Any, hidden: Mapping[str, Any]) -> bool:
    """Whether ``name`` is IPython's own in a namespace where ``hidden`` is ``shell.user_ns_hidden``: a history
    name, or a name IPython put there that still holds IPython's object (``display``, ``exit``, ``In``); a
    user's ``display = ConfusionMatrixDisplay(...)`` is the notebook's."""
    return bool(NAMES.match(name)) or (name in hidden and hidden[name] is value)
