"""Arrays that share memory keep sharing it on the other side.

numpy pickles every array as its own bytes: ``a_sub = a[:2, :2]`` made on the
machine would come back as a copy, and writing into it would no longer write
into the kernel's ``a``. So, when values cross, an array whose memory lies
inside one of the *regions* (arrays the other side has or gets: the inputs and
the arrays inside them, the values sent) travels as the region plus where it
lies in it, and is rebuilt there on the other side's own array. A view of an
unchanged input then costs a few bytes, and slices, transposes, ``.view()``,
reshapes and pandas objects over an array alias the kernel's buffers as they
would have.

Where a view lies is said in the region's element indices when it can be
(its start and a step per axis): the other side's array may hold the same
elements at other strides (a non-contiguous array arrives contiguous). A view
that elements cannot describe (another dtype, a step across rows) is said in
bytes, with a copy of its own for the side where the region's layout differs.

Nothing here imports numpy: arrays are recognised by their type's name, so a
cell that never used numpy never pays its import.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TypeVar

#: A view's place in its region: ("index", start, steps) or ("bytes", offset, strides, region's strides, copy).
Place = tuple
K = TypeVar("K")


def plain_arrays(pairs: Iterable[tuple[K, Any]]) -> list[tuple[K, Any]]:
    """The (key, object) pairs whose object is a :func:`plain_array`: one type comparison for any other object,
    where a graph such as a Figure's holds thousands (none at all while numpy was never imported)."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return []
    kind = numpy.ndarray
    return [(key, obj) for key, obj in pairs if type(obj) is kind and not obj.dtype.hasobject]


def plain_array(obj: Any) -> bool:
    """An instance of numpy's own ndarray (not a subclass) holding no Python objects."""
    kind = type(obj)
    return kind.__name__ == "ndarray" and kind.__module__ == "numpy" and not obj.dtype.hasobject


def root(array: Any) -> int:
    """The id of what an array's memory belongs to (arrays of different roots never share memory here)."""
    base = array
    while True:
        if isinstance(base, Memory):
            base = base.region
        elif plain_array(base) and base.base is not None:
            base = base.base
        else:
            return id(base)


def _bounds(array: Any) -> tuple[int, int]:
    """First and one-past-last byte an array's elements occupy."""
    low = high = array.ctypes.data
    for n, stride in zip(array.shape, array.strides, strict=True):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    return low, high + array.itemsize


class Regions:
    """The arrays views may be rebuilt on, found by the memory they hold: first the ones the other side
    ``held`` already (a view of them costs nothing), then the ones sent with them.

    Arrays are grouped by what their memory belongs to; where each lies in memory is read only for a group
    that a view asks about and that holds another array than the view (reading it costs a ctypes object per
    array, and most arrays, a Figure's thousands among them, have memory of their own)."""

    def __init__(self, held: Iterable[Any], sent: Iterable[Any] = ()):
        self._by_root: dict[int, list[tuple[int, bool, Any]]] = {}  # root -> (position, held, array)
        seen: set[int] = set()
        held = list(held)
        for position, array in plain_arrays(enumerate([*held, *sent])):
            if array.size == 0 or id(array) in seen or 0 in array.strides:
                continue
            seen.add(id(array))
            self._by_root.setdefault(root(array), []).append((position, position < len(held), array))
        self._ranked: dict[int, list[tuple[tuple, int, int, Any]]] = {}
        self._ranks: dict[int, tuple] = {}

    def _group(self, root: int) -> list[tuple[tuple, int, int, Any]]:
        """The arrays of ``root``, highest rank first (held, then the largest, then a contiguous one), each with
        its rank and the bytes it spans, read once: a view is compared with the arrays of its group, and a group
        can hold thousands (most of a drawn 3-D surface's arrays share one array's memory)."""
        ranked = self._ranked.get(root)
        if ranked is None:
            ranked = self._ranked[root] = []
            for position, kept, array in self._by_root[root]:
                low, high = _bounds(array)
                rank = (kept, high - low, array.flags.c_contiguous, array.flags.f_contiguous, -position)
                ranked.append((rank, low, high, array))
                self._ranks[id(array)] = rank
            ranked.sort(key=lambda entry: entry[0], reverse=True)
        return ranked

    def region_of(self, view: Any) -> Any:
        """The region holding all of ``view``'s memory that ranks above it (one held, then the largest, then
        a contiguous one: a total order, so never a cycle), or None."""
        if not self._by_root or not plain_array(view) or view.size == 0:
            return None
        key = root(view)
        members = self._by_root.get(key)
        if not members or (len(members) == 1 and members[0][2] is view):  # most arrays: memory of their own
            return None
        candidates = self._group(key)
        low, high = _bounds(view)
        own = self._ranks.get(id(view))
        for rank, a_low, a_high, array in candidates:  # the first that holds the view ranks highest of them
            if own is not None and rank <= own:
                return None
            if array is not view and a_low <= low and high <= a_high:
                return array
        return None


def _decompose(amount: int, strides: tuple[int, ...], shape: tuple[int, ...]) -> list[int] | None:
    """Index steps along each axis that move ``amount`` bytes through an array of these strides, or None."""
    order = sorted((i for i, n in enumerate(shape) if n > 1), key=lambda i: -abs(strides[i]))
    steps, rest = [0] * len(shape), abs(amount)
    for i in order:
        steps[i], rest = divmod(rest, abs(strides[i]))
    if rest:
        return None
    sign = 1 if amount >= 0 else -1
    return [sign * s * (1 if strides[i] > 0 else -1) for i, s in enumerate(steps)]


def _index_place(view: Any, region: Any) -> Place | None:
    """Where ``view`` lies in ``region`` in element indices, if they can say it."""
    if view.dtype != region.dtype:
        return None
    shape, strides = region.shape, region.strides
    last = [(n - 1) * s if s < 0 else 0 for n, s in zip(shape, strides, strict=True)]
    start = _decompose(view.ctypes.data - region.ctypes.data - sum(last), strides, shape)
    if start is None:
        return None
    start = [n - 1 - i if s < 0 else i for i, n, s in zip(start, shape, strides, strict=True)]
    steps = [
        _decompose(st, strides, shape) if m > 1 else [0] * len(shape)
        for m, st in zip(view.shape, view.strides, strict=True)
    ]
    if any(step is None for step in steps):
        return None
    for axis, n in enumerate(shape):  # every element of the view is one of the region's
        low = start[axis] + sum(min(0, (m - 1) * s[axis]) for m, s in zip(view.shape, steps, strict=True))
        high = start[axis] + sum(max(0, (m - 1) * s[axis]) for m, s in zip(view.shape, steps, strict=True))
        if low < 0 or high >= n:
            return None
    return ("index", tuple(start), tuple(map(tuple, steps)))


def reduce(view: Any, region: Any) -> tuple[Any, tuple[Any, ...]]:
    """How to pickle ``view`` as a place in ``region`` (which the pickler sends as it sends any object)."""
    place = _index_place(view, region)
    if place is None:
        import numpy as np

        offset = view.ctypes.data - region.ctypes.data
        place = ("bytes", offset, view.strides, region.strides, np.array(view, copy=True))
    return rebuild, (region, view.shape, view.dtype, not view.flags.writeable, place)


class Memory:
    """What a rebuilt view stands on: its region's memory, kept alive as long as the view (numpy reads
    the pointer, shape and strides from ``__array_interface__``)."""

    def __init__(self, region: Any, offset: int, shape: tuple, strides: tuple, dtype: Any, readonly: bool):
        self.region = region
        self.__array_interface__ = {
            "version": 3,
            "shape": tuple(shape),
            "strides": tuple(strides),
            "typestr": dtype.str,
            "descr": dtype.descr,
            "data": (region.ctypes.data + offset, readonly or not region.flags.writeable),
        }


def rebuild(region: Any, shape: tuple, dtype: Any, readonly: bool, place: Place) -> Any:
    """The view ``reduce`` described, on this side's ``region``."""
    import numpy as np

    if place[0] == "index":
        _, start, steps = place
        offset = sum(i * s for i, s in zip(start, region.strides, strict=True))
        strides = tuple(sum(c * s for c, s in zip(step, region.strides, strict=True)) for step in steps)
    else:
        _, offset, strides, sent_strides, copy = place
        if tuple(region.strides) != tuple(sent_strides):
            return copy  # the region is laid out otherwise here: its bytes are not where they were
    owner = _contiguous_base(region)
    if owner is None:
        view = np.asarray(Memory(region, offset, shape, strides, np.dtype(dtype), readonly))
    else:  # an ndarray's view, as slicing makes: its base is an array
        start = region.ctypes.data + offset - owner.ctypes.data
        view = np.ndarray(shape, dtype, buffer=owner, offset=start, strides=strides)
        if readonly:
            view.flags.writeable = False
    low, high = _bounds(view)
    r_low, r_high = _bounds(region)
    if not (r_low <= low and high <= r_high):
        raise ValueError("a view that came back lies outside the array it was made of")
    return view


def _contiguous_base(region: Any) -> Any:
    """The first C-contiguous array among ``region`` and its bases (it lends its memory as a buffer), or None."""
    base = region
    while plain_array(base):
        if base.flags.c_contiguous:
            return base
        base = base.base
    return None
