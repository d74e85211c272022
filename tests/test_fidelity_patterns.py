"""Patterns any notebook may have, identical under ``%%burst``: each as its smallest cells, in every form.

Each test runs its cells three ways in fresh kernels (nbclient): plainly; with ``%%burst`` before the
cells it names, a new machine per cell; and the same on one warm session. What every cell prints and
shows (stdout, its Out, the MIME types of its displays, its error) must be the same, and so must the
namespace left at the end (the fidelity harness's summary, tests/support/fidelity.py). Aliasing is part
of what the cells print (``is``, ``np.shares_memory``), both in the kernel and on the machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.fidelity import AROUND, MARKER, SUMMARY_CELL, observe
from support.nbrun import run_cells

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
    """Run ``cells`` the three ways (each in a folder of its own, a copy of ``tmp_path``'s files) and
    compare; returns the plain run's observations."""
    runs = {}
    for mode in ("plain", "burst", "session"):
        folder = tmp_path / f"run-{mode}"
        folder.mkdir()
        for path in tmp_path.iterdir():
            if path.is_file():
                (folder / path.name).write_bytes(path.read_bytes())
        runs[mode] = observed(cells, burst, mode, folder)
    plain, namespace = runs["plain"]
    for i, cell in enumerate(plain):
        assert cell["error"] is None, (i, cell)
    for mode in ("burst", "session"):
        seen, space = runs[mode]
        for i, (p, b) in enumerate(zip(plain, seen, strict=True)):
            for aspect in ASPECTS:
                assert b[aspect] == p[aspect], f"{mode}: cell {i} ({cells[i]!r}): {aspect} differs\n{b}\n{p}"
        assert space == namespace, f"{mode}: the namespace differs"
    return plain


def test_state_a_cell_changes_through_a_notebook_functions_globals_comes_back(burst_env, tmp_path):
    """An RNG, a cache, a list, a fitted model, a counter rebound by ``global``: reached by a function,
    a function it calls, a method of a notebook class, a lambda, a closure; in place (other names keep
    seeing the same object)."""
    setup = (
        "import numpy as np\n"
        "from sklearn.linear_model import LinearRegression\n"
        "rng = np.random.RandomState(0)\n"
        "keeps = {'rng': rng}\n"
        "def noisy(n):\n    return rng.randn(n)\n"
        "def deeper(n):\n    return noisy(n) * 2\n"
        "cache, log = {}, []\n"
        "def remember(k):\n    cache[k] = k * 2\n    log.append(k)\n    return cache[k]\n"
        "class Sampler:\n    def draw(self):\n        return rng.randint(0, 100, 3)\n"
        "sampler = Sampler()\n"
        "draw = lambda: rng.rand()\n"
        "def make():\n    def inner():\n        return rng.randint(0, 9)\n    return inner\n"
        "closed = make()\n"
        "model = LinearRegression()\n"
        "def fit():\n    model.fit(np.arange(6.0).reshape(-1, 1), np.arange(6.0) * 3)\n"
        "counter = 0\n"
        "def bump():\n    global counter, gone\n    counter += 1\n    gone = counter\n"
        "def drop():\n    global gone\n    del gone\n"
        "def both():\n    bump()\n    drop()"
    )
    check = (
        "print(rng.randn(2).round(3), keeps['rng'] is rng, cache, log, model.coef_ if hasattr(model, 'coef_') else '-')"
    )
    cells = [
        setup,
        "y = noisy(5)",
        check,
        "z = deeper(2)\nr = remember(4)",
        check,
        "s = sampler.draw()\nd = draw()\nc = closed()",
        check + "\nprint(s, round(d, 4), c)",
        "fit()\nbump()\nbump()",
        check + "\nprint(counter, gone)",
        "both()",
        "print(counter, 'gone' in dir())",
        "y2 = noisy(3)\n" + check,
    ]
    assert_identical(cells, {1, 3, 5, 7, 9, 11}, tmp_path)


def test_names_notebook_functions_rebind_through_global_are_the_cells_outputs():
    from nbburst.client.capture import capture

    ns: dict = {"__name__": "__main__"}
    exec(
        "counter = 0\n"
        "def bump():\n    global counter\n    counter += 1\n"
        "def drop():\n    global gone\n    del gone\n"
        "class Box:\n    def reset(self):\n        bump()\n        drop()\n"
        "box = Box()",
        ns,
    )
    cap = capture("box.reset()\nx = 1", ns)
    assert cap.outputs == ["x", "counter"] and cap.deletes == ["gone"]
    assert capture("x = 1", ns).outputs == ["x"]
    assert capture("box.reset()", ns, out=["counter"]).outputs == ["counter"]  # --out may name it
