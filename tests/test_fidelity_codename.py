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
from test_fidelity_patterns import observed


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
