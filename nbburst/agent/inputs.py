"""The cell's inputs on the machine, and what of them goes back.

Inputs arrive as blobs pinned by the signed manifest and land in the cell's
namespace (notebook functions bound to it). Each one is fingerprinted as it
arrives, so that afterwards an input the cell changed in place (``fit``,
``append``, ``df["c"] = ...``) is sent back, and one it did not change is sent
back only as a reference to the kernel's own object. The kernel's submodules
and process state (:mod:`nbburst.protocol.state`) come with them.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from ..protocol import imports, payload, signing, state, transfer
from ..protocol.job import JobLayout, JobSpec, blob_key
from ..store import Store


class Inputs:
    """The loaded inputs: which names to watch, as they arrived, and the process state to carry."""

    def __init__(self, manifest: dict[str, Any], tracker: state.Tracker):
        self.tracker = tracker
        self.track = bool(manifest.get("track"))
        self.returns: list[str] | None = manifest.get("returns")
        self.arrived: dict[str, tuple[Any, str]] = {}  # name -> (object, fingerprint)

    def watch(self, ns: dict[str, Any], names: list[str]) -> None:
        """Fingerprint ``names`` as they are now (after loading, before the cell)."""
        if not self.track:
            return
        for name in names:
            fp = transfer.fingerprint(ns[name])
            if fp is not None:
                self.arrived[name] = (ns[name], fp)

    def begin(self) -> None:
        """Right before the cell's code: the kernel's process state takes effect."""
        self.tracker.begin()

    def returns_of(
        self, ns: dict[str, Any], outputs: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[int, str], dict[int, str]]:
        """(values to send back, unchanged inputs by id, changed inputs by id).

        The values are the outputs plus every input still bound to the object it
        arrived as whose content changed (unless ``--out`` left it out).
        """
        changed: dict[str, Any] = {}
        refs: dict[int, str] = {}
        adopt: dict[int, str] = {}
        for name, (obj, fp) in self.arrived.items():
            if ns.get(name) is not obj:
                continue  # rebound (an output) or deleted: the object itself goes back only if referenced
            if transfer.fingerprint(obj) == fp:
                refs[id(obj)] = name
                continue
            adopt[id(obj)] = name
            if name not in outputs and (self.returns is None or name in self.returns):
                changed[name] = obj
        return {**changed, **outputs}, refs, adopt


def load(store: Store, layout: JobLayout, spec: JobSpec, ns: dict[str, Any]) -> Inputs:
    """Load the job's inputs into ``ns``: modules by import, values from blobs matching the signed manifest."""
    raw = store.get(layout.inputs)
    if payload.digest_bytes(raw) != spec.digests.get("inputs.json"):
        raise signing.SignatureError("inputs.json does not match the signed job spec; refusing to load it")
    manifest = json.loads(raw)
    imports.import_all(manifest.get("submodules", []))
    tracker = state.Tracker(_fetch(store, manifest["state"], "the process state", ns) if "state" in manifest else {})
    inputs = Inputs(manifest, tracker)
    for name, module in manifest.get("modules", {}).items():
        ns[name] = importlib.import_module(module)
    before = set(ns)
    for name, digest in manifest.get("values", {}).items():
        ns[name] = _fetch(store, digest, repr(name), ns)
    inputs.watch(ns, [n for n in ns if n not in before])  # the inputs and the globals their functions brought
    return inputs


def _fetch(store: Store, digest: str, what: str, ns: dict[str, Any]) -> Any:
    data = store.get(blob_key(digest))
    if payload.digest_bytes(data) != digest:
        raise signing.SignatureError(f"the blob of {what} does not match its address; refusing to load it")
    return transfer.load_value(data, ns)
