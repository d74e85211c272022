"""Methods and accessors a notebook adds to a library's classes, as process state carried both ways.

``tqdm.pandas()`` in one cell and ``df.progress_apply(f)`` in the next; a class the notebook defines under
``@pd.api.extensions.register_dataframe_accessor("geo")``, then ``df.geo.centre``: the kernel's pandas classes
have gained attributes that a fresh process's lack, and the cell raised ``AttributeError`` on a machine. What
travels, for the classes that pandas and xarray document as the places to extend (their data objects, and
pandas' group-by, window and resample objects, where tqdm, pandarallel and pandas-flavor add their methods),
is each attribute whose home lies outside the library: a function, property, class or accessor that another
package or the notebook defined. Each side sets what the other sent; nothing is removed, so an attribute
that could not travel is never lost.
"""

from __future__ import annotations

import functools
import importlib
import types
from typing import Any

#: Library -> the classes a notebook extends, by the public name each version of the library that has them
#: gives them (a name the installed version lacks is passed over).
EXTENDED: dict[str, tuple[str, ...]] = {
    "pandas": (
        "pandas:DataFrame",
        "pandas:Series",
        "pandas:Index",
        # https://pandas.pydata.org/docs/reference/api/pandas.api.typing.DataFrameGroupBy.html and its siblings
        "pandas.api.typing:DataFrameGroupBy",
        "pandas.api.typing:SeriesGroupBy",
        "pandas.core.groupby:GroupBy",
        "pandas.api.typing:Rolling",
        "pandas.api.typing:Expanding",
        "pandas.api.typing:ExponentialMovingWindow",
        "pandas.api.typing:Resampler",
    ),
    # https://docs.xarray.dev/en/stable/internals/extending-xarray.html
    "xarray": ("xarray:Dataset", "xarray:DataArray", "xarray:DataTree"),
}

#: Library -> its extended classes by name, as found the first time they were asked for.
_found: dict[str, dict[str, type]] = {}


def _classes(library: str) -> dict[str, type]:
    found = _found.get(library)
    if found is None:
        found = {}
        for name in EXTENDED[library]:
            module, _, attribute = name.partition(":")
            try:
                cls = getattr(importlib.import_module(module), attribute)
            except (ImportError, AttributeError):
                continue
            if isinstance(cls, type):
                found[name] = cls
        _found[library] = found
    return found


def _home(value: Any) -> str | None:
    """The module that defined ``value``, a class's attribute; None for data (a flag, a list of names)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    elif isinstance(value, functools.partial):
        value = value.func
    if isinstance(value, (types.FunctionType, type)):
        return value.__module__
    accessor = _accessor(value)
    return None if accessor is None else accessor.__module__


def _accessor(value: Any) -> type | None:
    """The class of a registered accessor (``df.geo``), as pandas' and xarray's descriptors hold it."""
    accessor = vars(value).get("_accessor") if hasattr(value, "__dict__") else None
    return accessor if isinstance(accessor, type) else None


def _foreign(home: str | None, library: str) -> bool:
    return home is not None and home.partition(".")[0] not in (library, "nbburst")


def current(library: str) -> dict[str, dict[str, Any]]:
    """Class name -> the attributes of that class whose home lies outside ``library``."""
    out = {}
    for name, cls in _classes(library).items():
        added = {key: value for key, value in vars(cls).items() if _foreign(_home(value), library)}
        if added:
            out[name] = added
    return out


def apply(library: str, value: dict[str, dict[str, Any]]) -> None:
    """Set the attributes ``value`` names on this side's classes (those this side lacks or has otherwise)."""
    classes = _classes(library)
    for name, added in value.items():
        cls = classes.get(name)
        if cls is None:
            continue
        registry = vars(cls).get("_accessors")  # pandas names its classes' accessors there, for dir()
        for key, attribute in added.items():
            if vars(cls).get(key) is not attribute:
                setattr(cls, key, attribute)
            if isinstance(registry, set) and _accessor(attribute) is not None:
                registry.add(key)
