"""``python -m nbburst.agent.session.parent CELLS --control CONTROL``: a session's warm parent, a controller per cell.

A cell on a fresh machine pays a new Python, its imports and its inputs. A
session's machine instead runs this warm parent: it has imported nbburst's
runtime and the notebook's heavy modules once, holds the inputs cells read by
content address (:mod:`.blobcache`), and keeps a controller forked ahead for the
next cell (:class:`WarmParent`), which runs the attempt exactly as ``python -m
nbburst.agent`` would (:mod:`.controller`, a :class:`~nbburst.agent.attempt.controller.Agent`: claim check,
heartbeat, cancel, time limit, log shipping, the verdict) and forks the cell's
runner in turn. Each cell is so a process of its own: an ``os._exit``,
a crash or a timeout ends that cell only, and the parent stays warm for the next.

The client asks for a cell over a Unix socket in a folder only its user can
enter, with the session's token; the job itself is in the Store as for any cell
and stays its record. The controller keeps the client's connection and writes a
byte whenever it has shipped output (``L``) and when the attempt is over (``D``),
so a waiting client wakes at once instead of polling the Store on a timer.

The parent ends itself (and its machine) after ``--idle`` seconds without a cell
and at ``--until`` (the session's hard limit); a soft-off (SIGTERM: preemption)
reaches the running cells' controllers, which leave their attempts PREEMPTED for
the supervisor as on any machine. It is made the subreaper of what its cells
start, so what a cell left behind (a double fork) is ended once no cell runs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import hmac
import importlib
import importlib.util
import json
import os
import select
import selectors
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ...protocol import imports, overlay, payload, plaindata, transfer
from ...protocol.job import ENV_ATTEMPT, JobLayout, attempt_tag, split_job_url
from ...store import Store, open_store
from ..attempt import inputs, spawn
from . import blobcache, prewarm

#: The session's secret, handed to the parent in its environment (removed from it at once).
ENV_TOKEN = "NBBURST_SESSION_TOKEN"
#: How long the parent waits for a request's one line on the control socket.
REQUEST_SECONDS = 5.0
#: How long a running cell may take to end after the hard limit before it is killed.
LIMIT_GRACE_SECONDS = 10.0
#: How long after a cell starts the next spare is forked if the cell still runs. Forking the spare and making
#: its runner ready take CPU that a short cell needs, even beside another core (forked at once, they made
#: ``x = 1`` add 0.039 s instead of 0.025 s on two), and a notebook sends its next cell only once this one ended.
SPARE_DELAY_SECONDS = 0.5
#: What a spare tells the parent when a client connects to hand it a cell (the session is not idle then).
CONNECTED = b'{"connected": true}\n'
#: What a session imports before its first cell, besides the notebook's modules.
RUNTIME = (
    "nbburst.agent.attempt.runner",
    "nbburst.agent.attempt.shell",
    "nbburst.agent.attempt.checkpoints",
    "nbburst.agent.hooks.taskreuse",
    "nbburst.agent.hooks.tqdm_progress",
    "nbburst.agent.attempt.verdict",
    "nbburst.checkpoint",
    "nbburst.reporting",
    "IPython",
    "tblib.pickling_support",
    "xxhash",
)
_PR_SET_CHILD_SUBREAPER = 36
#: What the parent imports for a module a cell uses: for ``import matplotlib``, pyplot too (into the parent's
#: shell, whose hooks every cell's process takes over; ``%matplotlib`` counts as importing pyplot itself).
INSTEAD = {"matplotlib": ("matplotlib", "matplotlib.pyplot")}


def _take_cell(
    cells: socket.socket, token: str, on_connect: Callable[[], object]
) -> tuple[socket.socket, dict[str, Any]]:
    """In the spare controller: wait for the next cell's request (the session's token, a job). The client
    connects before it writes the job (to check that the session is up) and sends the request once the job
    is in the Store, which takes as long as its inputs' upload: no time limit here; a client that goes away
    closes the connection. ``on_connect``: a client has connected (the session is not idle)."""
    while True:
        conn, _ = cells.accept()
        on_connect()
        try:
            request = json.loads(conn.makefile("rb").readline() or b"{}")
            if hmac.compare_digest(str(request.pop("token", "")), token) and request.get("job"):
                return conn, request
        except (OSError, ValueError) as exc:
            print(f"nbburst session: a request failed: {exc}", file=sys.stderr)
        conn.close()


class WarmParent:
    """The session's loop: keep a spare controller forked ahead, reap cells, end on idle or at the limit.

    The fork is the costly step of a cell in a big warm process (its page tables are copied), so it is
    done ahead of time: a *spare* controller, forked while the session waits, takes the next cell from
    the cells' socket itself and tells the parent, which then loads what the cell brought (modules,
    inputs) and forks the next spare, up to date with them: once the cell has ended (or after
    :data:`SPARE_DELAY_SECONDS`). The parent answers the control socket (state, stop) itself, up to date
    with the cells taken so far."""

    def __init__(self, cells: socket.socket, control: socket.socket, token: str, idle_s: float, until: float):
        self.cells_socket, self.control, self.token = cells, control, token
        self.idle_s, self.until = idle_s, until
        self.sel = selectors.DefaultSelector()
        self.running: dict[int, int] = {}  # pid -> pidfd, of the cells' controllers
        self.spare: tuple[int, int] | None = None  # (pid, pidfd) of the controller waiting for the next cell
        self.cells = 0
        self.last = time.time()
        self.stopping = ""
        self.stores: dict[str, Store] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        # spares say here which cell they took (one message each; a cell handed over brings its connection)
        self.reports, self.report_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.taken: list[dict[str, Any]] = []  # cells taken since the last spare was forked, to prepare for
        self.spare_due = 0.0  # when the next spare is forked even though a cell still runs

    # -- serving ---------------------------------------------------------------------------
    def serve(self) -> str:
        """Take cells until the session ends; returns why it ended."""
        self.sel.register(self.control, selectors.EVENT_READ, "control")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "signal")
        self.sel.register(self.reports, selectors.EVENT_READ, "report")
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._fork_spare()
        while True:
            reason = self._over()
            if reason:
                break
            if self.spare is None and (not self.running or time.time() >= self.spare_due):
                self._renew()
            for key, _ in self.sel.select(self._timeout()):
                if key.data == "control":
                    self._answer()
                elif key.data == "signal":
                    os.read(self.wake_r, 64)
                elif key.data == "report":
                    self._reported()
                elif key.data == "spare":
                    self._spare_died(key.fd)
                else:
                    self._reaped(key.data)
        self._end_spare()
        self._end_cells(reason)
        return reason

    def _over(self) -> str:
        now = time.time()
        if self.stopping and not self.running:
            return self.stopping
        if now >= self.until:
            return "the session's time limit"
        if not self.running and now - self.last >= self.idle_s:
            if _waiting(self.cells_socket):  # a client has connected and waits for a spare to take its cell
                self.last = now
                return ""
            return f"{self.idle_s:g} s without a cell"
        return ""

    def _timeout(self) -> float:
        now = time.time()
        left = self.until - now
        if self.spare is None:
            left = min(left, self.spare_due - now)
        if not self.running:
            left = min(left, self.last + self.idle_s - now)
        return max(0.0, left)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """Soft-off: the running cells' controllers save what they can and leave their attempts PREEMPTED."""
        self.stopping = "the machine is going away"
        for pid in self.running:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            os.write(self.wake_w, b"!")
        except OSError:
            pass

    # -- the spare controller ----------------------------------------------------------------
    def _spawn_controller(self, body: Callable[[], int], collect: bool = True) -> tuple[int, int]:
        """Fork a controller that runs ``body()``; returns its pid and pidfd. It holds none of the parent's
        descriptors but the cells' socket and the report channel (a cell's controller closes those too).
        ``collect``: collect the parent's garbage first (not for a cell that waits: after the imports made for
        it, a collection walks them all, 0.1 s, to free a few dozen objects)."""
        inherited = [self.control.fileno(), self.sel.fileno(), self.wake_r, self.wake_w, self.reports.fileno()]
        inherited += self.running.values()

        def child() -> int:
            for fd in inherited:
                os.close(fd)
            return body()

        if collect:
            gc.collect()
        gc.freeze()  # what the parent holds: never traversed by a child's collections (each would copy its pages)
        pid = spawn.spawn(child, os.environ.get(ENV_ATTEMPT, ""))
        return pid, os.pidfd_open(pid)

    def _fork_spare(self) -> None:
        if self.spare is not None or self.stopping:
            return
        prewarm.after_imports()
        cells, token, report = self.cells_socket, self.token, self.report_child
        from . import controller

        def body() -> int:
            ready = controller.ReadyRunner()  # the cell's runner, its shell made while no cell waits
            conn, request = _take_cell(cells, token, lambda: report.send(CONNECTED))
            cells.close()
            fresh = fresh_imports(request.get("imports") or [])
            if fresh:  # the parent imports them first and forks the cell's controller: imported once, not twice
                os.kill(ready.pid, signal.SIGKILL)
                handover = {"handover": request, "pid": os.getpid(), "imports": fresh}
                socket.send_fds(report, [json.dumps(handover).encode()], [conn.fileno()])
                while True:
                    signal.pause()  # until the parent ends this spare
            report.send(json.dumps({**request, "pid": os.getpid()}).encode())
            return _control(conn, request, ready, report)

        self.spare = self._spawn_controller(body)
        self.sel.register(self.spare[1], selectors.EVENT_READ, "spare")

    def _fork_cell(self, conn: socket.socket, request: dict[str, Any], prelude: tuple[bytes, bytes]) -> None:
        """Fork the controller of a cell handed over by the spare that took it, its runner made after the
        cell's new imports (``prelude``: what they printed)."""
        cells, report = self.cells_socket, self.report_child
        from . import controller

        def body() -> int:
            cells.close()
            return _control(conn, request, controller.ReadyRunner(prelude), report)

        pid, pidfd = self._spawn_controller(body, collect=False)
        conn.close()
        self.running[pid] = pidfd
        self.sel.register(pidfd, selectors.EVENT_READ, pid)

    def _reported(self) -> None:
        """A spare took a cell: it is the cell's controller now; load what the cell brought, fork the next. Or
        it hands the cell over, to be run after imports it needs that the session has not made. (Or a client
        connected to the spare to hand it a cell: the session is not idle.)"""
        try:
            data, fds, _, _ = socket.recv_fds(self.reports, 1 << 16, 1)
        except BlockingIOError:
            return
        self.last = time.time()
        report = json.loads(data or b"{}")
        if "handover" in report and fds:
            self._hand_over(report["handover"], report["imports"], report["pid"], socket.socket(fileno=fds[0]))
            return
        for fd in fds:
            os.close(fd)
        if report.get("ended") in self.running:
            self.spare_due = 0.0  # the cell's controller is reaping its runner: the next spare need not wait
            return
        if "job" not in report:
            return  # a client connected
        pid = report["pid"]
        if self.spare is not None and self.spare[0] == pid:
            self.sel.modify(self.spare[1], selectors.EVENT_READ, pid)
            self.running[pid] = self.spare[1]
            self.spare = None
        self._took(report)

    def _hand_over(self, request: dict[str, Any], names: list[str], pid: int, conn: socket.socket) -> None:
        """The spare ``pid`` took a cell that imports modules the session has not: import them here, then fork
        the cell's controller (and its runner) with them. The cell's process imports nothing again, and the
        next cells' neither; only the kernel imports them, meanwhile, on another core."""
        if self.spare is not None and self.spare[0] == pid:
            self._end_spare()
        if self.stopping:
            conn.close()  # the client finds its attempt unstarted, as with a spare that went away
            return
        self._fork_cell(conn, request, import_first(names))
        self._took(request)
        prewarm.after_imports()  # while the cell runs, on another core

    def _took(self, request: dict[str, Any]) -> None:
        self.cells += 1
        self.taken.append(request)
        self.spare_due = time.time() + SPARE_DELAY_SECONDS

    def _renew(self) -> None:
        """Load what the cells taken since the last spare brought (modules, inputs), then fork the next spare,
        up to date with them."""
        taken, self.taken = self.taken, []
        for request in taken:
            self._prepare(request)
        self._fork_spare()

    def _spare_died(self, pidfd: int) -> None:
        """The spare ended before it took a cell (killed, or a crash): fork another. (An event of a spare that
        has reported meanwhile is its cell's: it comes again as such.)"""
        if self.spare is not None and self.spare[1] == pidfd:
            pid, _ = self.spare
            self.spare = None
            self._forget(pid, pidfd)
            self._fork_spare()

    def _end_spare(self) -> None:
        if self.spare is not None:
            pid, pidfd = self.spare
            self.spare = None
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._forget(pid, pidfd)

    # -- requests --------------------------------------------------------------------------
    def _answer(self) -> None:
        """A request on the control socket: the session's state, or ``stop``."""
        conn, _ = self.control.accept()
        try:
            conn.settimeout(REQUEST_SECONDS)
            request = json.loads(conn.makefile("rb").readline() or b"{}")
            if not hmac.compare_digest(str(request.get("token", "")), self.token):
                return  # not the session's client
            if request.get("stop"):
                self.stopping = "stopped by the user"
            elif self.taken:
                self._renew()  # what the cells taken so far brought is held before it is described
            conn.sendall(json.dumps(self.describe()).encode() + b"\n")
        except (OSError, ValueError) as exc:
            print(f"nbburst session: a request failed: {exc}", file=sys.stderr)
        finally:
            conn.close()

    def describe(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "running": len(self.running),
            "cells": self.cells,
            "last": self.last,
            "until": self.until,
            "held": blobcache.held(),
            "reads": blobcache.reads(),
            "stopping": self.stopping,
        }

    def _prepare(self, request: dict[str, Any]) -> None:
        """After a cell started: import its modules and hold its inputs here, for the cells after it."""
        from ..attempt.controller import load_spec
        from . import controller

        try:
            root, job_id = split_job_url(request["job"])
            store: Store = self.stores.get(root) or self.stores.setdefault(root, open_store(root))
            layout = JobLayout(job_id)
            if request.get("objects"):  # pushed with its objects (unless its controller is done with them)
                with contextlib.suppress(OSError):
                    ops = controller.read_ops(request["objects"])
                    store = overlay.Overlay(store, layout.prefix, overlay.THROUGH, ops)
            spec = load_spec(store, layout, bytes.fromhex(request["key"]))
            raw = store.get(layout.inputs)
            if payload.digest_bytes(raw) != spec.digests.get("inputs.json"):
                return  # the runner refuses it, and says so
            manifest = json.loads(raw)
            for digest in [*manifest.get("values", {}).values(), manifest.get("state")]:
                if digest:
                    blobcache.hold(store, digest)
            for digest in manifest.get("values", {}).values():
                _fingerprint_ahead(digest)
            code = store.get(layout.code) if spec.kind == "cell" else b""
            names = [*manifest.get("submodules", []), *manifest.get("modules", {}).values()]
            if manifest.get("state"):  # the kernel's process state needs its modules (numpy's RNG state: numpy)
                shipped = transfer.load_value(blobcache.get(manifest["state"]) or b"", {})
                names += [entry.module for entry, _ in shipped.values()]
            if payload.digest_bytes(code) == spec.digests.get("code.py"):
                names += imports.imported_by(code.decode())  # what this cell imports, the next ones use
            imports.import_all(warm_imports(names))
        except Exception as exc:  # the runner meets the same problem and reports it as the cell's
            print(f"nbburst session: could not prepare {request.get('job')}: {exc}", file=sys.stderr)

    def _reaped(self, pid: int) -> None:
        if pid not in self.running:
            return  # reaped already (an event of the same batch)
        self._forget(pid, self.running.pop(pid))
        self.last = time.time()
        if not self.running:
            _end_leftovers(keep={self.spare[0]} if self.spare else set())

    def _forget(self, pid: int, pidfd: int) -> None:
        self.sel.unregister(pidfd)
        os.close(pidfd)
        try:
            os.waitpid(pid, os.WNOHANG)  # it has ended (its pidfd said so); never wait here
        except ChildProcessError:
            pass

    def _end_cells(self, reason: str) -> None:
        """At the limit (or when the machine goes), the cells still running get a little time, then end."""
        end = time.time() + LIMIT_GRACE_SECONDS
        while self.running and time.time() < end:
            for key, _ in self.sel.select(max(0.0, end - time.time())):
                if isinstance(key.data, int):
                    self._reaped(key.data)
        for pid in list(self.running):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reaped(pid)
        print(f"nbburst session: ending after {self.cells} cells: {reason}", file=sys.stderr, flush=True)


def _fingerprint_ahead(digest: str) -> None:
    """Fingerprint a held input of plain data once, here, as a cell's process would when it arrives: each cell
    then only fingerprints it after it ran (whether it changed it). Other values would run code to load."""
    data = blobcache.get(digest)
    if data is None or blobcache.fingerprints(digest) is not None or not plaindata.plain_value(data):
        return
    inner: dict[int, Any] = {}
    value = transfer.load_value(data, {}, inner)
    blobcache.remember(digest, inputs.arrival(value, inner))


def _control(conn: socket.socket, request: dict[str, Any], ready: Any, report: socket.socket) -> int:
    """In a cell's controller: run the attempt (agent/controller.py) under its marker; once the client is told
    the cell ended, tell the parent on ``report`` too (it forks the next spare then, not once this process
    has reaped the cell's runner and exited)."""
    from . import controller

    os.environ[ENV_ATTEMPT] = attempt_tag(split_job_url(request["job"])[1], int(request["attempt"]))

    def ended() -> None:
        with contextlib.suppress(OSError):
            report.send(json.dumps({"ended": os.getpid()}).encode())
        report.close()

    return controller.control(conn, request, ready, ended)


def fresh_imports(names: list[str]) -> list[str]:
    """Of the modules a cell imports (``names``, in its order), those the warm parent would import ahead
    (:func:`warm_imports`) that this process has not, of packages installed here."""
    return [m for m in warm_imports(names) if m not in sys.modules and _installed(m.partition(".")[0])]


def _installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def import_first(names: list[str]) -> tuple[bytes, bytes]:
    """Import ``names`` in order, before the cell that imports them is forked; returns what they printed
    (stdout, stderr) for the cell to show as its own, as in a kernel. Stops at the first that fails: the
    cell's process meets that failure and reports it, with what it prints."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            for name in names:
                kept = (os.lseek(1, 0, os.SEEK_CUR), os.lseek(2, 0, os.SEEK_CUR))
                try:
                    importlib.import_module(name)
                except Exception:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    out.truncate(kept[0])
                    err.truncate(kept[1])
                    break
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
        out.seek(0)
        err.seek(0)
        return out.read(), err.read()


def warm_imports(names: list[str]) -> list[str]:
    """Of the modules cells use, those the warm parent imports ahead: all, in the cells' order, once each;
    for matplotlib, pyplot too (it installs its hooks into the parent's shell, which is the one every cell's
    process takes over). A package that asks on import whether it runs in a kernel (tqdm.auto, plotly's
    renderers, ipywidgets' comm targets) gets a cell's answer: the parent's shell and import hooks are a
    cell's (agent/attempt/shell.py, :func:`~.shell.make_ahead`)."""
    out: dict[str, None] = {}
    for name in filter(None, names):
        out.update(dict.fromkeys(INSTEAD.get(name, (name,))))
    return list(out)


def _end_leftovers(keep: set[int]) -> None:
    """End and reap what the finished cells left behind (adopted by this subreaper); no cell is running."""
    import psutil

    for child in psutil.Process().children():
        if child.pid in keep:
            continue
        try:
            child.kill()
        except psutil.Error:
            pass
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _waiting(sock: socket.socket) -> bool:
    """Whether a connection waits on listening socket ``sock`` (nobody has accepted it yet)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _listen(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(64)
    return sock


def _subreaper() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m nbburst.agent.session.parent")
    p.add_argument("socket", help="the Unix socket cells come on (its folder is the session's)")
    p.add_argument("--control", required=True, help="the Unix socket of the session's state and stop")
    p.add_argument("--idle", type=float, default=600.0, help="end after this many seconds without a cell")
    p.add_argument("--until", type=float, required=True, help="end at this time (seconds since the epoch)")
    p.add_argument("--preload", default="", help="modules to import before the first cell, comma-separated")
    args = p.parse_args(argv)
    token = os.environ.pop(ENV_TOKEN, "")
    if not token:
        raise SystemExit("nbburst session: no token")
    cells, control = (_listen(path) for path in (args.socket, args.control))
    # The hard limit holds whatever happens to the loop below: SIGALRM's default ends this process, and the
    # cells' processes die with it (agent/attempt/spawn.py). A fork does not inherit the alarm.
    signal.alarm(max(1, int(args.until - time.time() + LIMIT_GRACE_SECONDS + 5)))
    _subreaper()
    # Cells wait in the backlog while the parent warms up: the session is up as soon as it listens.
    from ..attempt.shell import INLINE_BACKEND, KERNEL_ENVIRONMENT
    from . import controller  # noqa: F401 (the cells' controllers, imported before any is forked)

    os.environ.update(KERNEL_ENVIRONMENT)  # what the cell's shell sets, before anything imports matplotlib
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    imports.import_all(RUNTIME)
    from ..attempt.runner import kernel_namespace
    from ..attempt.shell import make_ahead

    # Every cell's process takes over a copy of this shell. It is made before the notebook's modules are
    # imported here: a library that asks on import whether it runs in a kernel (pandas sets its display
    # width so) must get the answer a cell's process gets.
    make_ahead(kernel_namespace())
    for name in warm_imports(args.preload.split(",")):
        if time.time() >= args.until:
            break  # serve() ends the session at once
        imports.import_all([name])
    parent = WarmParent(cells, control, token, args.idle, args.until)
    try:
        parent.serve()
    finally:
        for sock, path in ((cells, args.socket), (control, args.control)):
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(args.socket))
    from ..machine.gce import end_machine

    end_machine()  # a Compute Engine VM deletes itself; nothing to do locally
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
