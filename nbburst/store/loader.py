"""The one loader of the ``"module:Name"`` strings in nbburst's registries (Store schemes, backends).

A registry names each adapter by such a string, as fsspec's ``known_implementations`` does, so that choosing
one adapter imports only its module: the local backend and the ``file`` Store never import a cloud client.
It sits in the lowest layer so that every registry above can share it.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import UsageError


def load(target: str, what: str, install_hint: str = "") -> Any:
    """The object ``target`` (``"package.module:Name"``) names, its module imported now.

    A module that cannot be imported is a :class:`UsageError` that starts with ``what`` (what could not be
    done) and ends with ``install_hint``, the command that installs what is missing.
    """
    module_name, _, name = target.partition(":")
    if not module_name or not name:
        raise UsageError(f"{what}: {target!r} does not name a class; write it as package.module:Name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{what}: {exc}" + (f"; install it with `{install_hint}`" if install_hint else "")) from exc
    try:
        return getattr(module, name)
    except AttributeError:
        raise UsageError(f"{what}: {module_name} has no {name}") from None
