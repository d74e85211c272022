"""Process state a cell relies on, carried both ways: a small registry users can extend.

A cell run in the kernel sees, and leaves behind, more than its variables:
``np.random.seed(0)`` in one cell decides what the next draws; ``set_config``,
``pd.set_option``, ``plt.rc`` and ``warnings.filterwarnings`` stay in force.
Each kind of such state is an entry ``name -> (module, get, set)``:

* the kernel sends ``get()`` of every entry whose module it has imported;
* the machine ``set``\\ s it before the cell (when the module is imported there,
  at once or as soon as the cell imports it) and sends back the entries the
  cell changed;
* the kernel ``set``\\ s those (again once their module is imported).

Libraries and users add their own::

    nbburst.state.register("mylib.seed", mylib.get_seed, mylib.set_seed, module="mylib")

Entries travel with the job, so a getter and setter defined in the notebook
work on the machine too. Each state travels pickled on its own and is
unpickled only once its module is imported there: numpy's RNG state must not
cost a cell that never uses numpy the import of numpy.
"""

from __future__ import annotations

import functools
import pickle
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import classextensions, envvars, figureformats, loggingstate, shellstate, syspath, workingdir
from .imports import when_imported


@dataclass(frozen=True)
class Entry:
    """One kind of process state: read with ``get()``, applied with ``set(value)`` once ``module`` is imported."""

    name: str
    module: str
    get: Callable[[], Any]
    set: Callable[[Any], None]


_REGISTRY: dict[str, Entry] = {}
#: States a cell left that wait for their module to be imported here (numpy's RNG state, seeded on the machine,
#: waits for ``numpy.random``, which numpy imports lazily): the next cell takes them along as they are.
_pending: dict[str, Any] = {}
#: Entries that pickled once (:func:`capture`).
_travels: set[Entry] = set()


def register(name: str, get: Callable[[], Any], set: Callable[[Any], None], module: str | None = None) -> None:
    """Carry the state ``get()`` returns to burst cells and back; ``module`` (default: ``name``'s first part)
    must be imported for the state to exist."""
    _REGISTRY[name] = Entry(name, module or name.partition(".")[0], get, set)


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def entries() -> dict[str, Entry]:
    return dict(_REGISTRY)


def capture() -> dict[str, tuple[Entry, bytes]]:
    """The state of every entry whose module is imported here, pickled, with the entry itself (it travels too);
    for one whose module is not imported yet, the state a cell left that waits for it (:func:`restore`)."""
    from .codepickle import dumps

    found = {}
    for name, entry in _REGISTRY.items():
        if entry.module not in sys.modules and name not in _pending:
            continue
        try:
            value = entry.get() if entry.module in sys.modules else _pending[name]
            if entry not in _travels:  # its getter and setter travel too: checked once, not before every cell
                dumps(entry)
                _travels.add(entry)
            found[name] = (entry, dumps(value))
        except Exception as exc:
            warnings.warn(f"nbburst: the state {name!r} stays here: {exc}", RuntimeWarning, stacklevel=2)
    return found


def restore(values: dict[str, Any], known: dict[str, Entry] | None = None) -> list[str]:
    """Apply states (each once its module is imported); returns what could not be applied."""
    registry = _REGISTRY if known is None else known
    problems = []
    for name, value in values.items():
        entry = registry.get(name)
        if entry is None:
            problems.append(f"the state {name!r} is not registered here (nbburst.state.register)")
            continue
        _pending[name] = value

        def apply(_module: Any, name: str = name, entry: Entry = entry, value: Any = value) -> None:
            if _pending.get(name) is value:
                del _pending[name]
            entry.set(value)

        try:
            when_imported(entry.module, apply)
        except Exception as exc:
            problems.append(f"the state {name!r} could not be applied: {type(exc).__name__}: {exc}")
    return problems


def _same(a: Any, b: Any) -> bool:
    try:
        return pickle.dumps(a, 5) == pickle.dumps(b, 5)
    except Exception:
        try:
            return bool(a == b)
        except Exception:
            return False


class Tracker:
    """On the machine: applies the kernel's states, then tells which ones the cell changed.

    ``begin()`` runs right before the cell's code: states are set (or set once
    their module is imported) and a baseline is taken of every entry, the
    registered ones included, so that a module the cell imports and configures
    is noticed too.
    """

    def __init__(self, shipped: dict[str, tuple[Entry, bytes]]):
        self.entries = {**_REGISTRY, **{name: entry for name, (entry, _) in shipped.items()}}
        self.arrived = {name: value for name, (_, value) in shipped.items()}
        self.baseline: dict[str, Any] = {}
        self.problems: list[str] = []

    def begin(self) -> None:
        for name, entry in self.entries.items():
            when_imported(entry.module, lambda _module, name=name, entry=entry: self._start(name, entry))

    def _start(self, name: str, entry: Entry) -> None:
        try:
            if name in self.arrived:
                entry.set(pickle.loads(self.arrived[name]))
            self.baseline[name] = entry.get()
        except Exception as exc:
            self.problems.append(f"the state {name!r} could not be applied on the machine: {exc}")

    def changes(self) -> dict[str, Any]:
        """States that differ from their baseline now."""
        changed = {}
        for name, before in self.baseline.items():
            try:
                now = self.entries[name].get()
            except Exception as exc:
                self.problems.append(f"the state {name!r} could not be read after the cell: {exc}")
                continue
            if not _same(before, now):
                changed[name] = now
        return changed


# -- the entries every notebook has -----------------------------------------------------------


def _numpy_get() -> Any:
    # Not `np.random`: right after numpy.random's import, numpy has no such attribute yet, and its lazy
    # __getattr__ would import numpy.random again, and again.
    from numpy.random import get_state

    return get_state()


def _numpy_set(value: Any) -> None:
    from numpy.random import set_state

    set_state(value)


def _random_get() -> Any:
    import random

    return random.getstate()


def _random_set(value: Any) -> None:
    import random

    random.setstate(value)


def _sklearn_get() -> Any:
    import sklearn

    return sklearn.get_config()


def _sklearn_set(value: Any) -> None:
    import sklearn

    sklearn.set_config(**value)


def _pandas_options() -> dict[str, Any]:
    from pandas._config import config  # the registry of options (no public listing exists)

    return {k: o.defval for k, o in config._registered_options.items() if k not in config._deprecated_options}


def _differs(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except Exception:
        return True


def _pandas_get() -> Any:
    import pandas as pd

    return {k: v for k, d in _pandas_options().items() if _differs(v := pd.get_option(k), d)}


def _pandas_set(value: Any) -> None:
    import pandas as pd

    for key, default in _pandas_options().items():
        want = value.get(key, default)
        if _differs(pd.get_option(key), want):
            pd.set_option(key, want)


_MPL_OWN = ("backend", "backend_fallback", "interactive")  # where figures go: each side keeps its own


def _matplotlib_get() -> Any:
    """rcParams, with the colormap they name: a library registered it (seaborn's "rocket"), and the
    other side may not have imported that library."""
    import matplotlib as mpl

    params = dict(mpl.rcParams.copy())
    for key in _MPL_OWN:
        params.pop(key, None)
    name = params.get("image.cmap")
    return {"rc": params, "cmap": mpl.colormaps[name] if isinstance(name, str) and name in mpl.colormaps else None}


def _matplotlib_set(value: Any) -> None:
    import matplotlib as mpl

    cmap, name = value["cmap"], value["rc"].get("image.cmap")
    if cmap is not None and name not in mpl.colormaps:
        mpl.colormaps.register(cmap, name=name)
    mpl.rcParams._update_raw({k: v for k, v in value["rc"].items() if k not in _MPL_OWN})  # as rc_context restores


def _numpy_print_get() -> Any:
    import numpy as np

    return np.get_printoptions()


def _numpy_print_set(value: Any) -> None:
    import numpy as np

    np.set_printoptions(**value)


def _numpy_err_get() -> Any:
    import numpy as np

    return np.geterr()


def _numpy_err_set(value: Any) -> None:
    import numpy as np

    np.seterr(**value)


def _xarray_get() -> Any:
    from xarray import get_options

    return dict(get_options())


def _xarray_set(value: Any) -> None:
    """Only the options that differ: setting one runs its setter, and some of those warn or act (the file
    cache is resized, a no-op option warns that it is deprecated)."""
    from xarray import get_options, set_options

    now = get_options()
    changed = {k: v for k, v in value.items() if k in now and _differs(now[k], v)}
    if changed:
        set_options(**changed)


def _decimal_get() -> Any:
    import decimal

    return decimal.getcontext().copy()


def _decimal_set(value: Any) -> None:
    import decimal

    decimal.setcontext(value.copy())


def _warnings_get() -> Any:
    return list(warnings.filters)


def _warnings_set(value: Any) -> None:
    warnings.filters[:] = value
    warnings._filters_mutated()  # type: ignore[attr-defined]  # what filterwarnings() calls: drops cached decisions


def _control_get() -> Any:
    """python-control's defaults (``ct.set_defaults``), and the counter its unnamed systems take their names from
    (``sys[N]``): a system made on a machine took a name the kernel had given already, and a later
    ``ct.interconnect`` could not tell the two apart."""
    import control

    return {"defaults": dict(control.config.defaults), "systems": control.InputOutputSystem._idCounter}


def _control_set(value: Any) -> None:
    import control

    defaults = control.config.defaults
    for key, setting in value["defaults"].items():
        if key in defaults and _differs(defaults[key], setting):
            defaults[key] = setting
    control.InputOutputSystem._idCounter = value["systems"]


def _geopandas_get() -> Any:
    import geopandas

    return {name: getattr(geopandas.options, name) for name in dir(geopandas.options)}


def _geopandas_set(value: Any) -> None:
    import geopandas

    known = dir(geopandas.options)  # the options this version has
    for name, setting in value.items():
        if name in known and _differs(getattr(geopandas.options, name), setting):
            setattr(geopandas.options, name, setting)


def _csv_get() -> Any:
    import csv

    return csv.field_size_limit()


def _csv_set(value: Any) -> None:
    import csv

    csv.field_size_limit(value)


register("numpy.random", _numpy_get, _numpy_set, module="numpy.random")  # numpy imports it lazily
register("random", _random_get, _random_set)
register("sklearn.config", _sklearn_get, _sklearn_set, module="sklearn")
register("pandas.options", _pandas_get, _pandas_set, module="pandas")
register("matplotlib.rcParams", _matplotlib_get, _matplotlib_set, module="matplotlib")
register("warnings.filters", _warnings_get, _warnings_set, module="warnings")
# A library's options, set by a call in one cell and in force in the next (np.set_printoptions, np.seterr,
# xr.set_options, decimal.getcontext().prec = 50): how values print and compute there.
register("numpy.printoptions", _numpy_print_get, _numpy_print_set, module="numpy")
register("numpy.errstate", _numpy_err_get, _numpy_err_set, module="numpy")
register("xarray.options", _xarray_get, _xarray_set, module="xarray")
register("decimal.context", _decimal_get, _decimal_set, module="decimal")
register("sys.recursionlimit", sys.getrecursionlimit, sys.setrecursionlimit, module="sys")  # deep recursion allowed
register("control", _control_get, _control_set)
register("geopandas.options", _geopandas_get, _geopandas_set, module="geopandas")
register("csv.field_size_limit", _csv_get, _csv_set, module="csv")
# The working directory (os.chdir, %cd), before sys.path: an entry inside it is said as a place in it.
register("os.getcwd", workingdir.current, workingdir.apply, module="os")
# The entries the notebook added to sys.path (sys.path.insert(0, "src")), not the path.
register("sys.path", syspath.current, syspath.apply, module="sys")
# The environment variables the notebook set or removed (%env, os.environ[...] = ...), not the environment.
register("os.environ", envvars.current, envvars.apply, module="os")
# What logging.basicConfig, setLevel and disable leave: the next cell's logger.info prints, or not, alike.
register("logging", loggingstate.current, loggingstate.apply)
# How the shell shows a Figure: the inline backend's settings, which %config sets before any matplotlib is imported.
register("IPython.InlineBackend", figureformats.current, figureformats.apply, module="IPython")
# The shell's magics and extensions: what a cell registers or loads there, and what the kernel's has.
register("IPython.shell", shellstate.current, shellstate.apply, module="IPython")
# Methods and accessors the notebook added to pandas' and xarray's classes (tqdm.pandas(), register_*_accessor).
for _library in classextensions.EXTENDED:
    register(
        f"{_library}.extensions",
        functools.partial(classextensions.current, _library),
        functools.partial(classextensions.apply, _library),
        module=_library,
    )
