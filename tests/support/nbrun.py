"""Run notebook cells in a real kernel with nbclient, for tests."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
    resources = {"metadata": {"path": str(cwd)}}
    NotebookClient(nb, kernel_name="python3", timeout=timeout, allow_errors=True, resources=resources).execute()
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
