"""A cell's history and failures, identical under ``%%burst``: each pattern as its smallest cells, in every form.

A cell that raises keeps, as in the kernel, what it bound and changed before the exception (names, inputs
changed in place, deletions, files); the kernel's output history (``_``, ``__``, ``_N``, ``Out``, ``_iN``,
``In``) is what a cell on the machine reads. Each test runs its cells three ways in fresh kernels (nbclient):
plainly; with ``%%burst`` before the cells it names, a new machine per cell; and on one warm session. What
every cell prints and shows (stdout, its Out, the MIME types of its displays, its error) must be the same,
and so must the namespace left at the end (tests/support/fidelity.py's summary).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.threeways import agree, observed

#: What each mode runs before the test's own cells, after its own (AROUND): two cells in all in every mode, so
#: that the cells' execution counts (``_3``, ``Out[3]``, ``_i3``) are the same, the first the same (``_i1``).
PADDING = {"plain": ["%load_ext nbburst", "pass"], "burst": ["pass"], "session": []}


def compare(cells: list[str], burst: set[int], tmp_path: Path) -> list[dict]:
    """Run ``cells`` the three ways, each in a copy of ``tmp_path``, with the same execution counts; assert the
    same observations (errors included) and namespace; returns the plain run's observations."""
    runs = {}
    for mode in ("plain", "burst", "session"):
        folder = tmp_path / f"run-{mode}"
        shutil.copytree(tmp_path, folder, ignore=lambda where, names: [n for n in names if n.startswith("run-")])
        padding = PADDING[mode]
        seen, space = observed([*padding, *cells], {i + len(padding) for i in burst}, mode, folder)
        runs[mode] = seen[len(padding) :], space
    return agree(runs, cells)


@pytest.mark.timeout(900)
def test_a_cell_that_raises_keeps_what_it_did_before(burst_env, tmp_path):
    """Names bound, inputs changed in place, names deleted, functions defined, files written, process state set,
    before the exception; in a loop halfway through; the same exception, raised in the kernel as before."""
    cells = [
        "import pandas as pd\nimport matplotlib\nmapping = {'a': 'red', 'b': 'blue'}\nitems = [1]\ngone = 1",
        "map_series = pd.Series(mapping)\nmap_series\nitems.append(2)\ndel gone\n"
        "def helper():\n    return len(items)\n"
        "from pathlib import Path\nPath('made.txt').write_text('made')\n"
        "matplotlib.rcParams['lines.linewidth'] = 3.5\n"
        "pd.DataFrame({'a': [1]}).groupby(map_series, axis='rows', nonsense=1)",
        "print(map_series.tolist(), items, 'gone' in dir(), helper(), open('made.txt').read(),\n"
        "      matplotlib.rcParams['lines.linewidth'])",
        "total = 0\nfor i in range(5):\n    total += i\n    if i == 3:\n        raise ValueError(total)",
        "print(total, i)",
        "1 / 0\nnever = 1",
        "print('never' in dir())",
        "items.append(3)\nitems.no_such_method()",
        "print(items)",
    ]
    plain = compare(cells, {1, 3, 5, 7}, tmp_path)
    assert [c["error"]["ename"] if c["error"] else None for c in plain] == [
        None,
        "TypeError",
        None,
        "ValueError",
        None,
        "ZeroDivisionError",
        None,
        "AttributeError",
        None,
    ]
    assert plain[2]["stdout"].startswith("['red', 'blue'] [1, 2] False 2 made 3.5")


@pytest.mark.timeout(900)
def test_a_cell_reads_the_kernels_output_history(burst_env, tmp_path):
    """``_``, ``__``, ``___``, ``_N``, ``Out``, ``_oh``, ``_iN``, ``In``, ``_ih`` on the machine are the kernel's; a
    ``%%burst`` cell's Out enters the kernel's history as a plain cell's does (``_``, ``_N``, ``Out[N]``)."""
    cells = [
        "2 + 2",  # In[3], Out[3]
        "_ * 3",  # Out[4] == 12
        "x = _ + __\nprint(x, _3, Out[3], _oh[4], _i3, In[3], _ih[3], len(Out))",
        "[_, __, ___]",
        "y = _4 * 2\ny",
        "z = 1",  # no Out: `_` stays
        "_",
        "print(_ is Out[max(Out)], sorted(Out))",
        "Out[3] + Out[4]",
        "'a'",
        "'b'",
        "'c'",
        "print(_i, _ii, _iii)",  # the inputs of the three plain cells before (a burst cell's has its %%burst line)
        "print(_i1, _i3, len(In), len(_ih))",  # _i1: the machine's own first cell would be its own input
    ]
    plain = compare(cells, {1, 2, 3, 4, 5, 6, 8, 12, 13}, tmp_path)
    assert plain[1]["out"] == "12" and plain[2]["stdout"].startswith("16 4 4 12 2 + 2 2 + 2 2 + 2")
    assert plain[6]["out"] == "24" and plain[8]["out"] == "16" and plain[12]["stdout"] == "'c' 'b' 'a'\n"
    assert plain[13]["stdout"].startswith("%load_ext nbburst 2 + 2")


EX7 = "a,b,c,d,message\n1,2,3,4,hello\n5,6,7,8,world\n9,10,11,12,foo\n13,14,15,16,bar\n"


@pytest.mark.timeout(900)
def test_open_files_readers_and_databases_move_with_the_cell(burst_env, tmp_path):
    """An open file (text or binary, read or written, mid-iteration or closed), a csv.reader over it, a csv.writer,
    pandas' readers in chunks, a sqlite3 connection and cursor on a database file and a SQLAlchemy engine on it,
    made on the machine and used in the kernel, made in the kernel and used on the machine, each reopened on that
    side's copy of the file where the other side left it."""
    (tmp_path / "ex7.csv").write_text(EX7)
    cells = [
        "import csv, sqlite3\nf = open('ex7.csv')\nreader = csv.reader(f)",
        "for line in reader:\n    print(line)\nf.close()",
        "print(f.closed, reader.line_num)",
        "g = open('ex7.csv')\nfirst = g.readline()\nr2 = csv.reader(g)\nrow = next(r2)",
        "print(first, row, r2.line_num, next(r2), r2.line_num)",
        "print(list(r2), r2.line_num, g.tell())",
        "with open('ex7.csv') as h:\n    lines = list(csv.reader(h))",
        "print(h.closed, h.name, h.mode, lines[1])",
        "w = open('notes.txt', 'w')\nw.write('one\\n')",
        "w.write('two\\n')",
        "w.close()\nprint(open('notes.txt').read(), w.mode)",
        "b = open('ex7.csv', 'rb')\nhead = b.read(4)",
        "print(head, b.read(4), b.tell(), b.mode)",
        "con = sqlite3.connect('mydata.sqlite')\ncon.execute('CREATE TABLE test (a VARCHAR(20), d INTEGER)')\n"
        "con.commit()",
        "con.executemany('INSERT INTO test VALUES(?, ?)', [('x', 1), ('y', 2)])\ncon.commit()",
        "cursor = con.execute('SELECT * FROM test')\nrows = cursor.fetchall()\nrows",
        "print([x[0] for x in cursor.description], cursor.fetchall())",
        "print(con.execute('SELECT count(*) FROM test').fetchall())",
        "import pandas as pd\nchunker = pd.read_csv('ex7.csv', chunksize=2)\nfirst = next(chunker)",
        "print(next(chunker).a.tolist())",
        "it = pd.read_csv('ex7.csv', iterator=True)\nit.get_chunk(1)",
        "tot = 0\nfor piece in chunker:\n    tot += piece.a.sum()\nprint(tot, it.get_chunk(5).shape)",
        "k = open('ex7.csv')\nnext(k)",
        "for line in k:\n    print(line, end='')",
        "print(k.read(), k.tell(), k.closed)",
        "import sqlalchemy as sqla\ndb = sqla.create_engine('sqlite:///mydata.sqlite')\n"
        "pd.read_sql('SELECT * FROM test', db)",
        "pd.read_sql('SELECT count(*) AS n FROM test', db)",
        "print(pd.read_sql('SELECT a FROM test', db).a.tolist())",
        "with open('w.csv', 'w', newline='') as out:\n    cw = csv.writer(out, delimiter=';')\n    cw.writerow([1, 2])",
        "o2 = open('w2.csv', 'w', newline='')\ncw2 = csv.writer(o2)\ncw2.writerow(['a', 'b'])",
        "cw2.writerow([1, 2])\no2.close()",
        "print(repr(open('w.csv', newline='').read()), out.closed, repr(open('w2.csv', newline='').read()))",
    ]
    # the kernel's own (plain cells 11, 13, 17, 22) used on the machine too
    plain = compare(cells, {0, 1, 3, 4, 6, 8, 9, 12, 14, 15, 16, 18, 20, 23, 25, 26, 28, 29, 30}, tmp_path)
    assert plain[1]["stdout"].count("\n") == 5 and plain[2]["stdout"] == "True 5\n"
    assert plain[10]["stdout"] == "one\ntwo\n w\n" and plain[17]["stdout"] == "[(2,)]\n"


@pytest.mark.timeout(600)
def test_a_handle_that_cannot_move_is_named_with_its_reason(burst_env, tmp_path):
    """An in-memory database and a transaction not yet committed stay on the machine; the cell says which and why."""
    cells = [
        "import sqlite3\nmem = sqlite3.connect(':memory:')\ndisk = sqlite3.connect('d.sqlite')\n"
        "disk.execute('CREATE TABLE t (a)')\ndisk.execute('INSERT INTO t VALUES (1)')\nkept = 1"
    ]
    seen, space = observed(["%load_ext nbburst", "%%burst\n" + cells[0]], set(), "plain", tmp_path)
    stderr = seen[1]["stderr"]
    assert "'mem' (Connection) was not brought back" in stderr and "in-memory" in stderr, stderr
    assert "'disk' (Connection) was not brought back" in stderr and "commit()" in stderr, stderr
    assert space["kept"] == "int 1" and "mem" not in space
