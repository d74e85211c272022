"""Every Python the cell starts writes its output a whole line at a time.

The cell's workers (loky, multiprocessing's spawn and forkserver, subprocesses) share the cell's stdout and
stderr pipes. A fresh interpreter writing to a pipe is block-buffered: its 8 KiB writes cut lines anywhere, and
under ``PYTHONUNBUFFERED`` ``print`` writes the text and its newline apart. Either way two workers' text can end
up on one line. A write of up to ``PIPE_BUF`` bytes to a pipe is atomic, so a line written in one ``write`` is
never spliced: this folder, put first on ``PYTHONPATH``, holds a ``sitecustomize`` that makes every such
interpreter line-buffered and then runs the ``sitecustomize`` it hides, if there is one.
"""

from __future__ import annotations

import os

HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def install(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Make the interpreters started from here on (with ``environ``) line-buffered on pipes."""
    parts = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != HOOK_DIR]
    environ["PYTHONPATH"] = os.pathsep.join([HOOK_DIR, *parts])
