"""Run notebook cells in a real kernel with nbclient, for tests."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from traitlets import Type

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _ShellChannel(AsyncZMQSocketChannel):
    """A shell channel that sends through its asyncio socket.

    jupyter_client's Session.send writes an asyncio socket's messages through a blocking shadow of the same
    ZeroMQ socket. That send handles the socket's pending commands, and with them the edge of the socket's
    file descriptor that was to wake the poll awaiting execute_reply; pyzmq, bypassed, never looks again, so
    the reply waits unread until the cell timeout. nbclient sends on the shell channel while it awaits a reply
    whenever a cell draws into an ipywidgets Output (it echoes the widget's state: rich's live display, a
    cell's ``with out:``), so such cells stalled now and then (jupyter/nbclient#312). Sent through the asyncio
    socket, pyzmq checks for a waiting message after each send."""

    def send(self, msg: dict) -> None:
        self.socket.send_multipart(self.session.serialize(msg) + list(msg.get("buffers", [])))


class _KernelClient(AsyncKernelClient):
    shell_channel_class = Type(_ShellChannel)


class KernelManager(AsyncKernelManager):
    """The kernel manager of the tests' notebook runs: its clients never leave a reply unread (_ShellChannel)."""

    client_factory = Type(_KernelClient)


def client(nb: nbformat.NotebookNode, cwd: str | Path, timeout: int = 240, **options: object) -> NotebookClient:
    """An nbclient runner of ``nb`` in a python3 kernel working in ``cwd`` that records errors as outputs."""
    resources = {"metadata": {"path": str(cwd)}}
    return NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        allow_errors=True,
        resources=resources,
        kernel_manager_class=KernelManager,
        **options,
    )


#: How a kernel that could not bind one of its ports ends, before any cell ran: jupyter_client picks free ports by
#: binding to port 0 and letting go, and another process's connection can take one before the kernel binds it
#: (https://github.com/jupyter/jupyter_client/issues/276); a suite that starts many kernels, agents and emulators
#: side by side meets it now and then. The notebook then runs in a new kernel, on new ports.
PORT_TAKEN = "Kernel died before replying to kernel_info"
STARTS = 3


def execute(make: Callable[[], NotebookClient]) -> None:
    """``make().execute()``, again in a new kernel when the kernel died before its first reply (:data:`PORT_TAKEN`)."""
    for start in range(1, STARTS + 1):
        try:
            make().execute()
            return
        except RuntimeError as exc:
            if PORT_TAKEN not in str(exc) or start == STARTS:
                raise


def run_cells(cells: list[str], timeout: int = 240, cwd: str | Path | None = None) -> list[list[dict]]:
    """Execute ``cells`` in a fresh python3 kernel; returns each cell's outputs."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    run(nb, timeout=timeout, cwd=cwd)
    return [cell.outputs for cell in nb.cells]


def run(nb: nbformat.NotebookNode, timeout: int = 240, cwd: str | Path | None = None) -> nbformat.NotebookNode:
    """Execute ``nb`` in a kernel working in ``cwd``, else in a fresh temporary folder: files a cell writes
    (and files a burst cell brings back) never land in the repository."""
    if cwd is None:
        with tempfile.TemporaryDirectory(prefix="nbrun-") as folder:
            return run(nb, timeout, folder)
    execute(lambda: client(nb, cwd, timeout))
    return nb


def stream(outputs: list[dict], name: str = "stdout") -> str:
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == name)


def error(outputs: list[dict]) -> tuple[str, str, str] | None:
    """(ename, evalue, traceback text without colours) of the cell's error, if any."""
    for o in outputs:
        if o["output_type"] == "error":
            return o["ename"], o["evalue"], ANSI.sub("", "\n".join(o["traceback"]))
    return None


def data(outputs: list[dict], kind: str = "display_data") -> list[dict]:
    """The cell's own display outputs (the job view left out: its widget and its static summary)."""
    return [
        o["data"]
        for o in outputs
        if o["output_type"] == kind
        and "application/vnd.jupyter.widget-view+json" not in o["data"]
        and "nbburst" not in o.get("metadata", {})
    ]
