"""The cell's inputs on the machine, and what of them goes back.

Inputs arrive as blobs pinned by the signed manifest and land in the cell's
namespace (notebook functions bound to it). Each one is fingerprinted as it
arrives, so that afterwards an input the cell changed in place (``fit``,
``append``, ``df["c"] = ...``) is sent back, and one it did not change is sent
back only as a reference to the kernel's own object. The objects inside an
input keep their address (:func:`transfer.inner_objects`): inside a changed
input they go back to update the kernel's very objects (the steps of a fitted
Pipeline, bound to other names there too), arrays among them only if their own
fingerprint changed; inside an unchanged one they go back as references. The kernel's submodules,
the notebook's own modules (:mod:`nbburst.protocol.sources`) and process state
(:mod:`nbburst.protocol.processstate`) come with them.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from ...protocol import celllines, imports, pandascow, payload, processstate, signing, sources, transfer
from ...protocol.job import JobLayout, JobSpec, blob_key
from ...store import Store
from ..session import blobcache

#: An input's fingerprint as it arrived, and those of the arrays inside it by their index in its pickle's memo.
Arrival = tuple[str | None, dict[int, str]]
#: An array inside an input is fingerprinted on its own from this size: a smaller one (a drawn Figure holds
#: thousands of a few dozen bytes) is judged with the input it lies in, and goes back with it if that changed,
#: which costs less than hashing it before and after the cell.
ARRAY_ALONE = 1 << 10


def arrival(
    value: Any, inner: dict[int, Any], others: list[Any] | None = None, walked: dict[int, int] | None = None
) -> Arrival:
    """The fingerprints :meth:`Inputs.watch` keeps of an input (``inner``: the objects inside it); ``others`` and
    ``walked`` as :func:`transfer.fingerprint` takes them."""
    fp = transfer.fingerprint(value, others or (), walked)
    if fp is None:
        return None, {}
    arrays = {}
    for index, obj in inner.items():
        big = type(obj).__name__ == "ndarray" and obj.nbytes >= ARRAY_ALONE
        if big and (array_fp := transfer.fingerprint(obj)) is not None:
            arrays[index] = array_fp
    return fp, arrays


class Inputs:
    """The loaded inputs: which names to watch, as they arrived, and the process state to carry."""

    def __init__(self, manifest: dict[str, Any], tracker: processstate.Tracker):
        self.tracker = tracker
        self.track = bool(manifest.get("track"))
        self.returns: list[str] | None = manifest.get("returns")
        self.count: int | None = manifest.get("count")  # the kernel's execution count of the cell
        self.arrived: dict[str, tuple[Any, str]] = {}  # name -> (object, fingerprint)
        self.inner: dict[str, dict[int, Any]] = {}  # name -> memo index -> object inside that input
        self.arrays: dict[tuple[str, int], str] = {}  # address -> fingerprint, for arrays inside inputs
        self.others: list[Any] = []  # the inputs as they arrived: each one's fingerprint stops at the others
        # name -> id -> memo index, of the objects its fingerprint walked (its own part); absent for an input
        # fingerprinted whole (by a warm parent, which knows no other inputs)
        self.walked: dict[str, dict[int, int]] = {}

    def watch(
        self,
        ns: dict[str, Any],
        names: list[str],
        inner: dict[str, dict[int, Any]],
        known: dict[str, Arrival] | None = None,
    ) -> None:
        """Fingerprint ``names`` as they are now (after loading, before the cell), and the arrays inside
        them of :data:`ARRAY_ALONE` bytes or more on their own (hashing an array is cheap: only a changed one
        needs to travel back); ``known``: fingerprints a warm parent took of the same bytes, loaded the same
        way (:func:`arrival`).

        Each input is fingerprinted by its own part: the other inputs stand for themselves in its pickle
        (:func:`transfer.fingerprint`), so objects two inputs reach (a Figure and its Axes reach each other)
        are pickled once, not once per input."""
        if not self.track:
            return
        self.others = [ns[name] for name in names]
        for name in names:
            walked: dict[int, int] | None = None
            if name in (known or {}):
                fp, arrays = (known or {})[name]
            else:
                walked = {}
                fp, arrays = arrival(ns[name], inner.get(name, {}), self.others, walked)
            if fp is not None:
                self.arrived[name] = (ns[name], fp)
                self.inner[name] = inner.get(name, {})
                self.arrays.update({(name, index): array_fp for index, array_fp in arrays.items()})
                if walked is not None:
                    self.walked[name] = walked

    def begin(self) -> None:
        """Right before the cell's code: the kernel's process state takes effect."""
        self.tracker.begin()

    def _carry_rebound(self, ns: dict[str, Any], verdicts: dict[str, bool]) -> None:
        """An input the cell changed and then unbound (``inner = None``) no longer goes back by its name: it
        goes back inside the inputs whose own part holds it, which its fingerprint stood for, so those count as
        changed."""
        moved = [obj for name, (obj, _) in self.arrived.items() if ns.get(name) is not obj and not verdicts[name]]
        if not moved:
            return
        others = [o for o in self.others if not any(o is m for m in moved)]
        for name, (obj, _) in self.arrived.items():
            if verdicts[name] and name in self.walked and _reaches(obj, others, moved):
                verdicts[name] = False

    def held(self) -> list[Any]:
        """The watched inputs and the objects inside them, as they arrived."""
        return [
            *(obj for obj, _ in self.arrived.values()),
            *(o for inner in self.inner.values() for o in inner.values()),
        ]

    def returns_of(
        self, ns: dict[str, Any], outputs: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[int, transfer.Address], dict[int, transfer.Address]]:
        """(values to send back, unchanged objects by id, changed objects by id), objects by address.

        The values are the outputs plus every input still bound to the object it
        arrived as whose content changed (unless ``--out`` left it out). An input
        rebound or deleted goes back only if an output holds it.

        An object bound to a name of its own is judged by its own fingerprint
        before any input that holds it: a notebook function's fingerprint leaves
        out its globals, so the RNG or cache it reads through them looks
        unchanged inside it whatever the cell did to it.

        An input fingerprinted by its own part (:meth:`watch`) is unchanged if that part pickles as it did and
        every object the inputs hold lies in it where it lay (the same index of the same stream), so that no
        object was swapped for a lookalike; an object inside an input is unchanged if it lies, so, in the own
        part of an unchanged input, or (an array) if its own fingerprint is the same. Any other one goes back
        to update the kernel's object, if what comes back reaches it.
        """
        changed: dict[str, Any] = {}
        refs: dict[int, transfer.Address] = {}
        adopt: dict[int, transfer.Address] = {}
        verdicts: dict[str, bool] = {}
        held = {id(o) for inner in self.inner.values() for o in inner.values()}
        proven: set[int] = set()  # held objects in the own part of an unchanged input, where they were
        for name, (obj, fp) in self.arrived.items():
            before = self.walked.get(name)
            after: dict[int, int] = {}
            own = before is not None
            unchanged = transfer.fingerprint(obj, self.others if own else (), after if own else None) == fp
            if unchanged and before is not None:
                kept = [key for key in before if key in held]
                unchanged = all(after.get(key) == before[key] for key in kept)
                if unchanged:
                    proven.update(kept)
            verdicts[name] = unchanged
        self._carry_rebound(ns, verdicts)
        for name, (obj, _) in self.arrived.items():
            if ns.get(name) is not obj:
                continue
            unchanged = verdicts[name]
            (refs if unchanged else adopt)[id(obj)] = name
            if not unchanged and name not in outputs and (self.returns is None or name in self.returns):
                changed[name] = obj
        for name, unchanged in verdicts.items():
            whole = name not in self.walked
            for index, inside in self.inner[name].items():
                key = id(inside)
                if key in refs or key in adopt:
                    continue
                address = (name, index)
                # Only arrays of ARRAY_ALONE bytes or more were fingerprinted as they arrived: any other object is
                # judged by the input whose own part it lies in (hashing each object of a graph like a Figure's
                # on its own pickles the whole graph once per object).
                if (
                    (whole and unchanged)
                    or key in proven
                    or (address in self.arrays and self.arrays[address] == transfer.fingerprint(inside))
                ):
                    refs[key] = address
                else:
                    adopt[key] = address
        return {**changed, **outputs}, refs, adopt


def _reaches(value: Any, others: list[Any], targets: list[Any]) -> bool:
    """Whether ``value``'s own part (``others`` standing for themselves) holds one of ``targets``."""
    walked: dict[int, int] = {}
    transfer.fingerprint(value, others, walked)
    return any(id(target) in walked for target in targets)


def load(store: Store, layout: JobLayout, spec: JobSpec, ns: dict[str, Any]) -> Inputs:
    """Load the job's inputs into ``ns``: modules by import, values from blobs matching the signed manifest."""
    raw = store.get(layout.inputs)
    if payload.digest_bytes(raw) != spec.digests.get("inputs.json"):
        raise signing.SignatureError("inputs.json does not match the signed job spec; refusing to load it")
    manifest = json.loads(raw)
    if "sources" in manifest:  # the notebook's own modules, first on sys.path before anything is imported
        sources.place(_fetch(store, manifest["sources"], "the notebook's own modules", ns), os.getcwd())
    imports.import_all(manifest.get("submodules", []))
    celllines.install(manifest.get("lines", {}))
    tracker = processstate.Tracker(
        _fetch(store, manifest["state"], "the process state", ns) if "state" in manifest else {}
    )
    inputs = Inputs(manifest, tracker)
    for name, module in manifest.get("modules", {}).items():
        ns[name] = importlib.import_module(module)
    before = set(ns)
    inner: dict[str, dict[int, Any]] = {}
    known: dict[str, Arrival] = {}
    # pandas' lazy copies stay lazy copies, those of two inputs linked again
    with pandascow.landing(lambda: (obj for objects in inner.values() for obj in objects.values())):
        for name, digest in manifest.get("values", {}).items():
            ns[name] = _fetch(store, digest, repr(name), ns, inner.setdefault(name, {}), inner)
            if (fps := blobcache.fingerprints(digest)) is not None:
                known[name] = fps
    history = set(manifest.get("history", []))  # the kernel's `_`, `Out`...: read by the cell, never sent back
    # the inputs, the globals functions brought
    inputs.watch(ns, [n for n in ns if n not in before and n not in history], inner, known)
    return inputs


def _fetch(
    store: Store,
    digest: str,
    what: str,
    ns: dict[str, Any],
    inner: dict[int, Any] | None = None,
    loaded: dict[str, dict[int, Any]] | None = None,
) -> Any:
    data = blobcache.get(digest)  # held, verified, by a session's warm parent
    if data is None:
        data = store.get(blob_key(digest))
        if payload.digest_bytes(data) != digest:
            raise signing.SignatureError(f"the blob of {what} does not match its address; refusing to load it")
    return transfer.load_value(data, ns, inner, loaded)
