"""Where nbburst finds the uv program, on the notebook's computer and on a job's machine alike.

uv installed with pip (``pip install uv``, the ``test`` and ``emulator`` extras) puts its program in the
environment's ``bin/``, which is on nobody's PATH unless that environment was activated: a notebook server,
a kernel or a test run started by its full path sees no ``uv`` there. So the environment nbburst runs in
comes first (the ``uv`` package's own finder, then the folder of this Python), and the PATH only after it
(a uv installed system-wide, or the one a VM's bootstrap fetched into the folder it put on the PATH).
"""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["uv_program"]


def uv_program() -> str | None:
    """The uv program to run: this environment's, else the PATH's; None when there is none."""
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    beside = os.path.join(os.path.dirname(sys.executable), "uv")
    if os.access(beside, os.X_OK) and os.path.isfile(beside):
        return beside
    return shutil.which("uv")
