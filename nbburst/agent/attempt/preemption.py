"""Preemption on the machine: notice it, use the grace window, mark the attempt PREEMPTED.

Notices come from:

* the soft-off signal (SIGTERM to the agent: a spot VM's ACPI shutdown reaches
  it through the shutdown script / systemd, the local backend sends it itself);
* the metadata server, when there is one (``$GCE_METADATA_HOST`` or a real
  Compute Engine VM): a hanging GET on ``instance/preempted`` and on
  ``instance/maintenance-event``. ``TRUE`` / ``TERMINATE_ON_HOST_MAINTENANCE``
  start the soft-off; ``MIGRATE_ON_HOST_MAINTENANCE`` only uploads the
  checkpoints, as a precaution (a live migration keeps the VM running).

The soft-off (:func:`soft_off`, once per agent) runs in a thread of its own,
never in the signal handler, and, within the grace budget:

1. ships the log lines the agent already has;
2. tells the runner through its control pipe; the runner (:func:`listen`) runs
   the cell's ``nbburst.checkpoint.on_preempt`` hooks, uploads the checkpoints
   and acknowledges on the event channel;
3. stops the runner's process group (``Agent.stop_runner(State.PREEMPTED)``);
   the agent then drains and ships the rest of the output and writes the
   attempt's status PREEMPTED (``Agent._finish``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ...protocol.job import State
from ...protocol.metadata import host as metadata_host

#: Seconds the runner gets for hooks + checkpoint upload, if nothing else says.
LOCAL_BUDGET = 1.5
GCE_BUDGET = 20.0  # of the 30 s a spot VM gets
ENV_BUDGET = "NBBURST_PREEMPT_BUDGET"
WAIT_SECONDS = 60  # hanging GET timeout at the metadata server


def budget() -> float:
    raw = os.environ.get(ENV_BUDGET)
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
    return GCE_BUDGET if metadata_host() else LOCAL_BUDGET


# -- agent side -----------------------------------------------------------------------------------


class Control:
    """The agent's end of the runner's control pipe, and the acknowledgements coming back."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.acks: dict[str, threading.Event] = {"preempt": threading.Event(), "sync": threading.Event()}
        self.lock = threading.Lock()

    def on_event(self, event: dict[str, Any]) -> bool:
        """Handle an event from the runner; True if it was an acknowledgement."""
        kind = event.get("s")
        if kind == "control-ack":
            what = event.get("what", "")
            if what in self.acks:
                self.acks[what].set()
            return True
        return False

    def ask(self, what: str, timeout: float) -> bool:
        """Send ``what`` to the runner and wait for its acknowledgement."""
        with self.lock:
            if self.fd is None:
                return False
            self.acks[what].clear()
            try:
                os.write(self.fd, f"{what}\n".encode())
            except OSError:
                return False
        return self.acks[what].wait(timeout)

    def close(self) -> None:
        with self.lock:
            if self.fd is not None:
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = None


def soft_off(agent: Any, reason: str) -> None:
    """The machine is going away: use the grace window, then stop the runner as PREEMPTED. Idempotent."""
    with _soft_off_lock:
        if getattr(agent, "soft_off_started", False):
            return
        agent.soft_off_started = True
    if agent.stop_reason is not None and agent.stop_reason[0] != State.PREEMPTED:
        return  # already ending (cancel, timeout): that verdict stands
    agent.stop_reason = (State.PREEMPTED, reason)  # seen by run() if the runner is not started yet
    started = time.monotonic()
    try:
        agent.shipper.event("nbburst: preemption notice: saving checkpoints")
        agent.shipper.flush()
    except Exception:
        pass
    control: Control | None = getattr(agent, "control", None)
    acked = False
    if control is not None and agent.runner_pid is not None:
        acked = control.ask("preempt", budget())
    if agent.runner_pid is not None and not acked and _alive(agent.runner_pid):
        try:
            agent.shipper.event(
                f"nbburst: the cell did not finish its preemption work in "
                f"{time.monotonic() - started:.1f} s; stopping it anyway"
            )
        except Exception:
            pass
    agent.stop_runner(State.PREEMPTED, reason)


_soft_off_lock = threading.Lock()


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False


def checkpoint_now(agent: Any, reason: str) -> None:
    """A precautionary upload of the checkpoints (live migration ahead)."""
    try:
        agent.shipper.event(f"nbburst: {reason}; uploading checkpoints as a precaution")
    except Exception:
        pass
    control: Control | None = getattr(agent, "control", None)
    if control is not None:
        control.ask("sync", budget())


def install(agent: Any) -> MetadataWatcher | None:
    """SIGTERM = soft-off; watch the metadata server when there is one."""

    def on_sigterm(signum: int, frame: Any) -> None:
        reason = "the machine is shutting down (soft-off signal)"
        if agent.stop_reason is None:  # at once: a runner that dies meanwhile died of the preemption, not the cell
            agent.stop_reason = (State.PREEMPTED, reason)
        threading.Thread(
            target=soft_off,
            args=(agent, reason),
            name="nbburst-soft-off",
            daemon=True,
        ).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    host = metadata_host()
    if host is None:
        return None
    watcher = MetadataWatcher(
        host,
        on_preempt=lambda reason: soft_off(agent, reason),
        on_migrate=lambda reason: checkpoint_now(agent, reason),
    )
    return watcher.start()


class MetadataWatcher:
    """Hanging GETs on ``instance/preempted`` and ``instance/maintenance-event``."""

    def __init__(self, host: str, on_preempt: Callable[[str], None], on_migrate: Callable[[str], None]):
        self.base = f"http://{host}/computeMetadata/v1/"
        self.on_preempt, self.on_migrate = on_preempt, on_migrate
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> MetadataWatcher:
        for path, handler in (
            ("instance/preempted", self._preempted),
            ("instance/maintenance-event", self._maintenance),
        ):
            t = threading.Thread(
                target=self._watch, args=(path, handler), daemon=True, name=f"nbburst-watch-{path.rsplit('/', 1)[-1]}"
            )
            t.start()
            self.threads.append(t)
        return self

    def stop(self) -> None:
        self.stop_event.set()

    def _preempted(self, value: str) -> None:
        if value.strip().upper() == "TRUE":
            self.on_preempt("the spot VM was preempted (metadata server)")

    def _maintenance(self, value: str) -> None:
        value = value.strip().upper()
        if value.startswith("TERMINATE"):
            self.on_preempt("the VM is about to stop for host maintenance (metadata server)")
        elif value.startswith("MIGRATE"):
            self.on_migrate("the VM is about to be live-migrated for host maintenance")

    def _get(self, path: str, etag: str | None) -> tuple[int, str, str | None]:
        import urllib.error
        import urllib.request  # only on Compute Engine: the local agent starts without it

        query = "" if etag is None else f"?wait_for_change=true&last_etag={etag}&timeout_sec={WAIT_SECONDS}"
        req = urllib.request.Request(self.base + path + query, headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(req, timeout=WAIT_SECONDS + 10) as resp:
                return resp.status, resp.read().decode(), resp.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            return exc.code, "", None

    def _watch(self, path: str, handler: Callable[[str], None]) -> None:
        etag: str | None = None
        delay = 0.5
        while not self.stop_event.is_set():
            try:
                status, value, new_etag = self._get(path, etag)
            except Exception:
                status, value, new_etag = 0, "", None
            if self.stop_event.is_set():
                return
            if status == 200:
                delay = 0.5
                if new_etag != etag or etag is None:
                    try:
                        handler(value)
                    except Exception as exc:  # never let the watcher die
                        print(f"nbburst agent: preemption handler failed: {exc}", file=sys.stderr)
                etag = new_etag or etag
                if etag is None:  # a server without ETags: poll
                    self.stop_event.wait(1.0)
            elif status == 404:
                return  # no such key here: nothing to watch
            else:  # 503 while the server restarts, or no route yet: retry
                self.stop_event.wait(delay)
                delay = min(delay * 2, 5.0)


# -- runner side ----------------------------------------------------------------------------------


def listen(fd: int, syncer: Any, channel: Any) -> threading.Thread:
    """In the runner: act on the agent's control messages (``preempt``, ``sync``)."""

    def run() -> None:
        from ... import checkpoint

        buf = b""
        while True:
            try:
                data = os.read(fd, 1024)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                what = line.decode().strip()
                if what == "preempt":
                    deadline = time.monotonic() + budget()
                    for problem in checkpoint.run_preempt_hooks(deadline):
                        print(f"nbburst: {problem}", file=sys.stderr)
                if what in ("preempt", "sync") and syncer is not None:
                    syncer.flush()
                if what in ("preempt", "sync"):
                    try:
                        channel.send({"s": "control-ack", "what": what})
                    except OSError:
                        return

    t = threading.Thread(target=run, name="nbburst-control", daemon=True)
    t.start()
    return t
