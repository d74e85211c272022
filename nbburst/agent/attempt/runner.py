"""Run the job's code in this (forked) process and hand its result or error to the agent.

The process leads a session of its own (agent/attempt/spawn.py), so the agent can end
the cell and everything it started (loky workers, subprocesses) in one signal.
It commits nothing itself: the agent checks that the attempt still holds and
commits the verdict (agent/attempt/verdict.py). A runner cut off from its agent exits
with ``spawn.EXIT_ORPHANED``: a lost agent is never the cell's error.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import sys
import threading
import time
from typing import Any

from ...protocol import payload, signing, transfer, views, workfiles
from ...protocol.job import JobLayout, JobSpec, blob_key
from ...store import Store
from ..linebuffered import install as install_line_buffering
from ..scaleout import connect as connect_cluster
from .bindings import Bindings
from .channel import Channel, ChannelStream, flush_c_streams
from .inputs import Inputs
from .inputs import load as load_inputs
from .shell import ZMQInteractiveShell
from .shell import start as start_shell
from .spawn import EXIT_ORPHANED, orphaned
from .verdict import ERROR, RESULT, Handoff

EXIT_RESULT, EXIT_ERROR = 0, 1


#: What ``__doc__`` is in an IPython kernel's user namespace.
_KERNEL_DOC = "Automatically created module for IPython interactive environment"


def cell_filename(job_id: str) -> str:
    return f"<burst-cell {job_id}>"


def materialise_files(store: Store, layout: JobLayout, spec: JobSpec) -> None:
    """The kernel's working folder as the cell finds it: its subfolders (empty), the files sent with the cell."""
    for rel in spec.folders:
        os.makedirs(workfiles.check_rel(rel), exist_ok=True)
    if not spec.files:
        return
    raw = store.get(layout.files)
    if payload.digest_bytes(raw) != spec.digests.get("files.json"):
        raise signing.SignatureError("files.json does not match the signed job spec")
    for rel, digest in json.loads(raw).items():
        if os.path.isabs(rel) or workfiles.levels_up(os.path.normpath(rel)) > len(spec.workdir_tail):
            raise signing.SignatureError(f"file {rel} would land outside the job's folder")
        store.get_file(blob_key(digest), rel)
        with open(rel, "rb") as f:
            if payload.digest_bytes(f.read()) != digest:
                raise signing.SignatureError(f"file {rel} does not match its address")


def _periodic_c_flush(stop: threading.Event) -> None:
    while not stop.wait(0.5):
        flush_c_streams()


def _trim(tb, filename: str):
    """Drop the runner's own frames: the traceback starts in the cell."""
    head = tb
    while head is not None and head.tb_frame.f_code.co_filename != filename:
        head = head.tb_next
    return head or tb


def kernel_namespace() -> dict[str, Any]:
    """A fresh user namespace, as a kernel's: `print(__doc__)` in a notebook prints IPython's module docstring."""
    return {"__name__": "__main__", "__builtins__": builtins, "__doc__": _KERNEL_DOC}


class Prepared:
    """What a runner sets up before it knows its job: the reporting hooks, the cell's namespace, the
    shell over it. A session's controller prepares its runner while it waits for a cell
    (agent/session/controller.py)."""

    def __init__(self, channel: Channel):
        from ... import reporting
        from ..hooks.joblib_progress import install as install_joblib_hook  # joblib's tasks (scikit-learn's fits) too
        from ..hooks.tqdm_progress import install as install_tqdm_hook  # tqdm bars in the cell feed the job's progress

        reporting.connect(channel)
        install_tqdm_hook()
        install_joblib_hook()
        self.stop = threading.Event()  # of the thread that flushes what C code printed, twice a second
        threading.Thread(target=_periodic_c_flush, args=(self.stop,), daemon=True).start()
        self.ns = kernel_namespace()
        sys.stdout, sys.stderr = ChannelStream(channel, "stdout", 1), ChannelStream(channel, "stderr", 2)
        self.problem: BaseException | None = None
        try:  # before the inputs: unpickling may import matplotlib
            self.shell: ZMQInteractiveShell | None = start_shell(self.ns, channel, "<cell>")
            self.ns = self.shell.user_ns  # the same, or the fresh one of the shell a warm parent made ahead
        except BaseException as exc:  # raised as the cell's, once the runner knows its job
            self.shell, self.problem = None, exc

    def warm_up(self) -> None:
        """Run nothing once, silently and out of the history: what a first cell touches in this process (its
        copy of the warm parent's shell and modules, copied page by page when first written) is then ready
        when the cell comes."""
        if self.shell is not None:
            self.shell.execute_silently("pass")

    def shell_for(self, filename: str) -> ZMQInteractiveShell:
        if self.problem is not None:
            raise self.problem
        assert self.shell is not None
        self.shell.compile.cell_name = filename
        return self.shell


def run(
    store: Store,
    layout: JobLayout,
    spec: JobSpec,
    key: bytes,
    channel: Channel,
    handoff: Handoff,
    control_fd: int | None = None,
    prepared: Prepared | None = None,
) -> int:
    """Execute the job; hand its result or error to the agent through ``handoff``.

    ``control_fd`` is the agent's control pipe (preemption notices): see agent/attempt/preemption.py."""
    from ... import reporting
    from .checkpoints import start_in_runner  # nbburst.checkpoint, joblib resume, preemption notices

    prepared = prepared or Prepared(channel)
    syncer = start_in_runner(store, layout, key, channel, control_fd)
    stop = prepared.stop
    filename = spec.code_name or cell_filename(spec.job_id)  # the kernel's name for the code, as it runs there
    ns = prepared.ns
    ran: dict[str, Any] | None = None  # what a cell that raised had done when it raised
    try:
        reporting.phase("loading inputs and importing their modules")
        shell = prepared.shell_for(filename)
        materialise_files(store, layout, spec)  # first: an open file among the inputs is reopened on its file
        inputs = load_inputs(store, layout, spec, ns)
        shell.take_input_history(inputs.count)
        inputs.begin()  # the kernel's process state, in force from here on
        bindings = Bindings(ns, shell.user_ns_hidden, told=inputs.returns is not None)
        bindings.lift(ns)  # the notebook's modules' variables, into their modules
        reporting.phase("")
        connect_cluster()  # --workers: the default Dask client, and Dask as joblib's default backend
        if spec.kind == "call":
            fn, args, kwargs = ns.pop("__fn__"), ns.pop("__args__"), ns.pop("__kwargs__")
            outcome = {"values": {}, "deleted": [], "has_last": True, "last": fn(*args, **kwargs)}
        else:
            outcome = run_cell(store.get(layout.code).decode(), spec, ns, shell, bindings)
            raised = outcome.pop("raised", None)
            if raised is not None:
                ran = outcome
                raise raised
    except BaseException as exc:  # the cell's exception, reported to the notebook
        stop.set()
        if orphaned():  # e.g. a broken pipe to the agent that is gone: not the cell's doing
            return EXIT_ORPHANED
        _final_sync(syncer)
        _commit_error(handoff, exc, filename, None if ran is None else _changes_before(ran, inputs, ns))
        return EXIT_ERROR
    stop.set()
    _final_sync(syncer)
    _commit_result(handoff, outcome, inputs, ns)
    return EXIT_RESULT


def _final_sync(syncer: Any) -> None:
    """The cell's last checkpoints up before its verdict: a later job may resume from them (--resume)."""
    if syncer is not None:
        syncer.flush()


def run_cell(
    code: str, spec: JobSpec, ns: dict[str, Any], shell: ZMQInteractiveShell, bindings: Bindings
) -> dict[str, Any]:
    """Run the cell as the kernel would (see agent/attempt/shell.py); ``Out`` has been displayed when it returns.
    What comes back: the names the kernel read from its code, and those ``bindings`` tells it bound otherwise."""
    if payload.digest_bytes(code.encode()) != spec.digests.get("code.py"):
        raise signing.SignatureError("code.py does not match the signed job spec; refusing to run it")
    executed = shell.execute(code)
    bindings.settle(ns)
    outcome: dict[str, Any] = {"has_last": executed.result is not None, "last": executed.result, "displayed": True}
    if executed.error_before_exec is not None:
        raise executed.error_before_exec
    if executed.error_in_exec is not None:
        # As in the kernel, what the cell bound and changed before it raised stays: it goes back with the error.
        outcome.update(raised=executed.error_in_exec, has_last=False, last=None)
    names = [*(spec.outputs if spec.outputs is not None else []), *bindings.bound(ns)]
    outcome["values"] = {n: ns[n] for n in names if n in ns}
    outcome["deleted"] = list(dict.fromkeys([*(n for n in spec.deleted if n not in ns), *bindings.unbound(ns)]))
    return outcome


def _commit_result(handoff: Handoff, outcome: dict[str, Any], inputs: Inputs, ns: dict[str, Any]) -> None:
    handoff.hand_over(RESULT, _changes(outcome, inputs, ns).parts)


def _changes(outcome: dict[str, Any], inputs: Inputs, ns: dict[str, Any]) -> payload.Encoded:
    """The outputs and the inputs the cell changed, every value that pickles (the others named), as a result
    blob (:class:`transfer.Writer`)."""
    displayed = outcome.pop("displayed", False)  # a cell's Out, shown already: only the value may travel
    values, refs, adopt = inputs.returns_of(ns, outcome["values"])
    # An array made of the memory of one the kernel holds (or gets now) goes back as a view of it.
    held = [obj for obj in inputs.held() if id(obj) in refs or id(obj) in adopt]
    writer = transfer.Writer(refs, adopt, views.Regions(held, values.values()))
    unsent = {
        name: f"{name!r} ({type(value).__name__}) was not brought back: it cannot be pickled ({why})"
        for name, value in values.items()
        if (why := writer.add(name, value))
    }
    # Of these, the kernel makes again or unbinds the names the cell bound (nbburst/client/replay.py): its
    # earlier value of one is stale. An input only changed in place keeps its name.
    bound = list(outcome["values"])
    meta: dict[str, Any] = {"deleted": outcome["deleted"], "has_last": outcome["has_last"], "bound": bound}
    meta["unsent"] = {name: why for name, why in unsent.items() if name in bound}
    if outcome["has_last"] and writer.add(transfer.LAST, outcome["last"]):
        if displayed:
            meta["has_last"] = False
        else:
            meta["last_bundle"] = ZMQInteractiveShell.instance().display_formatter.format(outcome["last"])
    meta["state"] = inputs.tracker.changes()
    meta["warnings"] = [*unsent.values(), *inputs.tracker.problems]
    return writer.finish(meta)


def _changes_before(ran: dict[str, Any], inputs: Inputs, ns: dict[str, Any]) -> payload.Encoded | None:
    """What a cell that raised had changed; None if that cannot be told (the exception goes back all the same)."""
    try:
        return _changes(ran, inputs, ns)
    except Exception as exc:
        print(f"nbburst: what the cell changed before it raised cannot come back ({exc})", file=sys.stderr)
        return None


def _commit_error(handoff: Handoff, exc: BaseException, filename: str, before: payload.Encoded | None = None) -> None:
    """The exception, and ``before``: what the cell had changed when it raised (a result blob), if it ran."""
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
        "before": None if before is None else before.tobytes(),
    }
    try:
        pickling_support.install(exc)
        data = payload.encode({**info, "exc": exc}).parts
    except Exception:
        data = payload.encode({**info, "exc": None}).parts
    handoff.hand_over(ERROR, data)


def redirect_std(stdout_fd: int, stderr_fd: int) -> None:
    """Point fds 1 and 2 at the shipper's pipes, line-buffered like a notebook; once the cell starts,
    what Python prints goes as events instead (see :class:`ChannelStream`), C code and subprocesses
    keep writing here, the Pythons among them a line at a time (see :mod:`.linebuffered`)."""
    install_line_buffering()
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    os.close(stdout_fd)
    os.close(stderr_fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
