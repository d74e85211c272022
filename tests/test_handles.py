"""Open files, csv readers, pandas' chunked readers and sqlite3 handles as they travel (nbburst/protocol/handles.py):
pickled by the transfer pickler and unpickled into a namespace, in the same folder (the other side's copy of
the working folder is the same files at the same relative paths)."""

from __future__ import annotations

import csv
import io
import os
import sqlite3
from typing import Any

import pytest

from nbburst.protocol import handles, transfer


def moved(value: Any) -> Any:
    """``value`` pickled as a cell's output and loaded on the other side."""
    writer = transfer.Writer()
    assert writer.add("v", value) is None
    loaded = transfer.load_values(writer.finish({}).tobytes(), {})
    assert not loaded.failed, loaded.failed
    return loaded.values["v"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_text_file_being_iterated_comes_back_where_it_was_and_stays_there(folder, newline):
    (folder / "t.csv").write_bytes(newline.join(["a,b", "1,2", "é,4", "5,6", ""]).encode())
    f = open("t.csv", encoding="utf-8")  # noqa: SIM115
    next(f)
    other = moved(f)
    assert [next(f), next(other)] == ["1,2\n", "1,2\n"]  # the original kept its place too
    assert list(f) == list(other) == ["é,4\n", "5,6\n"]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_big_text_file_comes_back_where_it_was_at_any_line(folder, newline):
    """Lines of characters of one to four bytes across the decoder's chunks: wherever iteration stopped."""
    lines = [f"{i} {'é€𝄞' * (i % 7)} {'x' * (i % 300)}" for i in range(3000)]
    (folder / "t.txt").write_bytes(newline.join([*lines, ""]).encode())
    for stop in (1, 17, 123, 1000, 2999, 3000):
        f = open("t.txt", encoding="utf-8")  # noqa: SIM115
        for _ in range(stop):
            next(f)
        other = moved(f)
        assert list(other) == list(f) == [line + "\n" for line in lines[stop:]], stop


def test_a_csv_reader_and_its_file_stay_one_pair_with_its_line_count(folder):
    (folder / "t.csv").write_text("a,b\n1,2\n3,4\n")
    f = open("t.csv")  # noqa: SIM115
    reader = csv.reader(f, delimiter=",")
    next(reader)
    pair = moved({"f": f, "reader": reader})
    assert pair["reader"].line_num == 1 and next(pair["reader"]) == ["1", "2"] and pair["reader"].line_num == 2
    assert pair["f"].readline() == "3,4\n" and handles.files_of(pair["reader"]) == ["t.csv"]


def test_a_file_written_comes_back_flushed_and_not_truncated_closed_ones_closed(folder):
    w = open("out.txt", "w")  # noqa: SIM115
    w.write("one\n")
    again = moved(w)
    again.write("two\n")
    again.close()
    assert (folder / "out.txt").read_text() == "one\ntwo\n" and again.mode == "w"
    with open("out.txt", "rb") as b:
        b.read(2)
    closed = moved(b)
    assert closed.closed and closed.name == "out.txt" and isinstance(closed, io.BufferedReader)


def test_an_absolute_name_inside_the_folder_travels_as_its_place_in_it(folder):
    (folder / "t.txt").write_text("x\ny\n")
    f = open(os.path.abspath("t.txt"))  # noqa: SIM115
    f.readline()
    assert moved(f).readline() == "y\n"


def test_what_cannot_be_reopened_says_why(folder, monkeypatch):
    outside = folder / "far.txt"  # further up than the files above the notebook's folder that travel
    outside.write_text("x")
    deep = folder / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    memory = sqlite3.connect(":memory:")
    pending = sqlite3.connect("d.sqlite")
    pending.execute("CREATE TABLE t (a)")
    pending.execute("INSERT INTO t VALUES (1)")
    far = open(outside)  # noqa: SIM115
    for value, why in [(memory, "in-memory"), (pending, "commit()"), (far, "outside the notebook's folder")]:
        reason = transfer.Writer().add("v", value)
        assert reason is not None and why in reason, reason


def test_a_connection_and_its_cursor_come_back_on_the_committed_database(folder):
    con = sqlite3.connect("d.sqlite")
    con.execute("CREATE TABLE t (a, b)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(1, 2), (3, 4)])
    con.commit()
    cursor = con.execute("SELECT a, b AS bee FROM t")
    cursor.fetchall()
    both = moved({"con": con, "cursor": cursor})
    assert both["cursor"].connection is both["con"]
    assert [c[0] for c in both["cursor"].description] == ["a", "bee"] and both["cursor"].fetchall() == []
    assert both["con"].execute("SELECT count(*) FROM t").fetchall() == [(2,)]


def test_a_chunked_pandas_reader_goes_on_from_the_rows_it_read(folder):
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"a": range(7)}).to_csv("t.csv", index=False)
    chunker = pd.read_csv("t.csv", chunksize=3)
    next(chunker)
    assert next(moved(chunker)).a.tolist() == [3, 4, 5] == next(chunker).a.tolist()


def test_a_file_whose_copy_the_cell_did_not_change_moves_in_place(folder):
    """Changed in place (the cell read on), the kernel's own file object moves to where the cell left it."""
    (folder / "t.txt").write_text("x\ny\nz\n")
    f = open("t.txt")  # noqa: SIM115
    there = moved(f)
    there.readline()
    kind, content = transfer._adoptable(there)
    assert kind == "handle" and transfer._update(f, kind, content) is f and f.readline() == "y\n"


def test_a_sqlalchemy_engine_comes_back_on_the_same_database_file(folder):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    con = sqlite3.connect("d.sqlite")
    con.execute("CREATE TABLE t (a)")
    con.commit()
    engine = sqlalchemy.create_engine("sqlite:///d.sqlite")
    other = moved(engine)
    assert str(other.url) == "sqlite:///d.sqlite" and handles.files_of(engine) == ["d.sqlite"]
    with other.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM t").fetchall() == [(0,)]


def test_a_csv_writer_writes_on_into_the_file_it_wrote(folder):
    f = open("w.csv", "w", newline="")  # noqa: SIM115
    writer = csv.writer(f, delimiter=";")
    writer.writerow(["a", "b"])
    both = moved({"f": f, "writer": writer})
    both["writer"].writerow([1, 2])
    both["f"].close()
    assert (folder / "w.csv").read_bytes() == b"a;b\r\n1;2\r\n" and handles.files_of(writer) == ["w.csv"]
