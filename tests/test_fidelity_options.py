"""A library's options set by a call in one cell are in force in the next, under ``%%burst`` as plainly.

``np.set_printoptions(precision=4, suppress=True)`` in a notebook's first cell (pydata-book's chapters),
``xr.set_options(display_style=...)`` (xarray's weather-data example), ``np.seterr(...)``,
``decimal.getcontext().prec = 50``: process state held by the library, not by a variable of the notebook.
Set on the machine, they must reach the kernel (which renders the cell's ``Out`` with them) and the next
machine; set in the kernel, they must reach the machine. Compared three ways (plainly; a new machine per
cell; one warm session), as tests/test_fidelity_patterns.py does.
"""

from __future__ import annotations

import pytest
from test_fidelity_patterns import assert_identical

#: Prints what each option decides: an array's digits, a division by zero, the attributes an operation keeps,
#: a Decimal's digits; then shows a DataArray as the cell's ``Out`` (text only, or HTML too).
USE = (
    "print(np.array([1 / 3, 2e-9]), decimal.Decimal(1) / 7)\n"
    "try:\n    print(np.array([1.0]) / 0)\nexcept FloatingPointError as exc:\n    print('raised', exc)\n"
    "print((xr.DataArray([1, 2], dims='x', attrs={'unit': 'm'}) * 2).attrs)\n"
    "xr.DataArray([1, 2], dims='x')"
)


@pytest.mark.timeout(900)
def test_options_a_cell_sets_are_in_force_in_the_next_cell_on_either_side(burst_env, tmp_path):
    cells = [
        "import decimal\nimport numpy as np\nimport xarray as xr",
        "np.set_printoptions(precision=2, suppress=True)\nnp.seterr(divide='raise')\n"
        "xr.set_options(display_style='text', keep_attrs=True)\ndecimal.getcontext().prec = 6",
        USE,  # on the next machine
        USE,  # in the kernel
        "np.set_printoptions(precision=3, suppress=False)\nnp.seterr(divide='ignore')\n"
        "xr.set_options(display_style='html', keep_attrs=False)\ndecimal.setcontext(decimal.Context(prec=4))",
        USE,  # the kernel's, on a machine
        "with np.printoptions(precision=1), decimal.localcontext(prec=2), xr.set_options(keep_attrs=True):\n"
        "    print(np.array([1 / 3]), decimal.Decimal(1) / 7)",
        USE,  # a with block changes nothing after it
    ]
    plain = assert_identical(cells, {1, 2, 5, 6, 7}, tmp_path)
    assert plain[2]["stdout"].startswith("[0.33 0.  ] 0.142857\nraised divide by zero"), plain[2]
    assert "{'unit': 'm'}" in plain[2]["stdout"] and "text/html" not in plain[2]["mimes"], plain[2]
    assert plain[5]["stdout"].startswith("[3.333e-01 2.000e-09] 0.1429\n[inf]\n{}"), plain[5]
    assert "text/html" in plain[5]["mimes"] and plain[7] == plain[5], (plain[5], plain[7])
