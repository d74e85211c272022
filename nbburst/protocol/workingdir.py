"""The notebook's working directory, as process state carried both ways, and paths said as the kernel says them.

``os.chdir("data")`` or ``%cd ..`` in one cell, ``pd.read_csv("x.csv")`` in the next: in the kernel the next
cell runs in the new folder. A ``%%burst`` cell starts in its machine's working folder, which stands for the
kernel's (:mod:`.workfiles`: the files the cell names are staged there, and the folders above it as far as the
cell's paths climb). What travels is the kernel's working directory; what comes back is where the cell left the
machine's, said as the kernel's: a folder in or above the machine's working folder as the same place in or
above the kernel's. A folder further away (``os.chdir("/tmp")``) is the machine's own and comes back as it is.
The shell's directory stack (``%pushd``, ``%popd``) travels with it, and other state that names folders
(:mod:`.syspath`) in the kernel's terms too.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .job import ENV_ATTEMPT
from .workfiles import UP_LIMIT, levels_up

#: On a machine, once the kernel's directory arrived: (the kernel's directory, the machine's working folder that
#: stands for it).
_standing: tuple[str, str] | None = None


def _moved(path: str, source: str, target: str, climb: int) -> str:
    """``path``, a place in ``source`` or up to ``climb`` folders above it, as the same place relative to
    ``target``; any other path as it is."""
    if not os.path.isabs(path):
        return path
    rel = os.path.relpath(path, source)
    if levels_up(rel.replace(os.sep, "/")) > climb:
        return path
    return os.path.normpath(os.path.join(target, rel))


def as_kernel(path: str) -> str:
    """A path of this side as the kernel names it (in the kernel: itself). A folder up to
    :data:`~.workfiles.UP_LIMIT` above the machine's working folder is the kernel's (``%cd ..``): the machine's
    own folders lie further up (its working folder is deep in the agent's)."""
    return path if _standing is None else _moved(path, _standing[1], _standing[0], UP_LIMIT)


def as_here(path: str) -> str:
    """A path the kernel names, as this side names it (in the kernel: itself): one in the kernel's working
    directory, in the machine's working folder; any other as it is (the kernel's folder may lie near the root:
    ``/usr/local/...`` is no place above it)."""
    return path if _standing is None else _moved(path, _standing[0], _standing[1], 0)


def _stack() -> list[str] | None:
    """The shell's directory stack (``%pushd`` pushes the folder it leaves, ``%popd`` goes back to it); None where
    no shell runs."""
    ipython = sys.modules.get("IPython")
    shell = None if ipython is None else ipython.get_ipython()
    return None if shell is None else shell.dir_stack


def current() -> dict[str, Any]:
    """The working directory and the shell's directory stack, as the kernel names them."""
    stack = _stack()
    return {"cwd": as_kernel(os.getcwd()), "stack": [as_kernel(path) for path in stack or ()]}


def apply(value: dict[str, Any]) -> None:
    """In an attempt's process (a machine), the kernel's directory arrives: the working folder the cell starts in
    stands for it. In the kernel, the directory a cell left comes back: the kernel moves there, as the cell did.
    The directory stack is the other side's, in this side's terms."""
    global _standing
    if ENV_ATTEMPT in os.environ:
        _standing = (value["cwd"], os.getcwd())
    elif os.path.normpath(value["cwd"]) != os.getcwd():
        os.chdir(value["cwd"])
    stack = _stack()
    if stack is not None:
        # a folder the kernel left may lie above its working directory, as the cell's may above the machine's
        stack[:] = [path if _standing is None else _moved(path, *_standing, UP_LIMIT) for path in value["stack"]]
