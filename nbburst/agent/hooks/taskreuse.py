"""Automatic resume of joblib-parallel work (scikit-learn searches, cross_validate, ...).

The runner calls :func:`install`, which wraps ``joblib.Parallel.__call__`` (and
so ``sklearn.utils.parallel.Parallel``, its subclass). Each task of a top-level
parallel call made by the cell gets a deterministic key: a hash of the call's
index in the cell, the task's index in the call, its function and its
arguments (``joblib.hash``, with big arrays hashed once per call). A task whose
key has a stored result returns it without running; every other task runs as
usual and its worker writes its result to ``<root>/tasks/<key>.pkl`` as soon as
it completes, from where the runner's Syncer uploads batches of them to the
job's ``checkpoints/tasks/`` in the Store. After a preemption the next attempt
restores them, so a preempted GridSearchCV recomputes only the fits that were
in flight, and its ``cv_results_`` equal those of an uninterrupted run.

Nothing changes in the cell. Parallel calls made from other threads, or nested
inside a task, are left alone (their order is not deterministic, or their
enclosing task is cached already).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from pathlib import Path
from typing import Any

_state: dict[str, Any] = {"dir": None, "calls": 0, "depth": 0, "original": None, "hits": 0, "runs": 0}
_lock = threading.Lock()
_ARRAY_MIN = 1 << 16  # arrays at least this big are hashed once per call, not once per task


def install(task_dir: str | os.PathLike[str]) -> None:
    """Cache the results of the cell's joblib tasks in ``task_dir`` (idempotent).

    joblib is patched when the cell imports it (importing it here would cost
    every job a quarter of a second), or at once if it is imported already.
    """
    _state["dir"] = Path(task_dir)
    _state["dir"].mkdir(parents=True, exist_ok=True)
    _state["calls"] = 0
    module = sys.modules.get("joblib.parallel")
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _ImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportHook())


def _patch(module: Any) -> None:
    if _state["original"] is None:
        _state["original"] = module.Parallel.__call__
        module.Parallel.__call__ = _call


class _ImportHook:
    """Patches ``joblib.parallel`` right after it is first imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "joblib.parallel":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _ImportHook)]
    module = sys.modules.get("joblib.parallel")
    if module is not None and _state["original"] is not None:
        module.Parallel.__call__ = _state["original"]
    _state["original"] = None
    _state["dir"] = None


def stats() -> dict[str, int]:
    """Tasks answered from stored results (hits) and tasks run (runs) so far."""
    return {"hits": _state["hits"], "runs": _state["runs"], "calls": _state["calls"]}


def _call(self: Any, iterable: Any) -> Any:
    original = _state["original"]
    folder = _state["dir"]
    if (
        folder is None
        or _state["depth"] > 0
        or threading.current_thread() is not threading.main_thread()
        or getattr(self, "return_ordered", True) is False
    ):
        return original(self, iterable)
    tasks = list(iterable)
    with _lock:
        call_index = _state["calls"]
        _state["calls"] += 1
    try:
        keys = _task_keys(call_index, tasks)
    except Exception:  # something in the arguments cannot be hashed: run as usual
        return original(self, tasks)
    results: list[Any] = [None] * len(tasks)
    todo = []
    for i, (task, key) in enumerate(zip(tasks, keys, strict=True)):
        found, value = _load(folder / f"{key}.pkl")
        if found:
            results[i] = value
        else:
            func, args, kwargs = task
            todo.append((i, (_Recorder(func, str(folder), key), args, kwargs)))
    with _lock:
        _state["hits"] += len(tasks) - len(todo)
        _state["runs"] += len(todo)
    if not todo:
        return iter(results) if getattr(self, "return_generator", False) else results
    _state["depth"] += 1
    try:
        out = original(self, [t for _, t in todo])
        if getattr(self, "return_generator", False):
            return _merge_lazily(out, todo, results)
        for (i, _), value in zip(todo, out, strict=True):
            results[i] = value
        return results
    finally:
        _state["depth"] -= 1


def _merge_lazily(out: Any, todo: list[tuple[int, Any]], results: list[Any]):
    """``return_as="generator"``: yield in order, stored results without waiting."""
    pending = iter(todo)
    fresh = iter(out)
    next_fresh = next(pending, None)
    for i in range(len(results)):
        if next_fresh is not None and next_fresh[0] == i:
            yield next(fresh)
            next_fresh = next(pending, None)
        else:
            yield results[i]


class _Recorder:
    """Runs one task (in a worker) and keeps its result where the runner's Syncer finds it."""

    def __init__(self, func: Any, folder: str, key: str):
        self.func, self.folder, self.key = func, folder, key
        self.__name__ = getattr(func, "__name__", "task")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.func(*args, **kwargs)
        try:
            import cloudpickle

            data = cloudpickle.dumps(result, protocol=5)
            path = os.path.join(self.folder, f"{self.key}.pkl")
            tmp = os.path.join(self.folder, f".tmp-{self.key}-{os.getpid()}-{threading.get_ident()}")
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except Exception:  # an unpicklable result is simply not kept
            pass
        return result


def _load(path: Path) -> tuple[bool, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False, None
    import pickle

    try:
        return True, pickle.loads(data)
    except Exception:
        return False, None


# -- keys -----------------------------------------------------------------------------------------


def _task_keys(call_index: int, tasks: list[Any]) -> list[str]:
    from joblib.hashing import NumpyHasher

    arrays: dict[int, tuple[Any, str]] = {}  # id -> (the array, kept alive; its digest)

    class Hasher(NumpyHasher):
        def save(self, obj: Any) -> None:
            np = self.np
            if _volatile(obj):
                obj = ("nbburst-volatile", type(obj).__qualname__)
            elif isinstance(obj, (types.FunctionType, type)) and not _importable(obj):
                obj = _token(obj)  # defined in the cell: hashed by its code, not by its name
            elif isinstance(obj, np.ndarray) and not obj.dtype.hasobject and obj.nbytes >= _ARRAY_MIN:
                entry = arrays.get(id(obj))
                if entry is None or entry[0] is not obj:
                    entry = (obj, NumpyHasher().hash(obj))
                    arrays[id(obj)] = entry
                obj = ("nbburst-array", entry[1], str(obj.dtype), obj.shape)
            NumpyHasher.save(self, obj)

    # An argument object shared by many tasks (the data, a search's scorer, the search itself) is
    # hashed once per call, not once per task: every task holds it, so its id is stable meanwhile.
    shared: dict[int, tuple[Any, str]] = {}

    def part(obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
            return obj
        entry = shared.get(id(obj))
        if entry is None or entry[0] is not obj:
            entry = (obj, Hasher(hash_name="sha1").hash(obj))
            shared[id(obj)] = entry
        return ("nbburst-part", entry[1])

    keys = []
    for index, (func, args, kwargs) in enumerate(tasks):
        func = getattr(func, "function", func)  # sklearn's _FuncWrapper: its config is not the task
        token = (
            "nbburst-task",
            2,
            call_index,
            index,
            part(func),
            tuple(part(a) for a in args),
            sorted((k, part(v)) for k, v in kwargs.items()),
        )
        keys.append(Hasher(hash_name="sha1").hash(token))
    return keys


def _importable(fn: Any) -> bool:
    obj: Any = sys.modules.get(getattr(fn, "__module__", None) or "")
    for part in getattr(fn, "__qualname__", "<unknown>").split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn


_visiting: set[int] = set()  # classes and functions being tokenised (a method's super() refers to its class)


def _token(obj: Any) -> tuple[Any, ...]:
    if id(obj) in _visiting:
        return ("nbburst-ref", getattr(obj, "__qualname__", "?"))
    _visiting.add(id(obj))
    try:
        return _token_of(obj)
    finally:
        _visiting.discard(id(obj))


def _token_of(obj: Any) -> tuple[Any, ...]:
    if isinstance(obj, type):
        members = []
        for name, value in sorted(vars(obj).items()):
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType):
                members.append((name, _token(value)))
            elif isinstance(value, (int, float, str, bytes, bool, tuple, type(None))):
                members.append((name, value))
        bases = tuple(b if _importable(b) else _token(b) for b in obj.__bases__)
        return ("nbburst-class", obj.__qualname__, bases, tuple(members))
    return _function_token(obj)


def _code_token(code: types.CodeType) -> tuple[Any, ...]:
    consts = tuple(_code_token(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return ("code", code.co_name, code.co_code, consts, code.co_names, code.co_varnames)


def _function_token(fn: types.FunctionType) -> tuple[Any, ...]:
    closure = tuple(_cell(c) for c in fn.__closure__ or ())
    return ("nbburst-function", fn.__qualname__, _code_token(fn.__code__), fn.__defaults__, fn.__kwdefaults__, closure)


def _cell(cell: Any) -> Any:
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell
        return None
    if isinstance(value, (types.FunctionType, type)) and not _importable(value):
        return _token(value)
    return value


_VOLATILE_MODULES = ("sklearn.callback",)  # scikit-learn's callback contexts: a fresh UUID and clock per fit


def _volatile(obj: Any) -> bool:
    """Bookkeeping that differs between two runs of the same work (ids, clocks): not part of a task's key."""
    import datetime
    import uuid

    if isinstance(obj, (uuid.UUID, datetime.datetime)):
        return True
    module = type(obj).__module__ or ""
    if module.startswith("numpy.random"):
        # numpy's global RandomState, seeded afresh in every process (scipy distributions hold it):
        # work that draws from it is not reproducible anyway
        mtrand = sys.modules.get("numpy.random.mtrand")
        return mtrand is not None and obj is getattr(mtrand, "_rand", None)
    return module.startswith(_VOLATILE_MODULES)
