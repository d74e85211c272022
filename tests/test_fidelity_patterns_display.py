"""Patterns every notebook has, found in real notebooks outside the corpus: what the cell shows, the types of
what comes back, and the files it reads, the same under %%burst as plainly.

Each cell runs plainly and then under %%burst in one real kernel (nbclient, local backend), on a new machine
per cell and on a warm session.
"""

from __future__ import annotations

import pytest
from support.apart import same_apart
from support.pairs import assert_same, run_pairs
from support.threeways import assert_identical

from nbburst.client.burst import Burst

pytestmark = pytest.mark.timeout(600)
MODES = pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])

# Classes of installed packages come back as themselves, also when the module their __module__ names is one
# the package imports only on demand (numpy 2's np.recarray says numpy.rec).
SUBCLASSES = [
    "import numpy as np\ndata = np.zeros(3, dtype=[('a', 'i4'), ('b', 'f8')])",
    "data_rec = data.view(np.recarray)\n"
    "masked = np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])\n"
    "matrix = np.asmatrix(np.eye(2))\n"
    "chars = np.char.array(['ab', 'cd'])\n"
    "print(data_rec.a, masked.sum(), matrix.I.sum(), chars.upper())",
]
SUBCLASS_CHECK = (
    "print(type(data_rec) is np.recarray, type(masked) is np.ma.MaskedArray, type(matrix) is np.matrix, "
    "type(chars) is np.char.chararray)\nprint(data_rec.b.sum(), masked.mean(), (matrix @ matrix).sum())"
)


@MODES
def test_numpy_subclasses_come_back_as_their_own_class(burst_env, tmp_path, session):
    pairs, (after,) = run_pairs(SUBCLASSES, tmp_path, then=(SUBCLASS_CHECK,), session=session)
    assert_same(pairs, SUBCLASSES)
    assert after["outputs"] == [("stream", "stdout", "True True True True\n0.0 2.0 2.0\n")]


# An array subclass that keeps attributes on its instances (python-control's NamedSignal keeps its labels so):
# numpy's pickle of a subclass leaves them out, so a cell reading them on the machine raised AttributeError.
LABELLED = (
    "import numpy as np\n"
    "class Labelled(np.ndarray):\n"
    "    def __new__(cls, a, labels=None):\n"
    "        obj = np.asarray(a).view(cls)\n        obj.labels = labels\n        return obj\n"
    "    def __array_finalize__(self, obj):\n"
    "        if obj is not None:\n            self.labels = getattr(obj, 'labels', None)\n"
    "kernels = Labelled([1.0, 2.0], labels=['a', 'b'])"
)


def test_an_array_subclass_keeps_the_attributes_of_its_instances_both_ways(burst_env, tmp_path):
    from support.threeways import assert_identical

    cells = [
        LABELLED,
        "made = Labelled([3.0, 4.0, 5.0], labels=['x', 'y', 'z'])\nprint(kernels.labels, (kernels * 2).labels)",
        "kernels.labels = ['c', 'd']\nmade[0] = 9.0",  # changed in place on a machine: attribute and data
        "print(type(made).__name__, made.labels, made.tolist(), kernels.labels, kernels.tolist())",
    ]
    plain = assert_identical(cells, {1, 2}, tmp_path)
    assert plain[1]["stdout"] == "['a', 'b'] ['a', 'b']\n", plain[1]
    assert plain[3]["stdout"] == "Labelled ['x', 'y', 'z'] [9.0, 4.0, 5.0] ['c', 'd'] [1.0, 2.0]\n", plain[3]


# A file the cell reads is sent with it, whatever way its path is written; one it only read is never taken
# for one it wrote (which would come back over the kernel's copy).
READS = [
    "import pandas as pd\n"
    "a = pd.read_csv('./data/trips.csv')\n"
    "b = pd.read_csv('data//trips.csv')\n"
    "c = open('./notes.txt').read()\n"
    "print(len(a), len(b), c)",
]


@MODES
def test_files_read_by_any_spelling_of_their_path_are_inputs_not_results(burst_env, tmp_path, session):
    folder = tmp_path / "notebook"
    (folder / "data").mkdir(parents=True)
    trips, notes = folder / "data" / "trips.csv", folder / "notes.txt"
    trips.write_text("a,b\n1,2\n3,4\n")
    notes.write_text("hello")
    stamps = {path: path.stat().st_mtime_ns for path in (trips, notes)}
    pairs, (listing,) = run_pairs(READS, folder, then=("import os\nprint(sorted(os.listdir()))",), session=session)
    assert_same(pairs, READS)
    assert pairs[0][1]["outputs"] == [("stream", "stdout", "2 2 hello\n")]
    assert {path: path.stat().st_mtime_ns for path in stamps} == stamps  # nothing came back over them
    assert listing["outputs"] == [("stream", "stdout", "['data', 'notes.txt']\n")]
    assert [job.files() for job in Burst().jobs()] == [{}]  # the machine kept none of them as the cell's


# Teaching material keeps notebooks/ beside data/: a cell reads ../data/x.csv, and finds it on the machine too,
# in a working folder named as the notebook's (the folders the path climbs through keep their names).
CLIMBS = [
    "import os\nimport pandas as pd\n"
    "trips = pd.read_csv('../data/trips.csv')\n"
    "common = open('../../common/notes.txt').read()\n"
    "print(len(trips), common, os.path.basename(os.getcwd()), sorted(os.listdir('..')))",
]


@MODES
def test_files_read_from_folders_above_the_notebook_are_where_the_cell_looks(burst_env, tmp_path, session):
    project = tmp_path / "top" / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "data").mkdir()
    (tmp_path / "top" / "common").mkdir()
    (project / "data" / "trips.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "top" / "common" / "notes.txt").write_text("hello")
    pairs, _ = run_pairs(CLIMBS, project / "notebooks", session=session)
    assert_same(pairs, CLIMBS)
    assert pairs[0][1]["outputs"] == [("stream", "stdout", "2 hello notebooks ['data', 'notebooks']\n")]
    assert [job.files() for job in Burst().jobs()] == [{}]


def test_a_relative_path_lands_where_the_cell_finds_it_and_names_the_folders_it_climbs(tmp_path):
    from nbburst.options import file_destination
    from nbburst.protocol.workfiles import UP_LIMIT, workdir_tail

    assert file_destination("./data//x.csv") == "data/x.csv"
    assert file_destination("../data/./x.csv") == "../data/x.csv"
    assert file_destination("../" * (UP_LIMIT + 1) + "x.csv") == "x.csv"  # too far up: by its name, as before
    assert file_destination(str(tmp_path / "y.csv")) == "y.csv"
    cwd = tmp_path / "a" / "b" / "c"
    assert workdir_tail(cwd, ["x.csv", "data/y.csv"]) == ["c"], "its own name: a cell may read it"
    assert workdir_tail(cwd, ["../x.csv", "../../d/y.csv"]) == ["b", "c"]
    assert workdir_tail(type(cwd)("/top"), ["../../x.csv"]) == ["up1", "top"]


# A Figure drawn in one cell and shown again as a later cell's Out (2-D, 3-D): the Out is the image, as the
# kernel's inline backend draws it, though the machine only unpickles the Figure (it never imports the backend).
FIGURES = [
    "import numpy as np\nimport matplotlib.pyplot as plt\nx = np.linspace(0, 1, 50)\n"
    "fig, ax = plt.subplots()\nax.plot(x, x ** 2);",
    "ax.legend(['a'])\nfig",
    "fig3 = plt.figure()\nax3 = fig3.add_subplot(projection='3d')\nax3.plot(x, x, x);",
    "ax3.view_init(60, 35)\nfig3",
]
FIGURE_OUT = ("execute_result", ("image/png", "text/plain"), "<Figure size 640x480 with 1 Axes>")


@MODES
def test_a_figure_shown_again_as_the_out_is_its_image(burst_env, tmp_path, session):
    pairs, _ = run_pairs(FIGURES, tmp_path, session=session)
    assert_same(pairs, FIGURES)
    assert pairs[1][1]["outputs"] == [FIGURE_OUT]
    assert pairs[3][1]["outputs"] == [FIGURE_OUT]


# The kernel's `%config InlineBackend.figure_formats` holds on the machine, for a Figure shown again as the Out
# and for one a cell draws; a cell that sets it sets it in the kernel too.
SVG = [
    "%config InlineBackend.figure_formats = ['svg']\nimport matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots()\nax.plot([1, 3, 2]);",
    "ax.set_title('again')\nfig",
    "plt.plot([2, 1]);",
]
SVG_BACK = ("%%burst\n%config InlineBackend.figure_formats = ['png']\nplt.plot([1, 2]);", "fig")


@MODES
def test_the_kernels_figure_formats_hold_on_the_machine_and_come_back(burst_env, tmp_path, session):
    pairs, (_, shown) = run_pairs(SVG, tmp_path, then=SVG_BACK, session=session)
    assert_same(pairs, SVG)
    svg = ("image/svg+xml", "text/plain")
    assert [o[:2] for o in pairs[1][1]["outputs"]] == [("execute_result", svg)]
    assert [o[:2] for o in pairs[2][1]["outputs"]] == [("display_data", svg)]
    assert [o[:2] for o in shown["outputs"]] == [("execute_result", ("image/png", "text/plain"))]


# A notebook's first cell sets the figure format before anything imports matplotlib: `%config` only writes the
# shell's configuration then, which the inline backend starts from when a later cell imports pyplot.
CONFIG_FIRST = ["%config InlineBackend.figure_format = 'svg'", "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);"]


@MODES
def test_a_figure_format_configured_before_matplotlib_holds_on_either_side(burst_env, tmp_path, session):
    svg = ("display_data", ("image/svg+xml", "text/plain"))
    for folder in ("kernel", "apart"):
        (tmp_path / folder).mkdir()
    _, drawn = run_pairs(CONFIG_FIRST[:1], tmp_path / "kernel", then=("%%burst\n" + CONFIG_FIRST[1],), session=session)
    assert [o[:2] for o in drawn[0]["outputs"] if o[0] == "display_data"][-1:] == [svg], "the kernel's %config"
    pairs = same_apart(CONFIG_FIRST, tmp_path / "apart", then=("plt.plot([2, 1]);",), session=session)
    assert [o[:2] for o in pairs[1][1]["outputs"]] == [svg], "a %%burst cell's %config, on the next machine"
    assert [o[:2] for o in pairs[2][1]["outputs"]] == [svg], "and in the kernel"


# The one-format alias set again after the sides exchanged their settings, on either side, before matplotlib is
# imported: the backend takes the alias over `figure_formats` when its configuration has both.
FORMAT_AGAIN = [
    "%config InlineBackend.figure_format = 'retina'",
    "%config InlineBackend.figure_format = 'svg'",  # on a machine: the kernel's next figures are SVG
    "print(get_ipython().config.InlineBackend.figure_format)",
    "%config InlineBackend.figure_format = 'retina'",  # on a machine
    "%config InlineBackend.figure_format = 'svg'",  # in the kernel: the next machine's figures are SVG
    "import matplotlib.pyplot as plt\nplt.plot([1, 2]);",
    "plt.plot([2, 1]);",
]


@pytest.mark.timeout(900)
def test_a_figure_format_set_again_on_either_side_holds_on_the_other(burst_env, tmp_path):
    plain = assert_identical(FORMAT_AGAIN, {1, 3, 5}, tmp_path)
    assert plain[2]["stdout"] == "svg\n"
    assert [cell["mimes"] for cell in plain[5:]] == [["image/svg+xml+text/plain"]] * 2, plain[5:]


# A shell line (`!cmd`, `x = !cmd`, %sx, %%bash, an alias such as %cat) names files of the kernel's folder, one a
# burst cell wrote there too: the machine has them; `!` and the aliases leave their exit status in _exit_code.
SHELL = [
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig.savefig('plot.png')\n"
    "plt.close(fig)",
    "!ls plot.png data.txt\nprint(_exit_code)",
    "lines = !cat data.txt\nprint(lines)",
    "%%bash\nwc -l < data.txt",
    "n = %sx wc -l data.txt\nprint(n)",
    "!grep -c --file=patterns.txt data.txt",
    "%cat patterns.txt\nprint(_exit_code)",
]
EXIT_CODE = ("%%burst\n!ls missing.txt 2>/dev/null", "print(_exit_code)")


@MODES
def test_shell_lines_find_the_files_they_name_and_leave_their_exit_code(burst_env, tmp_path, session):
    (tmp_path / "data.txt").write_text("a\nb\nc\n")
    (tmp_path / "patterns.txt").write_text("a\nb\n")  # named only after an option's `=`
    pairs, (_, code) = run_pairs(SHELL, tmp_path, then=EXIT_CODE, session=session)
    assert_same(pairs, SHELL)
    assert pairs[1][1]["outputs"] == [("stream", "stdout", "data.txt  plot.png\r\n0\n")]
    assert pairs[3][1]["outputs"] == [("stream", "stdout", "3\n")]
    assert pairs[5][1]["outputs"] == [("stream", "stdout", "2\r\n")]
    assert code["outputs"] == [("stream", "stdout", "2\n")]  # the burst cell's, not the plain one's 0


def test_the_files_a_cell_wrote_are_named_in_its_job_view_not_in_its_output(burst_env, tmp_path):
    import os
    import subprocess
    import sys

    from support.nbrun import run_cells, stream

    outputs = run_cells(["%load_ext nbburst", "%%burst\nopen('out.txt', 'w').write('x')\nprint('done')"], cwd=tmp_path)
    cell = outputs[1]
    assert stream(cell) == "done\n" and stream(cell, "stderr") == ""  # as a plain cell: nothing of its files
    summaries = [o["data"].get("text/html", "") for o in cell if "nbburst" in o.get("metadata", {})]
    assert any("the cell wrote 1 file(s) in its working folder: out.txt" in s for s in summaries), summaries
    assert (tmp_path / "out.txt").read_text() == "x"
    (job,) = Burst().jobs()
    cli = [sys.executable, "-m", "nbburst", "logs", job.id]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=os.environ)
    assert out.stdout == "done\n" and f"`nbburst download {job.name}`" in out.stderr, out
    assert "the cell wrote 1 file(s) in its working folder: out.txt" in out.stderr
