"""Run the job's code in this (forked) process and commit its result or error.

The process is the leader of its own process group, so the agent can end the
cell and everything it started (loky workers, subprocesses) in one signal.
"""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import os
import sys
import threading
import time
from typing import Any

from ..protocol import payload, signing
from ..protocol.job import JobLayout, JobSpec, blob_key
from ..store import AlreadyExists, Store
from . import channel as channel_module
from .channel import Channel, flush_c_streams, format_object

EXIT_RESULT, EXIT_ERROR = 0, 1


def cell_filename(job_id: str) -> str:
    return f"<burst-cell {job_id}>"


def load_inputs(store: Store, layout: JobLayout, spec: JobSpec, key: bytes) -> dict[str, Any]:
    """Modules by import, values from blobs whose SHA-256 matches the signed manifest."""
    raw = store.get(layout.inputs)
    if payload.digest_bytes(raw) != spec.digests.get("inputs.json"):
        raise signing.SignatureError("inputs.json does not match the signed job spec; refusing to load it")
    manifest = json.loads(raw)
    ns: dict[str, Any] = {}
    import importlib

    for name, module in manifest.get("modules", {}).items():
        ns[name] = importlib.import_module(module)
    for name, digest in manifest.get("values", {}).items():
        data = bytearray(store.get(blob_key(digest)))
        if payload.digest_bytes(data) != digest:
            raise signing.SignatureError(f"the blob of {name!r} does not match its address; refusing to load it")
        ns[name] = payload.decode(data)
    return ns


def materialise_files(store: Store, layout: JobLayout, spec: JobSpec) -> None:
    if not spec.files:
        return
    raw = store.get(layout.files)
    if payload.digest_bytes(raw) != spec.digests.get("files.json"):
        raise signing.SignatureError("files.json does not match the signed job spec")
    for rel, digest in json.loads(raw).items():
        store.get_file(blob_key(digest), rel)
        with open(rel, "rb") as f:
            if payload.digest_bytes(f.read()) != digest:
                raise signing.SignatureError(f"file {rel} does not match its address")


class _Shell:
    """IPython on the machine, made only when the cell uses IPython syntax or APIs."""

    def __init__(self, ns: dict[str, Any], channel: Channel):
        self.ns, self.channel, self.shell = ns, channel, None

    def __call__(self) -> Any:
        if self.shell is None:
            from IPython.core.displaypub import DisplayPublisher
            from IPython.core.interactiveshell import InteractiveShell
            from traitlets.config import Config

            channel = self.channel

            class Publisher(DisplayPublisher):
                def publish(self, data, metadata=None, *args, **kwargs):
                    channel.display(data, metadata)

                def clear_output(self, wait=False):
                    channel.send({"s": "clear"})

            cfg = Config({"HistoryManager": {"enabled": False}})
            self.shell = InteractiveShell.instance(config=cfg, user_ns=self.ns, display_pub_class=Publisher)
            self.shell.displayhook.write_output_prompt = lambda: None  # type: ignore[method-assign]
        return self.shell


def _display(channel: Channel):
    def display(*objs: Any, raw: bool = False, metadata: dict | None = None, **kwargs: Any) -> None:
        for obj in objs:
            if raw:
                channel.display(obj, metadata)
            else:
                data, md = format_object(obj)
                channel.display(data, {**md, **(metadata or {})})

    return display


def _periodic_c_flush(stop: threading.Event) -> None:
    while not stop.wait(0.5):
        flush_c_streams()


def _trim(tb, filename: str):
    """Drop the runner's own frames: the traceback starts in the cell."""
    head = tb
    while head is not None and head.tb_frame.f_code.co_filename != filename:
        head = head.tb_next
    return head or tb


def run(
    store: Store, layout: JobLayout, spec: JobSpec, key: bytes, channel: Channel, control_fd: int | None = None
) -> int:
    """Execute the job; commit result.pkl or error.pkl (create-only, signed).

    ``control_fd`` is the agent's control pipe (preemption notices): see agent/preemption.py."""
    from .. import reporting

    reporting._channel = channel
    from .tqdm_hook import install as install_tqdm_hook  # tqdm bars in the cell feed the job's progress

    install_tqdm_hook()
    from .checkpoints import start_in_runner  # nbburst.checkpoint, joblib resume, preemption notices

    start_in_runner(store, layout, key, channel, control_fd)
    stop = threading.Event()
    threading.Thread(target=_periodic_c_flush, args=(stop,), daemon=True).start()
    filename = cell_filename(spec.job_id)
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        ns.update(load_inputs(store, layout, spec, key))
        materialise_files(store, layout, spec)
        if spec.kind == "call":
            fn, args, kwargs = ns.pop("__fn__"), ns.pop("__args__"), ns.pop("__kwargs__")
            outcome = {"values": {}, "deleted": [], "has_last": True, "last": fn(*args, **kwargs)}
        else:
            outcome = run_cell(store.get(layout.code).decode(), spec, ns, channel, filename)
    except BaseException as exc:  # the cell's exception, reported to the notebook
        stop.set()
        _commit_error(store, layout, key, exc, filename)
        return EXIT_ERROR
    stop.set()
    _commit_result(store, layout, key, outcome, channel)
    return EXIT_RESULT


def run_cell(code: str, spec: JobSpec, ns: dict[str, Any], channel: Channel, filename: str) -> dict[str, Any]:
    if payload.digest_bytes(code.encode()) != spec.digests.get("code.py"):
        raise signing.SignatureError("code.py does not match the signed job spec; refusing to run it")
    builtins.display = _display(channel)  # type: ignore[attr-defined]
    shell = _Shell(ns, channel)
    ns["get_ipython"] = shell
    if "IPython" in code:
        shell()
    channel_module.current = channel  # the matplotlib backend finds it here if the cell plots
    lines = code.splitlines(keepends=True)
    linecache.cache[filename] = (len(code), None, lines, filename)
    tree = ast.parse(code, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), ns)
    outcome: dict[str, Any] = {"has_last": last is not None, "last": None}
    if last is not None:
        outcome["last"] = eval(compile(ast.Expression(last.value), filename, "eval"), ns)
    if "matplotlib.pyplot" in sys.modules:
        from .mplbackend import flush_figures

        flush_figures()
    names = spec.outputs if spec.outputs is not None else []
    outcome["values"] = {n: ns[n] for n in names if n in ns}
    outcome["deleted"] = [n for n in spec.deleted if n not in ns]
    return outcome


def _commit_result(store: Store, layout: JobLayout, key: bytes, outcome: dict[str, Any], channel: Channel) -> None:
    """Send back every value that pickles; name the ones that do not."""
    warnings = []
    values = {}
    for name, value in outcome["values"].items():
        try:
            payload.encode(value)
        except Exception as exc:
            warnings.append(f"{name!r} ({type(value).__name__}) was not brought back: it cannot be pickled ({exc})")
        else:
            values[name] = value
    outcome["values"] = values
    if outcome.get("has_last"):
        try:
            payload.encode(outcome["last"])
        except Exception:
            outcome["last_bundle"] = format_object(outcome.pop("last"))
    outcome["warnings"] = warnings
    data = payload.encode(outcome).tobytes()
    try:
        store.create(layout.result, signing.sign(key, data))
    except AlreadyExists:
        pass  # an earlier attempt committed it: results are never overwritten


def _commit_error(store: Store, layout: JobLayout, key: bytes, exc: BaseException, filename: str) -> None:
    import traceback

    from tblib import pickling_support

    tb = _trim(exc.__traceback__, filename)
    exc = exc.with_traceback(tb)
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    info = {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
        "traceback": text,
        "source": linecache.cache.get(filename, (0, None, [], ""))[2],
        "filename": filename,
        "at": time.time(),
    }
    try:
        pickling_support.install(exc)
        data = payload.encode({**info, "exc": exc}).tobytes()
    except Exception:
        data = payload.encode({**info, "exc": None}).tobytes()
    try:
        store.create(layout.error, signing.sign(key, data))
    except AlreadyExists:
        pass


def redirect_std(stdout_fd: int, stderr_fd: int) -> None:
    """Point fds 1 and 2 at the shipper's pipes, line-buffered like a notebook."""
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    os.close(stdout_fd)
    os.close(stderr_fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
