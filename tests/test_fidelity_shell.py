"""A %%burst cell shows what the same cell shows in the kernel: each cell runs plainly, then under
%%burst, in one real kernel (nbclient, local backend), and the two are compared."""

from __future__ import annotations

import re

import pytest
from support.pairs import LOAD, WIDGET, assert_same, run_pairs

from nbburst.errors import UsageError
from nbburst.options import Options

KERNEL_LIKE = [
    "ip = get_ipython()\nprint(type(ip).__name__, 'IPKernelApp' in ip.config)",
    "import os\nprint(os.environ['MPLBACKEND'], os.environ['PAGER'])",
    "from tqdm.auto import tqdm\nfor i in tqdm(range(3)):\n    pass",
    "from rich.console import Console\nfrom rich.table import Table\n"
    "table = Table('name', 'score')\ntable.add_row('a', '1')\nConsole().print(table)",
    "from rich.progress import track\nfor i in track(range(3)):\n    pass",
    "import pandas as pd\npd.DataFrame({f'column_{i}': range(3) for i in range(40)})",
    "%matplotlib inline\n%config InlineBackend.figure_format = 'svg'\n%reload_ext autoreload\n"
    "import matplotlib.pyplot as plt\nplt.plot([1, 2]);",
    "len?",
    "help(len)",
]

KERNEL_MAGICS = [
    # what a magic's code assigns comes back: z and captured hold the machine's pid, not the kernel's
    "%%time\nimport os\nz = os.getpid()\nz > 0",
    "%%capture captured\nprint(os.getpid())",
    "print(z == os.getpid(), int(captured.stdout) == os.getpid())",
    "%%html\n<b>bold</b>",
    "%%javascript\nconsole.log(1)",
    # %%writefile finds what the plain cell before it wrote, as a second run in the kernel does (Overwriting):
    # tests/test_fidelity_files.py runs it apart
    "from IPython.display import display, clear_output\nh = display('a', display_id=True)\nh.update('b')\n"
    "print('gone'); clear_output(wait=True); print('kept')",
    "import ipywidgets\nout = ipywidgets.Output()\ndisplay(out)\nwith out:\n    print('inside')",
]


@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_the_machine_is_a_kernel_to_libraries_and_magics(burst_env, tmp_path, session):
    pairs, _ = run_pairs(KERNEL_LIKE, tmp_path, session=session)
    assert_same(pairs, KERNEL_LIKE)
    assert pairs[0][0]["outputs"] == [("stream", "stdout", "ZMQInteractiveShell True\n")]
    widgets = [kind for kind, mimes, _ in pairs[2][1]["outputs"] if WIDGET in mimes]
    assert widgets == ["display_data"]  # tqdm.auto: a progress widget, no text frames on stderr
    assert pairs[7][0]["pages"] and pairs[7][0]["pages"] == pairs[7][1]["pages"]  # len?: the pager


@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_cell_magics_and_displays_behave_as_in_the_kernel(burst_env, tmp_path, session):
    pairs, _ = run_pairs(KERNEL_MAGICS, tmp_path, session=session)
    assert_same(pairs, KERNEL_MAGICS)


ORDER = [
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.ylabel('Age')",
    "plt.plot([1, 2]);",
    "value = 5\nvalue;",
    "print('before')\nplt.plot([1]); plt.show()\nprint('after')\n'last'",
    "from IPython.display import display\nprint('a'); display('b'); print('c')",
    "import asyncio\nawait asyncio.sleep(0)\nanswer = 42\nanswer",
    "asyncio.run(asyncio.sleep(0))",
]


@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_out_and_figures_come_in_the_kernels_order(burst_env, tmp_path, session):
    then = ("%%burst\nimport os\nos.getpid()", "print(_ != os.getpid(), _ is Out[max(Out)], answer)")
    pairs, (_, underscore) = run_pairs(ORDER, tmp_path, then, session)
    assert_same(pairs, ORDER)
    plain, _ = pairs[0]
    assert [o[0] for o in plain["outputs"]] == ["execute_result", "display_data"]
    assert plain["outputs"][0][2] == "Text(0, 0.5, 'Age')"
    assert underscore["outputs"] == [("stream", "stdout", "True True 42\n")]  # `_` and Out[n] as the kernel sets them


def test_bad_cells_are_refused_before_launch(burst_env, tmp_path):
    from support import jobs_in
    from support.nbrun import error, run_cells

    outs = run_cells(
        [
            LOAD,
            "%%burst\nx = 1\nreturn x",
            "%%burst\nfor i in range(3):\n    pass\nyield i",
            "%%burst --out nothere\na = 1",
            "%%burst --memory nan\na = 1",
        ],
        cwd=tmp_path,
    )
    ename, evalue, tb = error(outs[1])
    # the kernel's own error for the cell's code, its lines counted as the kernel counts them
    assert ename == "SyntaxError" and "'return' outside function" in evalue and "line 2" in evalue
    assert "return x" in tb and "SyntaxError" in tb and "Traceback" not in tb
    ename, evalue, _ = error(outs[2])
    assert "'yield' outside function" in evalue and "line 3" in evalue
    assert error(outs[3])[1] == "--out: the cell never assigns 'nothere'; it assigns a. Nothing was launched."
    assert "--memory: must be a positive number" in error(outs[4])[1]
    assert jobs_in(burst_env) == []


@pytest.mark.parametrize("memory", [float("nan"), float("inf"), 0.0])
def test_memory_must_be_a_finite_positive_number(memory):
    with pytest.raises(UsageError, match="--memory"):
        Options.build(memory=memory)


def test_files_that_would_land_in_one_place_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "data.csv", tmp_path / "b" / "data.csv"
    with pytest.raises(UsageError, match=re.escape(f"{str(first)!r} and {str(second)!r} would both be 'data.csv'")):
        Options.build(files=[str(first), str(second)])
    assert Options.build(files=["a/data.csv", "b/data.csv"]).files == ["a/data.csv", "b/data.csv"]
