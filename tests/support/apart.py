"""Cells that change what the next one finds (a file written, an extension loaded): all of them plainly in one
kernel, then all under %%burst in another, each in a folder of its own made alike, and what each cell shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .pairs import assert_same, run_pairs


def same_apart(
    cells: list[str],
    cwd: Path,
    then: tuple[str, ...] = (),
    session: bool = False,
    setup: Callable[[Path], None] | None = None,
) -> list[tuple[dict, dict]]:
    """(plain, burst) observations of each cell, then of the cells ``then`` run as they are after them, once each
    is checked to show under %%burst what it shows plainly; ``setup(folder)`` fills each kernel's folder first."""
    folders = cwd / "plain", cwd / "burst"
    for folder in folders:
        folder.mkdir()
        if setup is not None:
            setup(folder)
    _, plain = run_pairs([], folders[0], (*cells, *then))
    _, burst = run_pairs([], folders[1], (*("%%burst\n" + c for c in cells), *then), session)
    pairs = list(zip(plain, burst, strict=True))
    assert_same(pairs, [*cells, *then])
    return pairs
