"""Names a cell binds that its code does not show stay bound after it, under ``%%burst`` as plainly.

``exec("made = 7")``, ``globals()["also"] = 8``, ``%run script.py``, a notebook function that writes into
``globals()``: the kernel reads from a cell's code the names it binds, and none of these shows one, so they
stayed on the machine and the next cell raised ``NameError``. Compared three ways (plainly; a new machine per
cell; one warm session), as tests/test_fidelity_patterns.py does.
"""

from __future__ import annotations

import pytest
from support.threeways import assert_identical

HELPERS = (
    "SCALE = 1\nCACHE = {}\nCOUNT = 0\n\n\n"
    "def scaled(x):\n    return x * SCALE\n\n\n"
    "def load(key):\n    global COUNT\n    COUNT += 1\n    CACHE[key] = key * 2\n    return CACHE[key]\n"
)
SEE = "print(helpers.scaled(3), helpers.SCALE, helpers.COUNT, helpers.CACHE, cache is helpers.CACHE)"


@pytest.mark.timeout(900)
def test_names_and_module_variables_a_cell_binds_where_its_code_does_not_show_them_come_back(burst_env, tmp_path):
    """``exec``, ``globals()``, a notebook function writing into ``globals()``, ``%run``: what they bind or
    unbind is so in the kernel after the cell. And ``helpers.py`` beside the notebook: a variable the kernel set
    is what its functions read on the machine; one a cell changes there, in place (``CACHE``) or rebound by the
    module's own function (``COUNT``), is so in the kernel after it, its dict still the one the notebook holds
    under another name too."""
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "script.py").write_text("ran = 'script'\ntotal = sum(range(4))\n")
    cells = [
        "gone = 1\nalso_gone = 2\ndef remember(**names):\n    globals().update(names)",
        "exec('made = 7')\nglobals()['also'] = 8\nremember(via_function=[1, 2])\n"
        "exec('del gone')\nglobals().pop('also_gone')\n%run script.py",
        "print(made, also, via_function, 'gone' in globals(), 'also_gone' in globals(), ran, total)",
        "import helpers\nhelpers.SCALE = 10\ncache = helpers.CACHE",
        SEE,  # the kernel's SCALE, on a machine
        "helpers.load(3)",  # on a machine: COUNT rebound, CACHE changed in place
        SEE,  # in the kernel
        "helpers.load(4)\nhelpers.SCALE = 2\ndel helpers.COUNT",  # on a machine again
        "print(helpers.scaled(1), hasattr(helpers, 'COUNT'), helpers.CACHE, cache is helpers.CACHE)",
    ]
    plain = assert_identical(cells, {1, 4, 5, 7}, tmp_path)
    assert plain[2]["stdout"] == "7 8 [1, 2] False False script 6\n", plain[2]
    assert plain[4]["stdout"] == "30 10 0 {} True\n", plain[4]
    assert plain[6]["stdout"] == "30 10 1 {3: 6} True\n", plain[6]
    assert plain[8]["stdout"] == "2 False {3: 6, 4: 8} True\n", plain[8]
