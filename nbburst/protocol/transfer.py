"""Named values between the kernel and the machine, landing as if the cell had run where they land.

Three things a plain ``pickle.loads`` gets wrong for a notebook:

* **Functions see the live namespace.** cloudpickle copies the globals a
  notebook function uses into a fresh dict, so ``def f(): return later + 1``
  never sees a ``later`` assigned afterwards. Here a function (or method) of
  ``__main__`` is rebuilt with the namespace it lands in as its globals (the
  cell's on the machine, the kernel's afterwards); the values it carried only
  fill names that namespace lacks.
* **Changes made in place come back in place.** The machine sends back an
  input the cell mutated (a fitted estimator, an appended list) so that it
  *updates the kernel's object* (other references see the change, as they
  would have), and an input it did not change as a reference to the kernel's
  object instead of its bytes. This holds at every depth: each mutable object
  inside an input has an address both sides agree on (the input's name and the
  object's index in the memo of the pickle that carried it), so a Pipeline
  fitted in place updates the very step objects the kernel holds under other
  names, and an unchanged array inside a changed input goes back as a
  reference.
* **One bad value costs nothing else.** All values are pickled by one pickler,
  one after the other, so objects they share stay shared; each is unpickled on
  its own, inside frames whose globals are the namespace (formula libraries
  such as patsy rebuild their models by evaluating names in the caller's
  frames), and a value that fails is reported by name while the others arrive.
"""

from __future__ import annotations

import builtins
import copyreg
import functools
import gc
import io
import itertools
import mmap
import pickle
import re
import resource
import sys
import threading
import types
import weakref
from collections import ChainMap
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import codepickle, handles, modulestate, pandascow, payload, views

#: The name under which a cell's last value (its ``Out``) travels among its variables.
LAST = "<last>"
#: Types whose values never change in place: never fingerprinted, never sent back by reference.
IMMUTABLE = (int, float, complex, bool, str, bytes, type(None), range)
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_CLOUDPICKLE = "cloudpickle.cloudpickle"
_FRAMES = 4  # how many frames up from an object's __setstate__ look like the notebook's own
_CALL = compile("__nbburst_call__()", "<nbburst: unpickling>", "eval")


#: Objects never addressed inside an input: they cannot change in place, or are code (rebuilt by value).
_NOT_INNER = (
    *IMMUTABLE,
    tuple,
    frozenset,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    types.CodeType,
    types.CellType,
)
_MISSING = object()
#: Where an object lives: a name of the namespace, or (input name, index in that input's pickle memo).
Address = str | tuple[str, int]


def _graph_pass(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, a pass over values' object graphs, run with the cyclic garbage collector paused and as deep
    as the thread's stack allows (:func:`_depth`).

    Pickling or unpickling a graph of thousands of objects makes as many containers, and every few hundred of
    them start a collection that walks the process's young objects (a kernel's are many) to find no garbage among
    objects all still in use; what the pass leaves behind is collected after it. And pickle goes into a value
    depth first, a level of recursion per object: a linked list or a grid of cells that hold their neighbours
    (mesa's) is deeper than the interpreter's default limit, where the kernel holds it without pickling it."""

    @functools.wraps(function)
    def paused(*args: Any, **kwargs: Any) -> Any:
        limit = sys.getrecursionlimit()
        deeper = max(limit, _depth())  # a nested pass finds it deeper already
        collecting = gc.isenabled()  # paused already: a nested pass, or the caller's own choice
        if collecting:
            gc.disable()
        sys.setrecursionlimit(deeper)
        try:
            return function(*args, **kwargs)
        finally:
            sys.setrecursionlimit(limit)
            if collecting:
                gc.enable()

    return paused


#: At most this many levels of recursion in a pass, and this many bytes of the stack counted for each: pickle's C
#: recursion, cloudpickle's reducer between levels, with room to spare (deeper, a pass would overflow the stack and
#: end the process, where the interpreter's limit raises RecursionError).
MAX_DEPTH = 20_000
STACK_PER_LEVEL = 400


def _depth() -> int:
    """How deep a pass may go here: in the main thread, as deep as its stack holds :data:`STACK_PER_LEVEL` bytes a
    level (up to :data:`MAX_DEPTH`); another thread's stack may be small, and keeps the interpreter's limit."""
    return _main_depth() if threading.current_thread() is threading.main_thread() else 0


@functools.cache
def _main_depth() -> int:
    """:func:`_depth` in the main thread, read once (a process sets its stack's limit at its start, if ever)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    return MAX_DEPTH if soft == resource.RLIM_INFINITY else min(MAX_DEPTH, soft // STACK_PER_LEVEL)


def inner_objects(memo: Collection[tuple[int, Any]], top: Any) -> dict[int, Any]:
    """The mutable objects inside ``top`` by their memo index, from the (index, object) pairs of the memo
    of the pickle that carried it: the pickler and the unpickler number objects alike. Each type met is asked
    once whether it is one of :data:`_NOT_INNER` (a Figure's thousands of objects are of a few dozen types)."""
    inner = {kind for kind in {type(obj) for _, obj in memo} if not issubclass(kind, _NOT_INNER)}
    return {index: obj for index, obj in memo if type(obj) in inner and obj is not top}


def names_in(text: str) -> list[str]:
    """The names a string may look up when evaluated (``"y ~ np.log(x)"``: y, np, x)."""
    return _IDENTIFIER.findall(text)


def _is_main_function(obj: Any) -> bool:
    return isinstance(obj, types.FunctionType) and obj.__globals__.get("__name__") == "__main__"


class _Pickler(codepickle.Pickler):
    """cloudpickle's pickler that can refer to the target's objects by name, or ignore globals for fingerprints.

    ``refs``: id -> address of objects the target already holds (unchanged inputs and what they hold).
    ``adopt``: id -> address of objects to update in the target's object there (changed inputs and
    what they hold).
    ``regions``: arrays the target has or gets; an array lying in one travels as a view of it (:mod:`.views`).
    ``named``: collects the modules of the classes and functions it pickles, and the modules it pickles: the
    target must be able to import them (:mod:`.sources`).
    ``targets``: the objects of ``refs``; when none is of a type the C pickler saves itself, references are made in
    ``reducer_override``, which the C pickler calls once per object it has not met yet, instead of in
    ``persistent_id``, which it calls for every object and every int or float it meets.
    """

    def __init__(
        self,
        file: Any,
        buffer_callback: Callable[[Any], Any],
        refs: dict[int, Address] | None = None,
        adopt: dict[int, Address] | None = None,
        fingerprinting: bool = False,
        regions: views.Regions | None = None,
        named: set[str] | None = None,
        targets: Iterable[Any] | None = None,
    ):
        self.fingerprinting, self.regions, self.named = fingerprinting, regions, named
        # id -> (whether the target holds it unchanged, its address): one look-up per object pickled, called
        # back from the C pickler for every one (each int and float too), the pickle's largest cost in Python
        self.places: dict[int, tuple[bool, Address]] = {key: (False, a) for key, a in (adopt or {}).items()}
        self.places.update((key, (True, a)) for key, a in (refs or {}).items())
        self.plain: set[int] = set()  # arrays pickled as their own bytes whatever regions hold them
        self.emitted: dict[Address, int] = {}  # adopted address -> index of the value whose pickle carries it
        self.referred: set[Address] = set()
        self.index = 0
        self.modes: dict[type, str] = {}  # type -> what reducer_override does with its objects (_mode)
        self.links: dict[int, pandascow.Link] = {}  # pandas' copy-on-write links met, by their references' id
        self.by_reduction = targets is not None and not adopt and not any(type(o) in _SAVED_DIRECTLY for o in targets)
        if self.places and not self.by_reduction:
            self.persistent_id = self._persistent_id
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)

    def _persistent_id(self, obj: Any) -> Any:
        place = self.places.get(id(obj))
        if place is None:
            return None
        held, name = place
        if held:
            self.referred.add(name)
            return ("ref", name)
        if name in self.emitted:
            return ("same", name)
        content = _adoptable(obj)
        if content is None:
            del self.places[id(obj)]  # pickled as a new object, which the target rebinds
            return None
        self.emitted[name] = self.index
        if content[0] == "array":
            self.plain.add(id(content[1]))  # the new content of that very array, not a view of it
        return ("adopt", name, *content)

    def reducer_override(self, obj: Any) -> Any:
        if self.by_reduction and (place := self.places.get(id(obj))) is not None:
            self.referred.add(place[1])
            return _refer, (place[1],)
        kind = type(obj)
        mode = self.modes.get(kind)
        if mode is None:
            mode = self.modes[kind] = _mode(kind, self.fingerprinting)
        if mode is _DECLINED:  # most objects of a graph: one look-up here instead of the checks below, for each
            return NotImplemented
        if mode is _ARRAY:
            if self.regions is not None and id(obj) not in self.plain:
                region = self.regions.region_of(obj)
                if region is not None:
                    return views.reduce(obj, region)
            return NotImplemented
        if mode is _TRANSFORM:
            return _with_weak_parents(obj)
        if mode is _SUBARRAY:
            return _with_attributes(obj)
        if mode is _SHELL:
            return _the_shell, ()
        if mode is _MANAGER:
            return pandascow.reduce_manager(obj, self.links)
        if self.named is not None and isinstance(obj, (type, types.FunctionType, types.ModuleType)):
            home = obj.__name__ if isinstance(obj, types.ModuleType) else obj.__module__
            if isinstance(home, str):
                self.named.add(home)
        if handles.held(obj):  # an open file, a csv.reader, a database: reopened where it lands
            return handles.reduce(obj)
        if self.fingerprinting and (counter := _COUNTERS.get((type(obj).__module__, type(obj).__qualname__))):
            return _without_counting(obj, counter)
        reduced = super().reducer_override(obj)
        if self.fingerprinting and _is_main_function(obj) and isinstance(reduced, tuple):
            # What the function is does not depend on the values of the globals it reads.
            func, args, (state, slots), *rest = reduced
            reduced = (func, args, (state, {**slots, "__globals__": {}}), *rest)
        return reduced


#: What :meth:`_Pickler.reducer_override` does with the objects of a type (:func:`_mode`).
_DECLINED, _ARRAY, _SUBARRAY, _TRANSFORM, _SHELL, _MANAGER, _ASKED = (
    "declined",
    "array",
    "subarray",
    "transform",
    "shell",
    "manager",
    "asked",
)


def _mode(kind: type, fingerprinting: bool) -> str:
    """What :meth:`_Pickler.reducer_override` does with every object of exactly the type ``kind`` (past the
    references it looks up by identity first): leaves it to the pickler (``_DECLINED``), reduces it as a view
    when it lies in a region (``_ARRAY``, numpy's arrays), reduces it with its instance's attributes
    (``_SUBARRAY``, :func:`_with_attributes`), reduces it to be loaded with weak references to its
    parents (``_TRANSFORM``, :func:`_pins_parents`), reduces it to the shell where it lands (``_SHELL``,
    :func:`_the_shell`), reduces a pandas block manager with its copy-on-write links (``_MANAGER``, except in a
    fingerprint: they say nothing of its content; :mod:`.pandascow`), or asks each of the checks (``_ASKED``: a class,
    function or module, whose home is named and which cloudpickle and :mod:`.codepickle` reduce; a handle,
    :func:`handles.moves`; a registry that counts its pickles, when fingerprinting). Asked once per type and
    pickler: a graph such as a Figure's holds thousands of objects of a few dozen types."""
    if (
        issubclass(kind, (type, types.FunctionType, types.ModuleType))
        or handles.moves(kind)
        or (fingerprinting and (kind.__module__, kind.__qualname__) in _COUNTERS)
    ):
        return _ASKED
    if _pins_parents(kind):
        return _TRANSFORM
    if kind.__name__ == "ndarray" and kind.__module__ == "numpy":
        return _ARRAY
    if is_shell(kind):
        return _SHELL
    if not fingerprinting and pandascow.is_manager(kind):
        return _MANAGER
    return _SUBARRAY if _reduced_as_array(kind) else _DECLINED


def is_shell(kind: type) -> bool:
    """Whether ``kind`` is IPython's shell (a kernel's is a subclass): ``ip = get_ipython()`` binds the process's
    one shell, which each side has of its own, its threads and sockets with it (:func:`_the_shell`)."""
    shell = sys.modules.get("IPython.core.interactiveshell")
    return shell is not None and issubclass(kind, shell.InteractiveShell)


def _the_shell() -> Any:
    """Where a shell lands: the shell of that process, as ``get_ipython()`` there gives it (None outside IPython).
    What a cell changes in it (magics, extensions, how values are shown) travels as process state."""
    from IPython import get_ipython

    return get_ipython()


def _reduced_as_array(kind: type) -> bool:
    """Whether ``kind`` is a subclass of numpy's array that numpy's own reduction pickles (none of its own)."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not issubclass(kind, numpy.ndarray):
        return False
    return kind.__reduce_ex__ is numpy.ndarray.__reduce_ex__ and kind.__reduce__ is numpy.ndarray.__reduce__


#: Types the C pickler saves itself, without asking ``reducer_override``.
_SAVED_DIRECTLY = frozenset(
    {dict, list, tuple, set, frozenset, bytearray, str, bytes, int, float, bool, type(None), pickle.PickleBuffer}
)


def _refer(address: Address) -> Any:
    """What a reference made in ``reducer_override`` calls where it is loaded: the unpicklers below answer it
    with the target's object (:meth:`_Resolving.find_class`); any other one cannot."""
    raise pickle.UnpicklingError(f"it refers to the object at {address!r} of a namespace it was not loaded into")


#: Classes whose pickled state takes the next value of a counter they hold (attribute), by (module, name):
#: matplotlib's callback registries, in every Figure and Axes. Pickled twice, the same object reads otherwise.
_COUNTERS = {("matplotlib.cbook", "CallbackRegistry"): "_cid_gen"}


def _without_counting(obj: Any, counter: str) -> Any:
    """``obj``'s reduction, its counter put back where it was: a fingerprint neither changes the object nor
    differs from the next one of the same object."""
    reduced = obj.__reduce_ex__(5)
    state = reduced[2] if isinstance(reduced, tuple) and len(reduced) > 2 else None
    if isinstance(state, dict) and isinstance(state.get(counter), int):
        setattr(obj, counter, itertools.count(state[counter]))
    return reduced


def _pins_parents(kind: type) -> bool:
    """Whether ``kind`` sets its state with matplotlib's ``TransformNode.__setstate__``: every transform of a
    Figure. It turns the parents the state holds into weak references whose callbacks hold the state's own dict
    of them, so an unpickled transform keeps alive every parent it had when pickled. A Figure that crosses at
    each cell and is drawn there (a draw makes new transforms) would then hold those of every draw, and cost
    more to move at each cell."""
    transforms = sys.modules.get("matplotlib.transforms")  # not imported: no Figure to pickle
    return transforms is not None and getattr(kind, "__setstate__", None) is transforms.TransformNode.__setstate__


def _set_weak_parents(obj: Any, state: dict[str, Any]) -> None:
    """matplotlib's ``TransformNode.__setstate__`` (:func:`_pins_parents`), except that each parent is held only
    by a weak reference, keyed by its id here as ``set_children`` keys it, whose callback forgets it."""
    obj.__dict__ = state
    parents: dict[int, weakref.ref] = {}
    for parent in state["_parents"].values():
        if parent is not None:
            parents[id(parent)] = weakref.ref(parent, lambda _, pop=parents.pop, key=id(parent): pop(key, None))
    obj._parents = parents


def _with_weak_parents(obj: Any) -> Any:
    """``obj``'s reduction, its state set by :func:`_set_weak_parents` where it is loaded."""
    reduced = obj.__reduce_ex__(5)
    if not isinstance(reduced, tuple) or len(reduced) < 3 or not isinstance(reduced[2], dict):
        return reduced
    func, args, state, *rest = reduced
    items, pairs = (*rest, None, None)[:2]
    return func, args, state, items, pairs, _set_weak_parents


def _with_attributes(obj: Any) -> Any:
    """A numpy array subclass's reduction with the attributes of the instance, which numpy's leaves out (a
    labelled signal's labels: ``obj.labels = ...`` in its ``__new__``); numpy's own where it has none. A file's
    memory mapping (``np.memmap``'s, ``np.load(..., mmap_mode="r")``) stays in its process, as numpy's own pickle
    leaves it: the array lands as a memmap of the same bytes that no file backs (one that comes back to update
    the kernel's own is written into that one's mapping, :func:`_adoptable`)."""
    attributes = {k: v for k, v in getattr(obj, "__dict__", {}).items() if not isinstance(v, mmap.mmap)}
    if not attributes:
        return NotImplemented
    func, args, state = obj.__reduce_ex__(5)[:3]
    return func, args, (state, attributes), None, None, _set_array_attributes


def _set_array_attributes(obj: Any, state: tuple[Any, dict[str, Any]]) -> None:
    """Where an array of :func:`_with_attributes` is loaded: numpy's state, then the instance's attributes."""
    array_state, attributes = state
    obj.__setstate__(array_state)
    obj.__dict__.update(attributes)


_CONTAINERS = {"list": list, "dict": dict, "set": set, "bytearray": bytearray}
_RNGS = {"generator": "Generator", "randomstate": "RandomState"}  # numpy's random generators


def _rng_state(rng: Any) -> dict[str, Any]:
    return rng.bit_generator.state if type(rng).__name__ == "Generator" else rng.get_state(legacy=False)


def _adoptable(obj: Any) -> tuple[str, Any] | None:
    """(kind, content) from which the target's object can be updated to ``obj``; None if it cannot."""
    kind = type(obj)
    if kind in (list, dict, set):
        return kind.__name__, kind(obj)
    if kind is bytearray:
        return "bytearray", bytes(obj)
    if handles.held(obj):
        try:
            return "handle", handles.reduce(obj)
        except handles.Unmovable:
            return None
    module = kind.__module__ or ""
    if pandascow.is_manager(kind):  # a new one, whose blocks land with their links (its frame is updated)
        return None
    if module.startswith("numpy"):
        if kind.__name__ in ("ndarray", "memmap"):  # a memmap's new content goes into the kernel's mapping
            return "array", obj.view()
        if kind.__name__ in _RNGS.values():
            return kind.__name__.lower(), _rng_state(obj)
    try:
        reduced = obj.__reduce_ex__(5)
    except Exception:
        return None
    if (
        isinstance(reduced, tuple)
        and reduced[0] is copyreg.__newobj__
        and reduced[1] == (kind,)
        and all(x is None for x in reduced[3:5])
    ):
        return "object", (kind, reduced[2] if len(reduced) > 2 else None)
    return None


def _build(obj: Any, state: Any) -> None:
    """Apply a pickled state to ``obj`` as the unpickler's BUILD does (a transform's as :func:`_with_weak_parents`
    says)."""
    if isinstance(state, dict) and _pins_parents(type(obj)):
        _set_weak_parents(obj, state)
        return
    setstate = getattr(obj, "__setstate__", None)
    if setstate is not None:
        setstate(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        obj.__dict__.update(state)
    for key, value in (slots or {}).items():
        setattr(obj, key, value)


def _update(old: Any, kind: str, content: Any) -> Any:
    """``old`` updated in place to the content that came back, or a new object where that is impossible."""
    if kind in _CONTAINERS:
        cls = _CONTAINERS[kind]
        if type(old) is not cls:
            return cls(content)
        if cls is list or cls is bytearray:
            old[:] = content
        else:
            old.clear()
            old.update(content)
        return old
    if kind == "array":
        same = type(old) is type(content) and old.shape == content.shape and old.dtype == content.dtype
        if same and old.flags.writeable:
            old[...] = content
            return old
        return content
    if kind == "handle":
        return handles.update(old, *content)
    if kind in _RNGS:
        import numpy as np

        cls = getattr(np.random, _RNGS[kind])
        same = type(old) is cls and _rng_state(old)["bit_generator"] == content["bit_generator"]
        rng = old if same else cls(getattr(np.random, content["bit_generator"])())
        if kind == "generator":
            rng.bit_generator.state = content
        else:
            rng.set_state(content)
        return rng
    cls, state = content
    if type(old) is not cls:
        new = cls.__new__(cls)
        _build(new, state)
        return new
    before = dict(old.__dict__) if hasattr(old, "__dict__") else None
    try:
        if before is not None:
            old.__dict__.clear()
        _build(old, state)
    except BaseException:
        if before is not None:
            old.__dict__.clear()
            old.__dict__.update(before)
        raise
    return old


class _Resolving:
    """What both unpicklers below do: bind ``__main__`` functions to ``target``, resolve references to
    the target's objects (its names, and ``inner``: input name -> memo index -> object inside that
    input as it was sent) and update them in place."""

    def __init__(
        self,
        file: Any,
        buffers: Any,
        target: dict[str, Any],
        adopted: dict[Address, Any],
        inner: dict[str, dict[int, Any]] | None = None,
    ):
        super().__init__(file, buffers=buffers)
        self.target, self.adopted, self.inner = target, adopted, inner or {}

    def find_class(self, module: str, name: str) -> Any:
        if module == _CLOUDPICKLE and name == "_make_function":
            return self._make_function
        if module == _CLOUDPICKLE and name == "_function_setstate":
            return self._function_setstate
        if module == __name__ and name == _refer.__name__:
            return self._refer
        return super().find_class(module, name)

    def _refer(self, address: Address) -> Any:
        return self.persistent_load(("ref", address))

    def _make_function(self, code, base_globals, name, argdefs, closure):  # noqa: ANN001, ANN202 (cloudpickle's)
        if base_globals.get("__name__") == "__main__":
            return types.FunctionType(code, self.target, name, argdefs, closure)
        base_globals["__builtins__"] = builtins.__dict__
        return types.FunctionType(code, base_globals, name, argdefs, closure)

    def _function_setstate(self, func: types.FunctionType, state: tuple[dict, dict]) -> None:
        """cloudpickle's ``_function_setstate``, except that carried globals only fill missing names."""
        attrs, slots = state
        func.__dict__.update(attrs)
        carried = slots.pop("__globals__")
        closure = slots.pop("__closure__")
        slots.pop("_cloudpickle_submodules", None)  # only held the submodules while they were unpickled
        if func.__globals__ is self.target:
            for key, value in carried.items():
                self.target.setdefault(key, value)
        else:
            func.__globals__.update(carried)
        for i, cell in enumerate(closure or ()):
            try:
                func.__closure__[i].cell_contents = cell.cell_contents  # type: ignore[index]
            except ValueError:  # an empty cell
                continue
        for key, value in slots.items():
            setattr(func, key, value)

    def persistent_load(self, pid: Any) -> Any:
        kind, address, *content = pid
        if kind == "same" and address in self.adopted:
            return self.adopted[address]
        if isinstance(address, tuple):
            old = self.inner.get(address[0], {}).get(address[1], _MISSING)
        else:
            old = self.target.get(address, _MISSING)
            if old is _MISSING and modulestate.is_variable(address):  # a variable of the notebook's own module
                old = modulestate.lookup(address, _MISSING)
        if kind == "adopt":
            self.adopted[address] = value = _update(None if old is _MISSING else old, *content)
            return value
        if old is _MISSING:
            where = f"an object inside {address[0]!r}" if isinstance(address, tuple) else repr(address)
            raise pickle.UnpicklingError(f"it refers to {where}, which this namespace does not have")
        return old


class _Unpickler(_Resolving, pickle.Unpickler):
    """The fast (C) unpickler."""


class _Retry(_Resolving, pickle._Unpickler):  # type: ignore[name-defined]
    """The pure-Python unpickler, run again on a value that failed: its stacks show which objects were
    half built when it failed, the only ones later values must not be given."""

    def safe_memo(self) -> dict[int, Any]:
        """After a failed load: the memo without the objects it left half built."""
        half = {id(x) for x in self.stack} | {id(x) for stack in self.metastack for x in stack}
        return {k: v for k, v in self.memo.items() if id(v) not in half}


def _in_user_frames(call: Callable[[], Any], target: dict[str, Any], names: dict[str, Any]) -> Any:
    """``call()`` below a few frames whose globals are ``target`` and whose locals are ``names``."""
    for _ in range(_FRAMES):
        call = functools.partial(eval, _CALL, target, ChainMap({"__nbburst_call__": call}, names))
    return call()


# -- inputs: a blob each ----------------------------------------------------------------------------


@_graph_pass
def encode_inputs(
    values: dict[str, Any],
    optional: Collection[str] = (),
    namespace: dict[str, Any] | None = None,
    inner: dict[str, dict[int, Any]] | None = None,
    named: set[str] | None = None,
) -> tuple[dict[str, payload.Encoded], dict[str, Exception]]:
    """Each input as a blob of its own (content-addressed: an unchanged one is not uploaded again), an
    input that another one holds as a reference to it, so that they are one object on the machine too
    (``d = {"inner": lst}``). Returns the blobs, each after the ones it refers to, and the inputs that
    could not be pickled (``optional`` ones are never referred to: they may be left out).

    What ``namespace`` holds under a name that a formula inside an input mentions travels too, as an
    optional input: the formula is evaluated again where the input is unpickled.

    ``inner`` receives, per input, the mutable objects inside it by address (:func:`inner_objects`): what
    comes back may refer to them (:func:`load_values`). ``named`` receives the modules the inputs name."""
    values, optional = dict(values), set(optional)
    holdable = {n: v for n, v in values.items() if n not in optional and not isinstance(v, IMMUTABLE)}
    refers: dict[str, set[str]] = {}
    encoded: dict[str, payload.Encoded] = {}
    failed: dict[str, Exception] = {}
    inside: dict[str, dict[int, Any]] = {}  # per input pickled so far, the objects inside it (inner_objects)
    referred: dict[str, set[Address]] = {}  # per input pickled so far, what its pickle refers to
    # grows with what formulas mention; arrays last, so that the containers they may be views into come first
    pending = sorted(values, key=lambda n: views.plain_array(values[n]))
    while pending:
        name = pending.pop(0)
        value = values[name]
        blocked = _reaching(name, refers)  # they refer to this one already: referring back would be a cycle
        refs: dict[int, Address] = {id(v): n for n, v in holdable.items() if n != name and n not in blocked}
        for holder, objects in inside.items():  # an array inside an earlier input is that input's on the machine
            if holder not in blocked:
                for index, obj in views.plain_arrays(objects.items()):
                    refs.setdefault(id(obj), (holder, index))
        out = io.BytesIO()
        buffers: list[pickle.PickleBuffer] = []
        # a view of another input, or of an array inside one, travels as a view of it (regions in the same
        # order for every input: no cycles)
        held = [v for n, v in holdable.items() if n == name or id(v) in refs]
        held += [obj for objects in inside.values() for obj in objects.values() if id(obj) in refs]
        targets = [obj for obj in held if id(obj) in refs]
        pickler = _Pickler(out, buffers.append, refs, regions=views.Regions(held), named=named, targets=targets)
        try:
            pickler.dump(value)
        except Exception as exc:
            failed[name] = exc
            continue
        memo = pickler.memo.copy().values()  # (every string it pickled is there: a formula is a string with a ~)
        inside[name] = inner_objects(memo, value)
        mentioned = {n for _, obj in memo if type(obj) is str and "~" in obj for n in names_in(obj)}
        if inner is not None:
            inner[name] = inside[name]
        mentioned &= set(namespace or ()) - {name}
        # loaded before it on the machine
        refers[name] = {a if isinstance(a, str) else a[0] for a in pickler.referred} | mentioned
        referred[name] = pickler.referred
        encoded[name] = payload.assemble([(out.getbuffer(), [b.raw() for b in buffers])])
        for other, index in _carried(name, blocked, values, inside, referred).items():
            # an input that refers to this one and lies inside it (a Figure and its Axes): one object on the
            # machine too, the one this one's pickle carries (not a copy of it)
            encoded[other] = _reference(values[other], (name, index))
            inside[other] = {}
            if inner is not None:
                inner[other] = {}
            refers[other] = {name}
        for found in sorted(mentioned - set(values)):
            values[found] = namespace[found]  # type: ignore[index]
            optional.add(found)
            pending.append(found)
    order: dict[str, None] = {}
    visiting: set[str] = set()

    def visit(name: str) -> None:
        visiting.add(name)
        for dependency in sorted(refers[name]):
            if dependency in encoded and dependency not in order and dependency not in visiting:
                visit(dependency)
        order[name] = None

    for name in encoded:
        if name not in order:
            visit(name)
    return {name: encoded[name] for name in order}, failed


def _carried(
    name: str,
    blocked: set[str],
    values: dict[str, Any],
    inside: dict[str, dict[int, Any]],
    referred: dict[str, set[Address]],
) -> dict[str, int]:
    """The inputs among ``blocked`` whose object ``name``'s pickle carries, by its index there: those that no
    input refers into (their addresses would change)."""
    where = {id(obj): index for index, obj in inside[name].items()}
    into = {address[0] for addresses in referred.values() for address in addresses if isinstance(address, tuple)}
    return {b: where[id(values[b])] for b in sorted(blocked) if id(values[b]) in where and b not in into}


def _reference(value: Any, address: Address) -> payload.Encoded:
    """A blob that is only a reference to ``address``: the object there is ``value`` on the machine."""
    out = io.BytesIO()
    _Pickler(out, lambda buffer: None, {id(value): address}).dump(value)
    return payload.assemble([(out.getbuffer(), [])])


def _reaching(name: str, refers: dict[str, set[str]]) -> set[str]:
    """The inputs that refer to ``name``, directly or through others."""
    found: set[str] = set()
    frontier = {name}
    while frontier:
        frontier = {n for n, targets in refers.items() if targets & frontier and n not in found}
        found |= frontier
    return found


# -- one value ------------------------------------------------------------------------------------


@_graph_pass
def load_value(
    data: bytes | bytearray | memoryview,
    target: dict[str, Any],
    inner: dict[int, Any] | None = None,
    loaded: dict[str, dict[int, Any]] | None = None,
) -> Any:
    """Unpickle a one-value blob (:func:`payload.encode`) into ``target``; ``inner`` receives the mutable
    objects inside the value by address (:func:`inner_objects`); ``loaded`` holds those of the inputs
    loaded before it, which it may refer to (:func:`encode_inputs`)."""
    blob = payload.Blob.parse(data)
    unpickler = _Unpickler(io.BytesIO(blob.bodies[0]), blob.buffers[0], target, {}, loaded)
    value = _in_user_frames(unpickler.load, target, {})
    if inner is not None:
        inner.update(inner_objects(unpickler.memo.copy().items(), value))
    return value


@_graph_pass
def fingerprint(value: Any, others: Sequence[Any] = (), walked: dict[int, int] | None = None) -> str | None:
    """Content fingerprint of ``value`` (xxh3 of its pickle); None for values that cannot change in place.

    ``others`` (the other inputs) are not walked into: the pickle names each by its place in ``others``, as
    its memo would name an object it met before. A Figure and its Axes, two inputs that reach each other, are
    then walked once in all, each object in the fingerprint of the input whose own part holds it, instead of
    the whole graph once per input; and each input's verdict is about its own part (an object the cell
    changed changes the fingerprint of every input whose own part holds it). ``walked`` receives the memo
    index of each object the pickle walked, by id: where it lies in the stream the fingerprint hashes."""
    if isinstance(value, (*IMMUTABLE, types.ModuleType)):
        return None
    if views.plain_array(value) and value.dtype.itemsize:  # as its bytes lie: a Figure holds thousands of arrays
        return _array_fingerprint(value)
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    pickler = _Pickler(out, buffers.append, fingerprinting=True)
    # memoized ahead, at fixed indices: the C pickler writes a memo reference and never calls back into Python
    # (the indices must be those the pickler gives next: one index meaning two objects would hide a change)
    seeded = list({id(obj): obj for obj in others if obj is not value}.values())
    pickler.memo = {id(obj): (index, obj) for index, obj in enumerate(seeded)}
    try:
        pickler.dump(value)
    except Exception:
        return None  # cannot be pickled: cannot come back either
    if walked is not None:
        walked.update({key: index for key, (index, _) in pickler.memo.copy().items() if index >= len(seeded)})
    return payload.fingerprint([out.getbuffer(), *(b.raw() for b in buffers)])


#: What a fingerprint says of a plain dtype (its str: byte order, kind, size, unit), by dtype: numpy computes the
#: str anew at each access, a good part of a small array's fingerprint (a Figure holds thousands of them).
_DTYPES: dict[Any, bytes] = {}


def _dtype_head(dtype: Any) -> bytes:
    """``dtype`` as a fingerprint says it: a record's fields too (its descr, slower: not kept)."""
    head = _DTYPES.get(dtype)
    if head is None:
        if dtype.fields is not None or dtype.kind == "V":
            return repr(dtype.descr).encode()
        head = _DTYPES[dtype] = dtype.str.encode()
    return head


def _array_fingerprint(array: Any) -> str:
    """An array's fingerprint without a pickler: its dtype, shape and memory order, then its bytes (copied only
    when they are not contiguous). An array smaller than one slice of :func:`payload.fingerprint` (a Figure's
    thousands) is hashed in one streaming pass, without the slices that spread a big one over the cores."""
    import numpy as np
    import xxhash

    flags = array.flags
    fortran = flags.f_contiguous and not flags.c_contiguous
    data = array.T if fortran else array if flags.c_contiguous else np.ascontiguousarray(array)
    head = b"%s %r %s" % (_dtype_head(array.dtype), array.shape, b"F" if fortran else b"C")
    if array.nbytes >= payload.FP_CHUNK:
        return payload.fingerprint([memoryview(head), memoryview(data.reshape(-1).view(np.uint8))])
    hasher = xxhash.xxh3_128(head)
    try:
        hasher.update(data)
    except (BufferError, TypeError, ValueError):  # a dtype the buffer protocol cannot say (datetime64): its bytes
        hasher.update(data.reshape(-1).view(np.uint8))
    return hasher.hexdigest()


# -- many values ----------------------------------------------------------------------------------


@dataclass
class Loaded:
    """What a namespace blob gave: its metadata, the values that arrived, and why the others did not."""

    meta: dict[str, Any]
    values: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class Writer:
    """Pickles named values one after another into one blob (see the module's docstring).

    Objects two values share are one object when they arrive. A value that
    fails to pickle is left out and the pickler starts afresh, so that nothing
    refers to its half-written objects.
    """

    def __init__(
        self,
        refs: dict[int, Address] | None = None,
        adopt: dict[int, Address] | None = None,
        regions: views.Regions | None = None,
    ):
        self.out = io.BytesIO()
        self.buffers: list[pickle.PickleBuffer] = []
        self.pickler = _Pickler(self.out, self.buffers.append, refs, adopt, regions=regions)
        self.names: list[str] = []
        self.spans: list[tuple[int, int]] = []  # (body bytes, buffer count) per value
        self.resets: list[bool] = []
        self.reset = False

    @_graph_pass
    def add(self, name: str, value: Any) -> str | None:
        """Pickle ``value`` as ``name``; returns why it could not be, or None. The value goes in a tuple of its
        own, which the pickler memoizes after everything in it: the next value's objects begin one index past
        it (:func:`load_values` finds that index only when a value fails, never copying the memo otherwise)."""
        start, nbuf = self.out.tell(), len(self.buffers)
        self.pickler.index = len(self.names)
        try:
            self.pickler.dump((value,))
        except Exception as exc:
            self.out.seek(start)
            self.out.truncate()
            del self.buffers[nbuf:]
            self.pickler.clear_memo()
            self.pickler.emitted = {k: i for k, i in self.pickler.emitted.items() if i != len(self.names)}
            self.reset = True
            return f"{type(exc).__name__}: {exc}"
        self.names.append(name)
        self.spans.append((self.out.tell() - start, len(self.buffers) - nbuf))
        self.resets.append(self.reset)
        self.reset = False
        return None

    def finish(self, meta: dict[str, Any]) -> payload.Encoded:
        """The blob: ``meta`` (any picklable dict), then the values."""
        head = {**meta, "names": self.names, "resets": self.resets}
        head_buffers: list[pickle.PickleBuffer] = []
        head_body = codepickle.dumps(head, buffer_callback=head_buffers.append)
        stream = self.out.getbuffer()
        bodies = [(memoryview(head_body), [b.raw() for b in head_buffers])]
        pos = nb = 0
        for size, count in self.spans:
            bodies.append((stream[pos : pos + size], [b.raw() for b in self.buffers[nb : nb + count]]))
            pos, nb = pos + size, nb + count
        return payload.assemble(bodies)


def _before(memo: dict[int, Any], last: tuple | None) -> dict[int, Any]:
    """The entries of an unpickler's ``memo`` up to ``last``, the tuple of the last value it loaded whole (memoized
    after everything in it); none when it loaded none."""
    if last is None:
        return {}
    end = next(index for index, obj in memo.items() if obj is last)
    return {k: v for k, v in memo.items() if k <= end}


@_graph_pass
def load_values(
    data: bytes | bytearray | memoryview, target: dict[str, Any], inner: dict[str, dict[int, Any]] | None = None
) -> Loaded:
    """Unpickle a :class:`Writer`'s blob value by value into ``target`` (which is not modified,
    except objects updated in place and names that arriving functions need); ``inner`` is what
    :func:`encode_inputs` gave for the inputs these values may refer to."""
    blob = payload.Blob.parse(data)
    meta = pickle.loads(blob.bodies[0], buffers=blob.buffers[0])
    loaded = Loaded({k: v for k, v in meta.items() if k not in ("names", "resets")})
    names, resets = meta["names"], meta["resets"]
    bodies, buffers = blob.bodies[1:], blob.buffers[1:]
    stream = io.BytesIO(b"".join(bodies))
    offsets, firsts = [0], [0]
    for body, bufs in zip(bodies, buffers, strict=True):
        offsets.append(offsets[-1] + body.nbytes)
        firsts.append(firsts[-1] + len(bufs))
    flat = [buf for bufs in buffers for buf in bufs]
    adopted: dict[Address, Any] = {}

    def reader(i: int, memo: dict[int, Any] | None = None) -> _Unpickler | _Retry:
        """An unpickler at value ``i``: the fast one with a fresh memo or, given a memo (after a failure:
        the C unpickler cannot take a memo with gaps), the pure-Python one."""
        stream.seek(offsets[i])
        if memo is None:
            return _Unpickler(stream, iter(flat[firsts[i] :]), target, adopted, inner)
        unpickler = _Retry(stream, iter(flat[firsts[i] :]), target, adopted, inner)
        unpickler.memo = memo
        return unpickler

    unpickler = reader(0)
    last: tuple | None = None  # the fast unpickler's last value as loaded: the tuple the Writer wrapped it in
    for i, name in enumerate(names):
        if resets[i]:
            unpickler, last = reader(i), None
        try:
            last = _in_user_frames(unpickler.load, target, loaded.values)
            (value,) = last
        except Exception as exc:
            if isinstance(unpickler, _Unpickler):  # again in pure Python, to learn what was half built
                retry = _Retry(io.BytesIO(bodies[i]), iter(buffers[i]), target, adopted, inner)
                retry.memo = _before(unpickler.memo.copy(), last)
                try:
                    (value,) = _in_user_frames(retry.load, target, loaded.values)
                except Exception:
                    unpickler = reader(i + 1, retry.safe_memo())
                else:  # it worked the second time
                    unpickler = reader(i + 1, retry.memo)
                    loaded.values[name] = value
                    continue
            else:
                unpickler = reader(i + 1, unpickler.safe_memo())
            loaded.failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        loaded.values[name] = value
    return loaded
