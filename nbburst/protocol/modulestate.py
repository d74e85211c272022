"""The variables of the notebook's own modules, carried as the inputs of the cells that use those modules.

``import settings; settings.SCALE = 10`` in one cell, then a ``%%burst`` cell calling ``settings.scaled(3)``:
plainly the function reads the kernel's ``SCALE``; a machine imports the module afresh from its file
(:mod:`.sources`) and read the file's. And what a cell changed there (``helpers.CACHE[key] = value``, or
``COUNT += 1`` in a function of the module) stayed on the machine. So each variable of such a module that the
kernel has imported (every global but its dunders, modules, and the functions and classes of a file's code)
is an input of the cell under the name ``module.variable``, which no notebook name can be: fingerprinted as
it arrives, sent back when the cell changed it (updating the kernel's own object) or rebound it, and bound in
its module on either side instead of in the namespace.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable, MutableMapping
from typing import Any

_CODE = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)


def is_variable(name: str) -> bool:
    """Whether ``name`` names a module's variable (``settings.SCALE``), not a notebook name."""
    return "." in name


def _module_of(name: str) -> tuple[types.ModuleType | None, str]:
    module, _, attribute = name.rpartition(".")
    return sys.modules.get(module), attribute


def variables(modules: Iterable[str]) -> dict[str, Any]:
    """The variables of the imported ``modules``, by their names as inputs."""
    found = {}
    for module_name in modules:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if attribute.startswith("__") and attribute.endswith("__"):
                continue
            if isinstance(value, _CODE) and getattr(value, "__module__", None) != "__main__":
                continue  # code: the module's file, or a library's, defines it on either side
            found[f"{module_name}.{attribute}"] = value
    return found


def lookup(name: str, default: Any) -> Any:
    """The value of the variable ``name`` here, or ``default``."""
    module, attribute = _module_of(name)
    return default if module is None else vars(module).get(attribute, default)


def bind(values: dict[str, Any]) -> None:
    """Bind each variable of ``values`` in its module, where that module is imported here."""
    for name, value in values.items():
        module, attribute = _module_of(name)
        if module is not None:
            setattr(module, attribute, value)


def unbind(names: Iterable[str]) -> None:
    for name in names:
        module, attribute = _module_of(name)
        if module is not None and attribute in vars(module):
            delattr(module, attribute)


def lift(ns: MutableMapping[str, Any]) -> list[str]:
    """On the machine, before the cell: move the variables that arrived in ``ns`` into their modules (the very
    objects); returns their names. A module not imported here keeps its variables out of the cell's sight."""
    lifted = [name for name in ns if is_variable(name) and _module_of(name)[0] is not None]
    bind({name: ns.pop(name) for name in lifted})
    return lifted


def lower(ns: MutableMapping[str, Any], names: Iterable[str]) -> None:
    """After the cell: the variables ``names`` as their modules hold them now, back in ``ns`` under their names
    (absent where the cell unbound one), so that they are judged as the cell's other inputs are."""
    missing = object()
    for name in names:
        value = lookup(name, missing)
        if value is not missing:
            ns[name] = value
