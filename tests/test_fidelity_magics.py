"""The IPython shell's own state under %%burst (docs/fidelity.md, cause 13; a module a magic names, cause 4):
magics a cell registers and extensions it loads reach the kernel's shell, and the machine's shell has the
kernel's magics. Each cell runs plainly, then under %%burst, in one real kernel (nbclient, local backend)."""

from __future__ import annotations

import pytest
from support.apart import same_apart
from support.pairs import assert_same, run_pairs
from support.threeways import assert_identical

REGISTERED = [
    "from IPython.core.magic import register_line_magic, register_cell_magic",
    "@register_line_magic\ndef hello(line):\n    print('Salut' if line == 'french' else 'Hello world!')",
    "%hello",
    "%hello french",
    "import pandas as pd\nfrom io import StringIO\n\n@register_cell_magic\ndef csv(line, cell):\n"
    "    return pd.read_csv(StringIO(cell))",
    "%%csv\na,b\n1,2\n3,4",
    "def shout(line):\n    return line.upper()\nget_ipython().register_magic_function(shout, 'line', 'shout')",
    "%shout quiet",
    "from IPython.core.magic import Magics, magics_class, line_magic\n\n@magics_class\nclass Counter(Magics):\n"
    "    count = 0\n    @line_magic\n    def tick(self, line):\n        Counter.count += 1\n"
    "        return Counter.count\n"
    "get_ipython().register_magics(Counter)",
    "%alias_magic hi hello",
    "%hi",
]

EXTENSIONS = [
    "%%writefile csvmagic.py\nimport pandas as pd\nfrom io import StringIO\n\ndef csv(line, cell):\n"
    "    return pd.read_csv(StringIO(cell))\n\ndef load_ipython_extension(ipython):\n"
    "    ipython.register_magic_function(csv, 'cell')",
    "%load_ext csvmagic",
    "%%csv\ncol1,col2\n0,1\n3,4",
    "%load_ext csvmagic",
    "%reload_ext csvmagic",
    "get_ipython().extension_manager.load_extension('csvmagic')",
    "%load_ext storemagic",
    "x = 5\n%store x",  # the store itself is the machine's profile's: %store -r on another machine finds nothing
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_magics_a_cell_registers_are_the_kernels_next(burst_env, tmp_path, session):
    then = ("%hello", "%%csv\nq\n7", "%shout after", "%tick", "%hi french")
    pairs, after = run_pairs(REGISTERED, tmp_path, then, session)
    assert_same(pairs, REGISTERED)
    assert pairs[2][0]["outputs"] == [("stream", "stdout", "Hello world!\n")]
    assert after[0]["outputs"] == [("stream", "stdout", "Hello world!\n")]  # registered in the kernel's shell
    assert after[1]["outputs"][0][0] == "execute_result"
    assert after[2]["outputs"][0][2] == "'AFTER'"
    assert after[4]["outputs"] == [("stream", "stdout", "Salut\n")]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_an_extension_a_cell_loads_is_loaded_in_the_kernel(burst_env, tmp_path, session):
    then = ("%%csv\nq\n7", "%load_ext csvmagic")
    pairs = same_apart(EXTENSIONS, tmp_path, then, session)
    assert pairs[2][0]["outputs"][0][0] == "execute_result"
    assert pairs[3][0]["outputs"] == [
        ("stream", "stdout", "The csvmagic extension is already loaded. To reload it, use:\n  %reload_ext csvmagic\n")
    ]
    assert pairs[-2][1]["outputs"][0][0] == "execute_result"  # %%csv: the extension the machine loaded, here too


@pytest.mark.timeout(600)
@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_the_machines_shell_has_the_kernels_magics(burst_env, tmp_path, session):
    """%lsmagic lists the same magics on the machine (ipykernel's %autosave, storemagic's %store) but nbburst's:
    a machine runs no burst of its own."""
    cells = ["%lsmagic", "%%burst\n%lsmagic", "%%burst\n%autosave 0"]
    pairs, after = run_pairs(["%autosave 0"], tmp_path, tuple(cells), session)
    assert_same(pairs, ["%autosave 0"])
    plain, burst = after[0]["outputs"][0][2], after[1]["outputs"][0][2]
    assert "%autosave" in burst and "%store" in burst and "%connect_info" in burst
    assert plain.replace("  %burst", "").replace("  %%burst", "") == burst
    assert ("stream", "stdout", "Autosave disabled\n") in after[2]["outputs"]  # ipykernel's, imported where called


#: How the shell shows a value: %precision and %pprint in one cell decide how the next cell's Out reads.
SHOWN = [
    "import math\nimport numpy as np\nnested = {'b': list(range(30)), 'a': 1}",
    "%precision 3",
    "math.pi",
    "%pprint",
    "nested",
    "%pprint",
    "%precision %.1e",
    "math.pi, np.float64(1 / 3)",
    "%precision",
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_how_the_shell_shows_a_value_is_the_kernels_wherever_a_cell_ran(burst_env, tmp_path, session):
    then = ("math.pi", "%precision 2", "nested")
    pairs = same_apart(SHOWN, tmp_path, then, session)
    assert pairs[2][0]["outputs"] == [("execute_result", ("text/plain",), "3.142")]
    assert pairs[4][0]["outputs"][0][2].startswith("{'b': [0, 1, 2"), "pretty printing off: one line, unsorted"
    assert pairs[7][0]["outputs"] == [("execute_result", ("text/plain",), "(3.1e+00, 3.3e-01)")]
    assert pairs[9][0]["outputs"] == [("execute_result", ("text/plain",), "3.141592653589793")]  # the default again
    assert pairs[11][1]["outputs"][0][2].startswith("{'b': [0,\n"), "pretty printing on again, in the kernel"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_a_usage_error_a_cell_raises_is_shown_once(burst_env, tmp_path, session):
    """``%config Foo``: IPython writes a ``UsageError`` to stderr where it shows other exceptions' tracebacks; the
    machine keeps it, as it keeps the cell's traceback, and the kernel shows it, once, as it would its own."""
    cells = ["%config Foo\nprint('never')"]
    pairs, _ = run_pairs(cells, tmp_path, session=session)
    assert_same(pairs, cells)
    plain = pairs[0][0]["outputs"]
    assert len(plain) == 1 and plain[0][:2] == ("stream", "stderr") and plain[0][2].count("UsageError") == 1, plain


#: Printers registered by type on the shell's display formatters, and the shell itself bound to a name: the cells
#: run plainly, under %%burst (all but the first) on a new machine each and on a warm session.
PRINTERS = [
    "from fractions import Fraction\nip = get_ipython()\n"
    "ip.display_formatter.formatters['text/html'].for_type(Fraction, lambda f: f'<b>{f}</b>')\n"
    "ip.display_formatter.formatters['text/plain'].for_type_by_name(\n"
    "    'decimal', 'Decimal', lambda d, p, cycle: p.text('D' + str(d)))",
    "Fraction(1, 3)",
    "import decimal\ndecimal.Decimal('1.5')",
    "ip.display_formatter.formatters['text/latex'].for_type(complex, lambda z: f'${z.real}+{z.imag}i$')\n1",
    "2+3j",
    "class Money:\n    def __init__(self, v):\n        self.v = v\n\n"
    "ip.display_formatter.formatters['text/markdown'].for_type(Money, lambda m: f'**{m.v} EUR**')\nMoney(3)",
    "Money(4)",
    "ip.display_formatter.formatters['text/latex'].pop(complex)\n2+3j",
    "ip.user_ns['bound'] = 1j\nbound",
]


def test_printers_registered_by_type_and_the_shell_bound_to_a_name_hold_on_either_side(burst_env, tmp_path):
    """The Out of a type the notebook gave a printer has that printer's form wherever the cell runs, and one a
    cell registers, replaces or pops reaches the kernel's shell (sympy's ``init_printing`` so gives expressions
    their LaTeX); ``ip = get_ipython()`` lands as the machine's own shell (docs/fidelity.md, cause 31)."""
    assert_identical(PRINTERS, set(range(1, len(PRINTERS))), tmp_path)


def test_the_inline_backends_own_figure_printers_stay_out_of_those_that_travel(burst_env, tmp_path):
    """The inline backend's Figure printers (``functools.partial`` of IPython's ``print_figure``) are the shell's
    own: a warm session that draws Figures keeps drawing them as images whatever printers the kernel's shell has
    (``import pylab`` in a first cell, as statsmodels' notebooks do, once left the session's plots as text)."""
    cells = [
        "import numpy as np\nimport pylab\npylab.rc('figure', figsize=(4, 3))",
        "x = np.arange(5.0)",
        "fig, ax = pylab.subplots()\nax.plot(x, x**2)",
        "import matplotlib.pyplot as plt\nplt.plot([2, 1])\nplt.show()",
        "fig = plt.figure()\nplt.plot([1, 3])\nfig",
    ]
    assert_identical(cells, {0, 1, 2, 3, 4}, tmp_path)
