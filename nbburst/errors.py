"""Exceptions users see. Each message says what is wrong and how to fix it."""

from __future__ import annotations


class BurstError(Exception):
    """Base class of nbburst's own errors."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows our errors as one clear line: the message is the whole story."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class UsageError(BurstError, ValueError):
    """An option or argument is wrong; nothing was launched."""


class NotPermitted(BurstError):
    """The cloud refused a machine's launch or start to this account (403): no retry gets past it."""


class CaptureError(BurstError):
    """A value the cell needs cannot be sent to the machine; nothing was launched."""


class CellSyntaxError(CaptureError):
    """The cell is not valid Python as a notebook cell compiles it; nothing was launched."""

    def __init__(self, msg: str, where: str, lineno: int, text: str, offset: int = 0):
        super().__init__(f"{msg} ({where}, line {lineno})")
        self.msg, self.where, self.lineno, self.text, self.offset = msg, where, lineno, text, offset

    def _render_traceback_(self) -> list[str]:
        """As the kernel shows a cell's syntax error: where, the line, a caret under the fault, the message."""
        shown = self.text.lstrip()
        column = max(0, self.offset - 1 - (len(self.text) - len(shown)))
        return [
            f"  \x1b[0;36m{self.where}, line {self.lineno}\x1b[0m\n    {shown}\n    {' ' * column}^\n"
            f"\x1b[0;31mSyntaxError\x1b[0m: {self.msg}"
        ]


class UnsupportedOption(UsageError):
    """The chosen backend cannot honour an option; nothing was launched."""


class JobNotFound(BurstError, LookupError):
    """No job with that id or name in the Store."""


class JobFailed(BurstError):
    """The job ended without a result (timeout, crash, lost machine, cancellation)."""

    def __init__(self, message: str, state: str = "FAILED"):
        super().__init__(message)
        self.state = state


class JobCancelled(JobFailed):
    def __init__(self, message: str):
        super().__init__(message, "CANCELLED")


class RemoteError(BurstError):
    """Stands in for a remote exception that could not be sent back as itself."""

    def __init__(self, type_name: str, message: str, remote_traceback: str = ""):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.remote_traceback = remote_traceback

    def _render_traceback_(self) -> list[str]:
        return [*self.remote_traceback.splitlines(), *super()._render_traceback_()]
