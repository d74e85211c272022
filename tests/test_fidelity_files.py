"""Files of the kernel's working folder under %%burst (docs/fidelity.md, causes 7 and 9): what %%writefile
finds there (Overwriting, -a), files a shell glob matches, files a cell deletes, and the folder's subfolders.
The cells run all plainly in one kernel, then all under %%burst in another, each in a folder made alike."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support.apart import same_apart

from nbburst.protocol import workfiles

CELLS = [
    "%%writefile first.py\ndef first(l):\n    return l[0]",
    "%%writefile -a first.py\n\n\n# This is appended to the file.\ndef test_first():\n    assert first([1, 2, 3]) == 1",
    "%cat first.py",
    "%%writefile first.py\ndef first(l):\n    return l[0] if l else None",
    "%%file -a first.py\n# and once more",
    "!cat first.py",
    "!ls scripts/hello-world*.py",
    "%ls scripts/*.py",
    "!wc -c examples/*.csv",
    "!rm examples/frame_pickle",
    "import os\nos.remove('examples/ex2.csv')",
    "import pandas as pd\npd.DataFrame({'a': [1, 2]}).to_csv('out/tables/a.csv')",
    "!cat out/tables/a.csv",
]
#: After them, in the kernel: what its folder holds.
LOOK = (
    "import os\nfor top, dirs, names in sorted(os.walk('.')):\n"
    "    if '.ipynb_checkpoints' not in top:\n        print(top, sorted(dirs), sorted(names))",
    "print(open('first.py').read())",
)


def _folder(root: Path) -> None:
    (root / "scripts").mkdir()
    (root / "scripts" / "hello-world.py").write_text("print('Hello world!')\n")
    (root / "scripts" / "hello-world-in-swedish.py").write_text("print('Hej världen!')\n")
    (root / "scripts" / "other.txt").write_text("not matched\n")
    (root / "examples").mkdir()
    (root / "examples" / "frame_pickle").write_bytes(b"\x80\x04N.")
    (root / "examples" / "ex1.csv").write_text("a,b\n1,2\n")
    (root / "examples" / "ex2.csv").write_text("a,b\n3,4\n")
    (root / "out" / "tables").mkdir(parents=True)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"])
def test_the_kernels_files_as_the_cell_finds_and_leaves_them(burst_env, tmp_path, session):
    pairs = same_apart(CELLS, tmp_path, LOOK, session, setup=_folder)
    plain = [seen["outputs"] for seen, _ in pairs]
    assert plain[0] == [("stream", "stdout", "Writing first.py\n")]
    assert plain[1] == [("stream", "stdout", "Appending to first.py\n")]
    assert plain[3] == [("stream", "stdout", "Overwriting first.py\n")]
    assert plain[4] == [("stream", "stdout", "Appending to first.py\n")]
    assert "hello-world-in-swedish.py" in plain[6][0][2] and "other.txt" not in plain[6][0][2]
    assert "frame_pickle" not in plain[len(CELLS)][0][2] and "ex2.csv" not in plain[len(CELLS)][0][2]
    assert (tmp_path / "burst" / "out" / "tables" / "a.csv").read_text() == ",a\n0,1\n1,2\n"


def test_the_subfolders_made_on_the_machine_are_bounded(tmp_path):
    for rel in ("data/raw", "data/clean", ".git/objects", "venv2/lib", "nodes/node_modules/x", "a/__pycache__"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "venv2" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "data" / "file.csv").write_text("x\n")
    assert workfiles.subfolders(tmp_path) == ["a", "data", "nodes", "data/clean", "data/raw"]
    for i in range(30):
        (tmp_path / "many" / f"d{i:02}").mkdir(parents=True)
    bounded = workfiles.subfolders(tmp_path, limit=10)
    assert bounded == [
        "a",
        "data",
        "many",
        "nodes",
        "data/clean",
        "data/raw",
        "many/d00",
        "many/d01",
        "many/d02",
        "many/d03",
    ]


def test_the_subfolders_are_read_again_only_once_a_folder_changed(tmp_path, monkeypatch):
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "venv2").mkdir()
    (tmp_path / "venv2" / "pyvenv.cfg").write_text("home = /usr\n")
    settled = time.time_ns() - 60 * 10**9  # changed a minute ago: no change can hide in the mtime's granularity
    for folder in (tmp_path, tmp_path / "data", tmp_path / "data" / "raw", tmp_path / "venv2"):
        os.utime(folder, ns=(settled, settled))
    assert workfiles.subfolders(tmp_path) == ["data", "data/raw"]
    reads: list[str] = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: reads.append(os.fspath(path)) or scandir(path))
    assert workfiles.subfolders(tmp_path) == ["data", "data/raw"] and reads == [], "nothing changed: not read"
    (tmp_path / "data" / "raw" / "2024").mkdir()
    assert workfiles.subfolders(tmp_path) == ["data", "data/raw", "data/raw/2024"] and reads
    (tmp_path / "venv2" / "pyvenv.cfg").unlink()  # no longer an environment
    assert workfiles.subfolders(tmp_path) == ["data", "venv2", "data/raw", "data/raw/2024"]


def test_only_a_file_that_holds_what_was_sent_is_deleted_with_the_cells_copy(burst_env, tmp_path):
    """--files /elsewhere/x.csv lands as x.csv: the cell deleting it deletes no other x.csv of the kernel's folder,
    nor the file it came from; a file named by the cell and deleted there goes, here as there."""
    from support.nbrun import error, run_cells
    from support.pairs import LOAD

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.csv").write_text("sent\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "x.csv").write_text("the kernel's own\n")
    (work / "named.csv").write_text("named\n")
    cell = f"%%burst --files {elsewhere / 'x.csv'}\nimport os\nos.remove('x.csv')\nos.remove('named.csv')"
    outs = run_cells([LOAD, cell], cwd=work)
    assert error(outs[1]) is None, error(outs[1])
    assert (work / "x.csv").read_text() == "the kernel's own\n" and (elsewhere / "x.csv").exists()
    assert not (work / "named.csv").exists()
