"""Objects that hold an open file or database travel as what to reopen, where they land, on the same file.

A notebook keeps an open file (``f = open("examples/ex7.csv")``), a ``csv.reader`` over it or a
``sqlite3`` connection to a database file from one cell to the next. None of them pickles, yet the file
they hold is in the notebook's working folder, which the machine's cell shares (the files a cell names
are staged, the files it writes come back). So each travels as the file's path relative to that folder
and its state, and is reopened where it lands on that side's copy of the file:

* a file object as the same kind of object (text or binary, its mode, encoding and name) at the same
  position; what was written is flushed first, and a file opened for writing is reopened without being
  truncated (``w`` as ``r+``, keeping its ``mode``); a closed one comes back closed;
* a ``csv.reader`` over the reopened file, its dialect and ``line_num`` kept, a ``csv.writer`` on it;
  pandas' reader of a file in chunks (``read_csv(..., chunksize=N)``) with the rows it has read;
* a ``sqlite3`` connection on the database file as committed (a transaction not yet committed cannot
  move: it is said so), a cursor as one of that connection with the same columns, its rows read; a
  SQLAlchemy engine as one on the same URL (a SQLite file's being the working folder's).

What cannot be reopened elsewhere (an in-memory database, a file outside the working folder, a pipe or a
socket) stays where it is, and the reason says which and why. Updated in place, a file object keeps its
identity: it moves to where the other side's copy got to (:func:`update`).
"""

from __future__ import annotations

import csv
import io
import os
import sqlite3
from collections.abc import Callable
from itertools import chain, repeat
from typing import Any

from . import workfiles

_FILES = (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO)
_READER = type(csv.reader([]))
_WRITER = type(csv.writer(io.StringIO()))
#: csv.Dialect's settings, as csv.reader takes them.
_DIALECT = ("delimiter", "quotechar", "escapechar", "doublequote", "skipinitialspace", "lineterminator", "quoting")
#: A mode that truncates or creates when a file is opened, reopened on the existing file as it now is.
_REOPEN = {"w": "r+", "x": "r+", "w+": "r+", "x+": "r+"}

Reduced = tuple[Callable[..., Any], tuple[Any, ...]]


class Unmovable(TypeError):
    """A handle that cannot be reopened on the other side (the pickler reports it as the value's reason)."""


#: The handles' own types, and the names of those of libraries this module does not import.
_TYPES = frozenset({*_FILES, _READER, _WRITER, sqlite3.Connection, sqlite3.Cursor})
_NAMES = frozenset({"TextFileReader", "Engine"})


def held(obj: Any) -> bool:
    """Whether ``obj`` is a handle this module moves (or says why it cannot). Asked of every object a pickle
    walks, so it looks at the object's type first, and only by its exact type."""
    return moves(type(obj))


def moves(kind: type) -> bool:
    """Whether the objects of exactly the type ``kind`` are handles this module moves: what :func:`held` says of
    each of them, which a pickler can ask once per type instead of once per object."""
    return kind in _TYPES or (kind.__name__ in _NAMES and (_frame_reader(kind) or _engine(kind)))


def _engine(kind: type) -> bool:
    """A SQLAlchemy Engine (``create_engine("sqlite:///mydata.sqlite")``), told without importing SQLAlchemy."""
    return kind.__name__ == "Engine" and kind.__module__.startswith("sqlalchemy.")


def _frame_reader(kind: type) -> bool:
    """pandas' ``read_csv(..., chunksize=N)`` (or ``iterator=True``), told without importing pandas."""
    return kind.__name__ == "TextFileReader" and kind.__module__.startswith("pandas.")


def reduce(obj: Any) -> Reduced:
    """How ``obj`` (:func:`held`) is rebuilt where it lands; :class:`Unmovable` if it cannot be."""
    if isinstance(obj, _FILES):
        return _reduce_file(obj)
    if isinstance(obj, _READER):
        source, dialect = _reader_parts(obj)
        return _csv_reader, (source, obj.line_num, {k: getattr(dialect, k) for k in _DIALECT})
    if isinstance(obj, _WRITER):
        target, dialect = _writer_parts(obj)
        return _csv_writer, (target, {k: getattr(dialect, k) for k in _DIALECT})
    if _frame_reader(type(obj)):
        handle = obj.handles.handle if obj.handles is not None else None
        if handle is None:
            raise Unmovable("it reads from no file")
        rel = _relative(_name(handle))
        options = {"engine": obj.engine, **obj.orig_options}
        return _text_file_reader, (rel, options, obj._currow, handle.closed, _stamp(rel))
    if _engine(type(obj)):
        url = obj.url.render_as_string(hide_password=False)
        database = _engine_database(obj)
        return _sqlalchemy_engine, (url, obj.echo, _stamp(database) if database else None)
    if isinstance(obj, sqlite3.Connection):
        database = _database(obj)
        return _connection, (database, obj.isolation_level, _stamp(database))
    return _cursor, (obj.connection, [column[0] for column in obj.description or ()], obj.description is not None)


def files_of(obj: Any) -> list[str]:
    """The files of the working folder an open handle among a cell's inputs needs there (relative paths)."""
    try:
        if isinstance(obj, _FILES) and not obj.closed:
            return [_relative(_name(obj))]
        if isinstance(obj, _READER):
            return files_of(_reader_parts(obj)[0])
        if isinstance(obj, _WRITER):
            return files_of(_writer_parts(obj)[0])
        if isinstance(obj, sqlite3.Cursor):
            return files_of(obj.connection)
        if isinstance(obj, sqlite3.Connection):
            return [_database(obj)]
        if _engine(type(obj)):
            return [database] if (database := _engine_database(obj)) else []
        if _frame_reader(type(obj)) and obj.handles is not None and not obj.handles.handle.closed:
            return [_relative(_name(obj.handles.handle))]
    except (Unmovable, sqlite3.Error):
        return []
    return []


def update(old: Any, rebuild: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``old`` moved to the state that came back, where it can be (a file object still open on the same file:
    its position; closed if it was closed there); else the handle rebuilt (:func:`reduce`)."""
    if rebuild is _file and isinstance(old, _FILES) and type(old).__name__ == args[1]:
        name, _, _, position, closed, _, _ = args
        if closed or old.closed:
            old.close()
            return old if closed else rebuild(*args)
        try:
            same = os.path.samestat(os.fstat(old.fileno()), os.stat(_relative(name)))
        except (OSError, Unmovable):
            same = False
        if same:
            if old.writable():
                old.flush()
            old.seek(position)
            return old
    return rebuild(*args)


# -- files ----------------------------------------------------------------------------------------


def _name(f: Any) -> str:
    name = f.name
    if not isinstance(name, str):
        raise Unmovable(f"it is open on file descriptor {name}, not on a file of the working folder")
    return name


def _relative(name: str) -> str:
    """``name`` relative to the working folder; :class:`Unmovable` for a file outside it, or not a file."""
    rel = os.path.relpath(os.path.abspath(name))
    if workfiles.levels_up(os.path.normpath(rel)) > workfiles.UP_LIMIT:
        raise Unmovable(f"{name} is outside the notebook's folder, which is all that the other side shares")
    if os.path.exists(rel) and not os.path.isfile(rel):
        raise Unmovable(f"{name} is not a regular file (a pipe, a device)")
    return rel


def _reduce_file(f: Any) -> Reduced:
    kind = type(f).__name__
    text = {"encoding": f.encoding, "errors": f.errors} if isinstance(f, io.TextIOWrapper) else {}
    mode = f.mode
    if f.closed:
        return _file, (_name(f), kind, mode, 0, True, text, None)
    name = _name(f)
    rel = _relative(name)
    if f.writable():
        f.flush()  # what the cell wrote is in the file, which travels with it
    # an absolute name is the kernel's path: the other side's own copy is at the same place in its folder
    return _file, (rel if os.path.isabs(name) else name, kind, mode, _position(f), False, text, _stamp(rel))


def _position(f: Any) -> int:
    """Where ``f`` is, as its ``seek`` takes it. A text file being iterated (``for line in f``, a csv.reader)
    refuses ``tell``: its position is where the text it has decoded and not given yet begins. That text is read
    a character at a time up to the next read from the file (a chunk at most) and matched against the bytes
    before the file's position; where a character straddles that point, all that is left of the file is matched
    against its end instead. ``f`` is then put back there."""
    try:
        return f.tell()
    except OSError:
        if not isinstance(f, io.TextIOWrapper):
            raise
    taken = f.buffer.tell()  # the bytes the decoder has had
    read = []
    while f.buffer.tell() == taken and (char := f.read(1)):
        read.append(char)
    pending = "".join(read[:-1] if f.buffer.tell() != taken else read)
    start = _start_of(f, pending, taken)
    if start is None:
        rest = "".join(read) + f.read()
        start = _start_of(f, rest, f.buffer.tell())
    if start is None:
        raise Unmovable("its position in the text it is reading cannot be told")
    f.seek(start)
    return start


def _start_of(f: io.TextIOWrapper, text: str, end: int) -> int | None:
    """Where the bytes that decode to ``text`` and end at ``end`` begin (newlines as the file may have them);
    the file's buffer is left where it was."""
    here = f.buffer.tell()
    try:
        for newline in ("\n", "\r\n", "\r"):
            start = end - len(text.replace("\n", newline).encode(f.encoding, f.errors))
            if start < 0:
                continue
            f.buffer.seek(start)
            raw = f.buffer.read(end - start)
            try:
                if io.TextIOWrapper(io.BytesIO(raw), encoding=f.encoding, errors=f.errors).read() == text:
                    return start
            except UnicodeError:  # not there: the bytes would start or end inside a character
                continue
        return None
    finally:
        f.buffer.seek(here)


def _stamp(rel: str) -> tuple[int, int] | None:
    """The file's size and modification time: a handle on a file the cell changed is a changed handle (rebuilt
    where it lands on the file as it came back, not left on the file it replaced)."""
    try:
        found = os.stat(rel)
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns


def _file(name: str, kind: str, mode: str, position: int, closed: bool, text: dict[str, Any], stamp: Any = None) -> Any:
    """The file object :func:`_reduce_file` described, on this side's copy of the file (``stamp``: see
    :func:`_stamp`)."""
    if closed:
        raw = io.FileIO(os.devnull)
        raw.name = name  # as it was: nothing is open any more
        f = _wrap(raw, kind, text, mode)
        f.close()
        return f
    rel = _relative(name)
    binary = "b" in mode
    bare = mode.replace("b", "").replace("t", "")
    reopened = _REOPEN.get(bare, bare) + ("b" if binary else "")
    raw = io.FileIO(rel, reopened.replace("b", ""))
    raw.name = name
    f = _wrap(raw, kind, text, mode)
    f.seek(position)
    return f


def _wrap(raw: io.FileIO, kind: str, text: dict[str, Any], mode: str) -> Any:
    if kind == "FileIO":
        return raw
    buffered = raw.readable() and raw.writable()
    buffer = (
        io.BufferedRandom(raw) if buffered else io.BufferedReader(raw) if raw.readable() else io.BufferedWriter(raw)
    )
    if kind != "TextIOWrapper":
        return buffer
    f = io.TextIOWrapper(buffer, **text)
    f.mode = mode  # type: ignore[misc] (open() sets it so too)
    return f


# -- csv readers ----------------------------------------------------------------------------------


def _reader_parts(reader: Any) -> tuple[Any, Any]:
    """(the iterator a csv.reader reads, its dialect): the reader does not show them but to the collector."""
    import gc

    found = gc.get_referents(reader)
    dialect = next(x for x in found if type(x).__name__ == "Dialect")
    source = next(x for x in found if x is not dialect and not isinstance(x, type))
    return (source.source if isinstance(source, _Resumed) else source), dialect


def _writer_parts(writer: Any) -> tuple[Any, Any]:
    """(what a csv.writer writes to, its dialect): it holds the target's ``write`` method, which names it."""
    import gc

    found = gc.get_referents(writer)
    dialect = next(x for x in found if type(x).__name__ == "Dialect")
    write = next(x for x in found if x is not dialect and not isinstance(x, type))
    return write.__self__, dialect


def _csv_writer(target: Any, dialect: dict[str, Any]) -> Any:
    return csv.writer(target, **dialect)


class _Resumed:
    """What a reader that came back reads: blank lines, as many as it had counted, then its source."""

    def __init__(self, source: Any, blanks: int):
        self.source, self.lines = source, chain(repeat("", blanks), source)

    def __iter__(self) -> _Resumed:
        return self

    def __next__(self) -> Any:
        return next(self.lines)


def _csv_reader(source: Any, line_num: int, dialect: dict[str, Any]) -> Any:
    """A csv.reader over ``source`` having counted ``line_num`` lines (it counts the blank lines it is fed first)."""
    reader = csv.reader(_Resumed(source, line_num), **dialect)
    for _ in range(line_num):
        next(reader)
    return reader


def _text_file_reader(name: str, options: dict[str, Any], row: int, closed: bool, stamp: Any = None) -> Any:
    """pandas' reader of ``name`` in chunks, read up to ``row`` (closed, as it closes itself once it is through)."""
    from pandas.io.parsers.readers import TextFileReader

    reader = TextFileReader(_relative(name), **options)
    if closed:
        reader.close()
        reader._currow = row  # what it had read: a closed reader reads no more
    elif row:
        reader.read(row)
    return reader


# -- sqlite3 --------------------------------------------------------------------------------------


def _database(connection: sqlite3.Connection) -> str:
    """The connection's database file relative to the working folder, as committed."""
    try:
        path = next(row[2] for row in connection.execute("PRAGMA database_list") if row[1] == "main")
    except sqlite3.ProgrammingError as exc:  # a closed connection
        raise Unmovable(str(exc)) from None
    if not path:
        raise Unmovable("it is an in-memory (or temporary) database, which lives only in this process")
    if connection.in_transaction:
        raise Unmovable("it has a transaction not yet committed: commit() it (or roll it back) in the cell")
    return _relative(path)


def _engine_database(engine: Any) -> str | None:
    """The database file of a SQLAlchemy engine on SQLite, relative to the working folder; None for an engine on a
    server (it connects again from where it lands) or an in-memory database (a new one there: nothing is lost
    that another connection could see)."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return _relative(url.database)


def _sqlalchemy_engine(url: str, echo: Any, stamp: Any = None) -> Any:
    """An engine on the same database: an engine is a factory of connections, which are made again as needed."""
    import sqlalchemy

    return sqlalchemy.create_engine(url, echo=echo)


def _connection(database: str, isolation_level: str | None, stamp: Any = None) -> sqlite3.Connection:
    return sqlite3.connect(database, isolation_level=isolation_level)


def _cursor(connection: sqlite3.Connection, columns: list[str], executed: bool) -> sqlite3.Cursor:
    """A cursor of ``connection`` with the columns the cursor had (``description``), its rows all read."""
    if not executed:
        return connection.cursor()
    quoted = ", ".join('NULL AS "{}"'.format(c.replace('"', '""')) for c in columns)
    return connection.execute(f"SELECT {quoted} WHERE 0")
