"""A %%burst cell that does not compile fails exactly as the same cell fails in the kernel (docs/fidelity.md,
cause 14): the same exception type, message, cell name and line, shown with no traceback, and nothing is
launched. Each cell runs plainly, then under %%burst, in one real kernel (nbclient, local backend)."""

from __future__ import annotations

import re

import pytest
from support import jobs_in
from support.nbrun import error, run_cells
from support.pairs import LOAD, SESSION

BAD = [
    "for i in range(3):\nprint(i)",  # IndentationError: expected an indented block
    "if True:\n        x = 1\n    y = 2",  # IndentationError: unindent does not match
    "x = 1\nreturn x",  # SyntaxError found when compiling, not parsing
    "for i in range(3):\n    pass\nyield i",
    "print('a'\n",  # the cell ends with a newline
    "x = (1,\n%time y = 2",  # a magic inside: the cell transformed as the kernel transforms it
    "def f():\n\treturn 1\n        return 2",  # TabError
    "await = 3",
]


def _shown(outputs: list[dict]) -> tuple[str, str, str] | None:
    """The error as shown, the prompt's number left out (the plain cell and the %%burst one have their own)."""
    found = error(outputs)
    return found and (found[0], found[1], re.sub(r"In\[\d+\]", "In[n]", found[2]))


@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_a_cell_that_does_not_compile_fails_as_in_the_kernel(burst_env, tmp_path, session):
    cells = [LOAD, SESSION if session else "pass"]
    for cell in BAD:
        cells += [cell, "%%burst\n" + cell]
    cells += [BAD[0], "%%burst --cores 1\n" + BAD[0]]  # with options
    outs = run_cells([*cells, "%burst session stop" if session else "pass"], cwd=tmp_path)
    for i, cell in enumerate([*BAD, BAD[0]]):
        plain, burst = _shown(outs[2 + 2 * i]), _shown(outs[3 + 2 * i])
        assert plain is not None and plain[0] in ("SyntaxError", "IndentationError", "TabError"), cell
        assert burst == plain, f"cell {cell!r}:\n plain {plain}\n burst {burst}"
        assert "Traceback" not in burst[2]
    assert jobs_in(burst_env) == []  # refused before launch


def test_the_magic_called_directly_still_refuses_a_cell_that_does_not_compile(burst_env, tmp_path):
    outs = run_cells([LOAD, "get_ipython().run_cell_magic('burst', '', 'x = 1\\nreturn x')"], cwd=tmp_path)
    ename, evalue, _ = error(outs[1])
    assert ename == "CellSyntaxError" and "'return' outside function" in evalue
    assert jobs_in(burst_env) == []
