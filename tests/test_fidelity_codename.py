"""A ``%%burst`` cell's code has the name the kernel gives it run plainly, on the machine and back in the kernel.

ipykernel names a cell's code ``/tmp/ipykernel_<pid>/<hash>.py`` (after the cell's text): a warning the cell
raises says so with the line (xarray's weather-data example warns from its second cell), and a function the
cell defines keeps that name, so ``inspect.getsource`` and a later cell's traceback through it show its lines.
Compared three ways (plainly; a new machine per cell; one warm session), as tests/test_fidelity_patterns.py
does, stderr included (the kernel's process id in it aside, as the harness normalises it).
"""

from __future__ import annotations

import re

import pytest
from support.threeways import observed


@pytest.mark.timeout(900)
def test_warnings_and_sources_name_the_cells_code_as_the_kernel_does(burst_env, tmp_path):
    cells = [
        "import inspect, warnings",
        "def f(x):\n    return 1 / x\nwarnings.warn('careful')\nprint(f.__code__.co_filename.endswith('.py'))",
        "print(inspect.getsource(f))",
    ]
    runs = {}
    for mode in ("plain", "burst", "session"):
        (tmp_path / mode).mkdir()
        runs[mode] = observed(cells, {1}, mode, tmp_path / mode)[0]
    plain = runs["plain"]
    assert re.fullmatch(r"/tmp/ipykernel_<pid>/\d+\.py:3: UserWarning: careful\n.*", plain[1]["stderr"], re.S), plain[1]
    assert plain[2]["stdout"] == "def f(x):\n    return 1 / x\n\n", plain[2]
    for mode in ("burst", "session"):
        for i, (p, b) in enumerate(zip(plain, runs[mode], strict=True)):
            assert (b["stdout"], b["stderr"], b["error"]) == (p["stdout"], p["stderr"], p["error"]), (mode, i, b, p)


@pytest.mark.timeout(900)
def test_a_later_machine_reads_the_source_of_what_earlier_cells_defined(burst_env, tmp_path):
    """A function, a class and its methods defined by one cell, plainly or under ``%%burst``: their lines are
    on the machine of a later cell that uses them, as they are in the kernel."""
    from support.threeways import assert_identical

    cells = [
        "import inspect, functools",
        "def f(x):\n    return 1 / x",
        "class Box:\n    def size(self):\n        return 3\n    @staticmethod\n    def kind():\n        return 'box'",
        "print(inspect.getsource(f), inspect.getsource(Box.size), inspect.getsource(Box().kind))",
        "g = functools.partial(f, 2)\nb = Box()",
        "print(inspect.getsource(g.func), inspect.getsource(b.size))",
    ]
    plain = assert_identical(cells, {2, 3, 5}, tmp_path)
    assert plain[3]["stdout"].startswith("def f(x):\n    return 1 / x\n     def size(self):"), plain[3]
