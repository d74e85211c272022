"""A ``%%burst`` cell whose code does not compile fails as the same cell fails in the kernel, before launch.

In the kernel a cell that does not compile raises ``IndentationError`` or ``SyntaxError`` before it runs,
named by the kernel's own name for the cell, shown with no traceback. A ``%%burst`` cell is one call of the
magic, which compiles; an error the magic raised would show the magic's frames. So the cell's body is
compiled as the kernel compiles a cell (:func:`~nbburst.client.cellcode.compile_as_kernel`) while IPython
transforms the cell, before it runs: an error raised there is shown by IPython as a cell's own syntax error.
"""

from __future__ import annotations

from typing import Any

from ..client.cellcode import compile_as_kernel

MAGIC = "%%burst"


class SyntaxCheck:
    """An input transformer of the kernel's shell: checks a ``%%burst`` cell's body, changes no line."""

    #: ``check_complete`` (the notebook asking whether a cell is complete) leaves it out.
    has_side_effects = True

    def __init__(self, shell: Any):
        self.shell = shell

    def __call__(self, lines: list[str]) -> list[str]:
        if len(lines) > 1 and lines[0].split(None, 1)[0] == MAGIC:
            body = "".join(lines[1:])
            # IPython ends a cell with a newline before it transforms it: the body as sent is the request's.
            if body.endswith("\n") and not self._sent().endswith("\n"):
                body = body[:-1]
            compile_as_kernel(self.shell, body)
        return lines

    def _sent(self) -> str:
        """The cell's code as the notebook sent it (in a kernel); '' elsewhere."""
        kernel = getattr(self.shell, "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
        return str(((parent or {}).get("content") or {}).get("code") or "")


def install(shell: Any) -> None:
    """Check ``%%burst`` cells' syntax in ``shell`` (once, however often the extension is loaded)."""
    cleanup = shell.input_transformers_cleanup
    if not any(isinstance(t, SyntaxCheck) for t in cleanup):
        cleanup.append(SyntaxCheck(shell))
