"""The working directory a cell leaves is the next cell's, under ``%%burst`` as plainly.

``os.chdir("data")`` or ``%cd ..`` in one cell, relative paths in the next: in the kernel the next cell runs in
the new folder. A ``%%burst`` cell runs in its machine's working folder, which stands for the kernel's: where
the cell leaves the machine's comes back as the same place of the kernel's, and the next machine starts in the
kernel's. Compared three ways (plainly; a new machine per cell; one warm session), as
tests/test_fidelity_patterns.py does.
"""

from __future__ import annotations

import os

import pytest
from support.threeways import assert_identical

from nbburst.protocol import job, syspath, workingdir

#: Which folder the kernel is in: each has a file of its own (printed in the kernel only: a machine has the files
#: a cell names, and the folders below the kernel's).
STACK = "print(len(get_ipython().dir_stack))"
HERE = "print([name for name in ('root.txt', 'x.csv', 'deep.txt') if os.path.isfile(name)])"


@pytest.mark.timeout(900)
def test_the_folder_a_cell_moves_to_is_the_next_cells_on_either_side(burst_env, tmp_path):
    (tmp_path / "data" / "deeper").mkdir(parents=True)
    (tmp_path / "root.txt").write_text("root\n")
    (tmp_path / "data" / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "data" / "deeper" / "deep.txt").write_text("deep\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper_c.py").write_text("Z = 'c'\n")
    cells = [
        "import os, sys\nwith open('name.txt', 'w') as f:\n    f.write(os.path.basename(os.getcwd()))\ndel f",
        "print(open('name.txt').read() == os.path.basename(os.getcwd()))",  # a machine's folder has the same name
        "os.chdir('data')\nprint(os.path.isdir('deeper'))",  # on a machine
        HERE,  # in the kernel
        "print(os.path.isdir('deeper'), open('x.csv').read())",  # the next machine starts where the kernel is
        "%cd -q deeper\nprint(os.path.isdir('deeper'))",
        HERE,
        "os.chdir('../..')",  # up, past the folder the cell started in
        HERE,
        "sys.path.insert(0, os.path.abspath('lib'))\nos.chdir('data')",  # an entry outside the folder it leaves
        "import helper_c\nprint(helper_c.Z, os.path.relpath(sys.path[0]))\n" + HERE,
        "%pushd -q deeper\n" + STACK,  # the shell's directory stack comes back with the folder
        HERE + "\n" + STACK,
        "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n    %popd\n" + STACK,  # one up
        HERE,
    ]
    plain = assert_identical(cells, {1, 2, 4, 5, 7, 9, 11, 13}, tmp_path)
    assert plain[1]["stdout"] == "True\n", plain[1]
    assert [plain[i]["stdout"] for i in (3, 6, 8)] == ["['x.csv']\n", "['deep.txt']\n", "['root.txt']\n"], plain
    assert plain[10]["stdout"] == "c ../lib\n['x.csv']\n", plain[10]
    assert [plain[i]["stdout"] for i in (12, 13, 14)] == ["['deep.txt']\n1\n", "0\n", "['x.csv']\n"], plain


def test_a_machine_says_its_folders_as_the_kernel_names_them(monkeypatch, tmp_path):
    """In and up to three folders above the working folder: the same place of the kernel's; further: as it is."""
    work = tmp_path / "m" / "n" / "o" / "work" / "job" / "nb"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv(job.ENV_ATTEMPT, "job:1")
    monkeypatch.setattr(workingdir, "_standing", None)
    workingdir.apply({"cwd": "/home/u/proj/nb", "stack": []})
    assert workingdir.current() == {"cwd": "/home/u/proj/nb", "stack": []}
    assert workingdir.as_kernel(str(work / "src")) == "/home/u/proj/nb/src"
    assert workingdir.as_kernel(str(work.parent / "data")) == "/home/u/proj/data"
    assert workingdir.as_kernel("/usr/lib/python3") == "/usr/lib/python3"
    assert workingdir.as_here("/home/u/proj/nb/src") == str(work / "src")
    assert workingdir.as_here("/home/u/proj/data") == "/home/u/proj/data", "not the machine's: not staged there"
    assert workingdir.as_here("/opt/tools") == "/opt/tools" and workingdir.as_here("lib") == "lib"
    os.chdir(work / "..")
    assert workingdir.current()["cwd"] == "/home/u/proj"


def test_a_path_entry_inside_the_kernels_folder_lands_inside_the_machines(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(job.ENV_ATTEMPT, "job:1")
    monkeypatch.setattr(workingdir, "_standing", None)
    monkeypatch.setattr("sys.path", ["/base"])
    monkeypatch.setattr(syspath, "_base", None)
    workingdir.apply({"cwd": "/home/u/nb", "stack": []})
    syspath.apply({"front": ["/home/u/nb/src"], "back": ["/opt/x"]})
    import sys

    assert sys.path == [str(tmp_path / "src"), "/base", "/opt/x"]
    assert syspath.current() == {"front": ["/home/u/nb/src"], "back": ["/opt/x"]}
