"""pandas' copy-on-write links, kept where values land.

Since pandas 3 every pandas object made from another (``s = df["a"]``, ``df.iloc[:2]``,
``df[["b"]]``) is a lazy copy: the two share memory, and each block of theirs knows, through
the references it shares with the other's (``Block.refs``), that a write must copy it first.
So ``s.iloc[0] = 100`` leaves ``df`` as it was. A pickle keeps the values but not those links:
on the machine ``s`` would own memory it shares in the kernel and write into it, and that
write, brought back into the kernel's array, would change ``df``; a Series made on the
machine from an input would come back as a view of the kernel's frame that a later write in
the kernel changes too.

So a block manager travels with its links (:func:`reduce_manager`): the blocks that share
references share one :class:`Link` in the pickle, and are linked again where they land. Where
values land (:func:`landing`), the blocks of a link join the references of a block there whose
values lie in the same array's memory (the kernel's frame a Series was made from); a link that
lands with one block and finds none had its others where it came from, and that block is marked
shared by a block of its own that lives as long as its manager. A write to any of them then copies first, as it would
have where the cell came from. Blocks that share memory without links (frames made with
``copy=False`` from one array) travel without any, and keep writing through. Nothing here
imports pandas: a cell that never used it pays nothing.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import views

#: The module of pandas' block managers, which every DataFrame and Series holds (``_mgr``).
MANAGERS = "pandas.core.internals.managers"
#: manager -> the blocks of its own that keep its blocks marked shared (they die with it).
_keepers: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
_landing = threading.local()  # .links: the links loaded since :func:`landing` began, in this thread


class Link:
    """One set of pandas references (``Block.refs``) as it travels: the blocks that shared it land sharing one."""

    def __init__(self) -> None:
        self.refs: Any = None  # the references of the first block landed with it
        self.blocks: list[tuple[Any, Any]] = []  # (manager, block) landed with it

    def __reduce__(self) -> tuple[Any, ...]:
        return Link, ()

    def join(self, manager: Any, block: Any) -> None:
        """``block`` (of ``manager``) landed with this link: it shares the references of the first one."""
        if self.refs is None:
            self.refs = block.refs
        else:
            _share(block, self.refs)
        self.blocks.append((manager, block))


def _share(block: Any, refs: Any) -> None:
    """``block`` takes ``refs`` for its references, as pandas gives a lazy copy its source's."""
    if block.refs is not refs:
        block.refs = refs
        refs.add_reference(block)


def is_manager(kind: type) -> bool:
    """Whether ``kind`` is one of pandas' block managers."""
    return kind.__module__ == MANAGERS


def reduce_manager(manager: Any, links: dict[int, Link]) -> Any:
    """``manager``'s reduction, with a :class:`Link` for each of its blocks that shares its references with
    another block (``links``: the pickle's, by the id of the references they stand for); pandas' own
    (``NotImplemented``) where none does, which a warm parent may load ahead as plain data."""
    shared = tuple(
        links.setdefault(id(block.refs), Link()) if block.refs.has_reference() else None for block in manager.blocks
    )
    if not any(shared):
        return NotImplemented
    func, args, *rest = manager.__reduce_ex__(5)
    return func, args, (rest[0] if rest else None, shared), None, None, _set_state


def _set_state(manager: Any, state: tuple[Any, tuple[Link | None, ...]]) -> None:
    own, shared = state
    if own is not None:
        manager.__setstate__(own)
    landed = getattr(_landing, "links", None)
    for block, link in zip(manager.blocks, shared, strict=False):
        if link is not None:
            link.join(manager, block)
            if landed is not None:
                landed[id(link)] = link


@contextlib.contextmanager
def landing(present: Callable[[], Iterable[Any]]) -> Iterator[None]:
    """Load values within: afterwards the blocks of each link that landed join the references of a block of
    ``present()`` (the objects the process has: the kernel's namespace, the inputs) that lies in the same array's
    memory, if one does; else a link that landed with one block marks it shared."""
    outer = getattr(_landing, "links", None)
    _landing.links = links = {}
    try:
        yield
    finally:
        _landing.links = outer
    if not links:
        return
    by_root: dict[int, list[Any]] = {}
    for manager in _managers(present()):
        for block in manager.blocks:
            if views.plain_array(block.values):
                by_root.setdefault(views.root(block.values), []).append(block)
    for link in links.values():
        landed = {id(block) for _, block in link.blocks}
        partner = next(
            (
                other
                for _, block in link.blocks
                if views.plain_array(block.values)
                for other in by_root.get(views.root(block.values), ())
                if id(other) not in landed
            ),
            None,
        )
        if partner is not None:  # they join the references of the block they were made from, and of its copies
            for _, block in link.blocks:
                _share(block, partner.refs)
        elif len(link.blocks) == 1:  # its other blocks stayed where it came from
            manager, block = link.blocks[0]
            _keepers.setdefault(manager, []).append(block.copy(deep=False))  # shares its refs: a write copies


def _managers(objects: Iterable[Any]) -> list[Any]:
    """The block managers among ``objects``, and those of the DataFrames and Series among them."""
    found: dict[int, Any] = {}
    getters: dict[type, Callable[[Any], Any] | None] = {}  # by type: how its object gives its manager, if it has one
    for obj in objects:
        kind = type(obj)
        if kind not in getters:
            frame = kind.__module__.startswith("pandas.core.") and kind.__name__ in ("DataFrame", "Series")
            getters[kind] = _itself if is_manager(kind) else operator.attrgetter("_mgr") if frame else None
        get = getters[kind]
        if get is not None:
            manager = get(obj)
            found[id(manager)] = manager
    return list(found.values())


def _itself(obj: Any) -> Any:
    return obj
