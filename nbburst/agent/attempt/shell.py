"""A notebook kernel's IPython on the machine, so a cell behaves there as it does in the kernel.

The cell runs through a real ``InteractiveShell``, the way ipykernel runs it: inside a running
event loop (top-level ``await`` works, ``asyncio.run`` fails as in a notebook), with IPython's own
transforms, magics and displayhook (``Out`` is formatted where the cell computes it and a trailing
``;`` silences it), then the ``post_execute`` hooks, where matplotlib's inline backend draws the
cell's figures after ``Out``, as in the notebook.

What ipykernel would send to the notebook goes down the event channel instead, in order with the
printed output: ``display`` (display_data and update_display_data, display ids kept), ``clear``
(clear_output), ``result`` (the execute_result, ``Out``), ``page`` (the pager payload of ``obj?``)
and ``comm`` (the messages of widgets, which the notebook's kernel replays, so ``tqdm.auto`` and
rich's live displays become real widgets in the notebook).

Libraries that ask ``get_ipython()`` see what they see in a kernel: a ``ZMQInteractiveShell`` whose
config has an ``IPKernelApp`` section, with a kernel whose parent request Output widgets capture
under, and the environment ipykernel sets (pager, colours, matplotlib backend).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import importlib
import importlib.abc
import os
import sys
from typing import Any

import comm
from comm.base_comm import BaseComm
from IPython.core import page
from IPython.core.compilerop import CachingCompiler
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.error import UsageError
from IPython.core.getipython import get_ipython
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from traitlets.config import Config

from ...protocol.job import CELL_MSG_ID
from .channel import Channel

#: What ipykernel puts in the environment of a kernel (ipykernel's ``init_environment`` and ``kernelapp``).
KERNEL_ENVIRONMENT = {
    "TERM": "xterm-color",
    "CLICOLOR": "1",
    "FORCE_COLOR": "1",
    "CLICOLOR_FORCE": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
}
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

#: The request the cell answers, as ipykernel's ``get_parent()`` gives it; Output widgets capture under its id.
CELL_REQUEST = {"header": {"msg_id": CELL_MSG_ID, "msg_type": "execute_request"}, "content": {}, "metadata": {}}


class _Publisher(DisplayPublisher):
    """display_data, update_display_data and clear_output go to the notebook, in order with prints."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs) -> None:  # type: ignore[override]
        self._validate_data(data, metadata)
        self.shell.channel.display(data, metadata, transient=transient, update=update)

    def clear_output(self, wait: bool = False) -> None:
        self.shell.channel.send({"s": "clear", "wait": bool(wait)})


class _DisplayHook(DisplayHook):
    """``Out``: sent as the cell's execute_result the moment IPython formats it (no prompt printed)."""

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict, md_dict=None) -> None:
        self.shell.channel.result(format_dict, md_dict)

    def finish_displayhook(self) -> None:
        sys.stdout.flush()
        self._is_active = False


class _Compiler(CachingCompiler):
    """Names the cell's code as the runner does, so its tracebacks point at the cell's own lines."""

    cell_name = "<cell>"

    def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
        return self.cell_name


class _Kernel:
    """What ``get_ipython().kernel`` offers here: the request being executed (Output widgets ask it)."""

    def get_parent(self) -> dict[str, Any]:
        return CELL_REQUEST


class _Comm(BaseComm):
    """What ``comm.create_comm`` makes here: a widget's messages go to the notebook's kernel, which replays them."""

    def __init__(self, channel: Channel, *args: Any, **kwargs: Any):
        self.channel = channel  # before BaseComm's __init__, which opens the comm
        super().__init__(*args, **kwargs)

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:  # type: ignore[override]
        event = {
            "s": "comm",
            "msg_type": msg_type,
            "comm_id": self.comm_id,
            "data": data or {},
            "metadata": metadata or {},
            "buffers": [base64.b64encode(bytes(b)).decode() for b in buffers or []],
        }
        event.update({k: v for k, v in keys.items() if v is not None})
        self.channel.send(event)


class _IpykernelFirst(importlib.abc.MetaPathFinder):
    """Loads ``ipykernel.zmqshell`` just before a module that tells a notebook from a terminal by whether
    it is loaded (tqdm.auto does); not for every cell, as importing it costs about half a second."""

    PROBES = frozenset({"tqdm.autonotebook"})

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name in self.PROBES and "ipykernel.zmqshell" not in sys.modules:
            try:
                importlib.import_module("ipykernel.zmqshell")
            except ImportError:  # no ipykernel here: the library sees a terminal, as it would
                pass


class ZMQInteractiveShell(InteractiveShell):
    """The machine's IPython: named and configured like ipykernel's shell, publishing through the channel."""

    display_pub_class = _Publisher
    displayhook_class = _DisplayHook
    compiler_class = _Compiler
    kernel = _Kernel()

    def init_environment(self) -> None:
        os.environ.update(KERNEL_ENVIRONMENT)
        if not os.environ.get("MPLBACKEND"):
            os.environ["MPLBACKEND"] = INLINE_BACKEND

    def init_virtualenv(self) -> None:
        """A kernel runs in its own environment: no virtualenv detection (as ipykernel)."""

    def init_hooks(self) -> None:
        super().init_hooks()
        self.set_hook("show_in_pager", page.as_hook(self._page), 99)

    def _page(self, strng: Any, start: int = 0, screen_lines: int = 0, pager_cmd: Any = None) -> None:
        """The pager's text goes to the notebook as ipykernel's ``page`` payload."""
        data = strng if isinstance(strng, dict) else {"text/plain": strng}
        self.channel.send({"s": "page", "data": data, "start": max(0, start)})

    def enable_gui(self, gui: str | None = None) -> None:
        """``%matplotlib inline`` needs no event loop; a GUI one needs a screen, which the machine has not."""
        if gui not in (None, "inline"):
            raise UsageError(f"%gui {gui}: a burst machine has no screen; use %matplotlib inline")
        self.active_eventloop = gui

    def get_parent(self) -> dict[str, Any]:
        return CELL_REQUEST

    def set_parent(self, parent: dict[str, Any]) -> None:
        """Outputs always belong to the one cell this machine runs."""

    def __reduce__(self) -> tuple[Any, ...]:
        """A cell's ``ip = get_ipython()`` comes back as the shell where it lands: the kernel's own."""
        return get_ipython, ()

    def _showtraceback(self, etype, evalue, stb) -> None:  # type: ignore[override]
        """The cell's own exception goes back as itself (the runner commits it); any other traceback
        IPython shows (a failing post_execute hook, an Output widget's error) is written to stderr."""
        if self._cells_own(evalue):
            return
        sys.stdout.flush()
        print(self.InteractiveTB.stb2text(stb), file=sys.stderr, flush=True)

    def show_usage_error(self, exc: BaseException) -> None:
        """A ``UsageError`` the cell raised (``%config Foo``) goes back as itself too, and the kernel shows it once,
        as it shows its own; IPython writes one to stderr instead of showing a traceback."""
        if not self._cells_own(exc):
            super().show_usage_error(exc)

    def _cells_own(self, exc: BaseException) -> bool:
        """Whether ``exc`` is what the running cell raised."""
        running = self.displayhook.exec_result
        return running is not None and exc is running.error_in_exec

    def take_input_history(self, count: int | None) -> None:
        """The kernel's ``_i``, ``_ii``, ``_iii``, which came among the inputs of a cell that reads them, stay the
        cell's: IPython shifts them as it stores the cell's input, so they are set where it shifts them from; and
        the cell has the kernel's ``count`` (it stores its input as ``_i<count>``, not over the kernel's ``_i1``)."""
        history, ns = self.history_manager, self.user_ns
        history._i00, history._i, history._ii = ns.get("_i", ""), ns.get("_ii", ""), ns.get("_iii", "")
        if count:
            self.execution_count = count

    def execute_silently(self, code: str) -> None:
        """Run ``code`` as :meth:`execute` does, but silently and out of the history (no ``Out``, no count).
        Transformed as a cell is: the tokenizer compiles its patterns on a process's first cell, and a warm
        parent that runs nothing this way leaves that to every cell's process it forks."""
        transformed = self.transform_cell(code)
        asyncio.run(self.run_cell_async(code, store_history=False, silent=True, transformed_cell=transformed))

    def execute(self, code: str) -> ExecutionResult:
        """Run ``code`` as ipykernel runs a cell: inside a running event loop, awaited when it awaits.

        The loop runs the cell in a task, on a copy of this context: what the cell sets in a context variable
        (numpy's print options and error handling, ``decimal.setcontext``) is taken back into this one after
        it, as it stays in force after a cell in the kernel."""
        ran: list[contextvars.Context] = []
        try:
            return asyncio.run(self._execute(code, ran))
        finally:
            for var, value in ran[0].items() if ran else ():
                if var.get(_UNSET) is not value:
                    var.set(value)

    async def _execute(self, code: str, ran: list[contextvars.Context]) -> ExecutionResult:
        try:
            return await self._execute_here(code)
        finally:
            ran.append(contextvars.copy_context())

    async def _execute_here(self, code: str) -> ExecutionResult:
        try:
            transformed, problem = self.transform_cell(code), None
        except Exception:
            transformed, problem = code, sys.exc_info()
        if self.should_run_async(code, transformed_cell=transformed, preprocessing_exc_tuple=problem):
            return await self.run_cell_async(
                code, store_history=True, transformed_cell=transformed, preprocessing_exc_tuple=problem
            )
        return self.run_cell(code, store_history=True)


_UNSET = object()  # a context variable with no value here


def _probe_first() -> None:
    if not any(isinstance(finder, _IpykernelFirst) for finder in sys.meta_path):  # a warm parent's is inherited
        sys.meta_path.insert(0, _IpykernelFirst())


def _make(ns: dict[str, Any]) -> ZMQInteractiveShell:
    config = Config({"IPKernelApp": {}, "HistoryManager": {"enabled": False}})
    return ZMQInteractiveShell.instance(config=config, user_ns=ns)


def make_ahead(ns: dict[str, Any]) -> None:
    """In a session's warm parent: make the shell every cell's process starts from (a copy of it, by the
    fork), over the fresh namespace ``ns``, and run nothing once in it, silently, so that what IPython sets
    up on a first cell is done once. No cell ever runs in the parent's own. The modules the parent imports
    after this see ``get_ipython()`` as a cell's would."""
    import IPython.core.logger  # noqa: F401 (what a first cell that keeps its history imports: here, once)

    _probe_first()
    shell = _make(ns)
    shell.execute_silently("pass")
    shell.builtin_trap.__enter__()  # what the parent imports from now on sees the kernel a cell's process sees


def start(ns: dict[str, Any], channel: Channel, cell_name: str) -> ZMQInteractiveShell:
    """Make this process's IPython over ``ns`` (the cell's namespace, filled later) before anything
    imports matplotlib or asks ``get_ipython()``; widgets created from now on publish through ``channel``.
    In a session's cell, the shell the warm parent made ahead (:func:`make_ahead`) is taken over instead,
    with its own fresh namespace: the cell's namespace is the returned shell's ``user_ns``."""
    comm.create_comm = functools.partial(_Comm, channel)
    _probe_first()
    shell = ZMQInteractiveShell.instance() if ZMQInteractiveShell.initialized() else _make(ns)
    shell.channel = channel
    shell.builtin_trap.__enter__()  # get_ipython() as a builtin from now on: imports before the cell see a kernel
    shell.compile.cell_name = cell_name
    return shell
