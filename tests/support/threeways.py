"""Cells run three ways in fresh kernels (nbclient): plainly; with ``%%burst`` before the cells named, a new
machine per cell; and the same on one warm session. What every cell prints and shows, and the namespace left at
the end (:mod:`support.fidelity`'s summary), must be the same: the fidelity tests' harness for patterns."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .fidelity import AROUND, MARKER, SUMMARY_CELL, observe
from .nbrun import run_cells

ASPECTS = ("stdout", "out", "mimes", "error")


def observed(cells: list[str], burst: set[int], mode: str, cwd: Path) -> tuple[list[dict], dict]:
    """Each cell's observation (:func:`support.fidelity.observe`) and the namespace summary, ``mode`` being
    plain, burst (a new machine per cell) or session; ``%%burst`` goes before the cells numbered in ``burst``."""
    before, after = AROUND[mode]
    marked = [("%%burst\n" + c if i in burst and mode != "plain" else c) for i, c in enumerate(cells)]
    outputs = run_cells([*before, *marked, *after, SUMMARY_CELL], cwd=cwd)
    seen = [observe({"source": c, "outputs": o}) for c, o in zip(cells, outputs[len(before) :], strict=False)]
    summary = "".join(o.get("text", "") for o in outputs[-1] if o["output_type"] == "stream")
    lines = [line for line in summary.splitlines() if line.startswith(MARKER)]
    assert lines, f"the summary cell printed no namespace ({mode}): {outputs[-1]}"
    return seen, json.loads(lines[0][len(MARKER) :])


def assert_identical(cells: list[str], burst: set[int], tmp_path: Path) -> list[dict]:
    """Run ``cells`` the three ways (each in a folder of its own, a copy of what ``tmp_path`` holds) and
    compare; returns the plain run's observations."""
    runs = {}
    for mode in ("plain", "burst", "session"):
        folder = tmp_path / f"run-{mode}"
        shutil.copytree(tmp_path, folder, ignore=lambda where, names: [n for n in names if n.startswith("run-")])
        runs[mode] = observed(cells, burst, mode, folder)
    for i, cell in enumerate(runs["plain"][0]):
        assert cell["error"] is None, (i, cell)
    return agree(runs, cells)


def agree(runs: dict[str, tuple[list[dict], dict]], cells: list[str]) -> list[dict]:
    """Assert that the burst and session runs saw what the plain run saw, cell by cell, and left its namespace;
    returns the plain run's observations."""
    plain, namespace = runs["plain"]
    for mode in ("burst", "session"):
        seen, space = runs[mode]
        for i, (p, b) in enumerate(zip(plain, seen, strict=True)):
            for aspect in ASPECTS:
                assert b[aspect] == p[aspect], f"{mode}: cell {i} ({cells[i]!r}): {aspect} differs\n{b}\n{p}"
        assert space == namespace, f"{mode}: the namespace differs"
    return plain
