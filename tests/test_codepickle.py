"""The pickler's reducers: merged once for the many picklers a cell makes, and up to date with copyreg."""

from __future__ import annotations

import copyreg
import pickle

from nbburst.protocol import codepickle


class Point:
    def __init__(self, x: int):
        self.x = x


def _as_tuple(point: Point) -> tuple[type, tuple[int]]:
    return Point, (point.x + 100,)


def test_a_reducer_registered_between_two_picklers_is_used_by_the_second(monkeypatch):
    first = codepickle._flat_reducers()  # noqa: SLF001 - the merged table itself is what is tested
    assert codepickle._flat_reducers() is first, "nothing registered: the picklers share one merged table"
    assert pickle.loads(codepickle.dumps(Point(1))).x == 1
    monkeypatch.setitem(copyreg.dispatch_table, Point, _as_tuple)  # copyreg.pickle, undone after the test
    assert pickle.loads(codepickle.dumps(Point(1))).x == 101
    monkeypatch.setitem(copyreg.dispatch_table, Point, lambda point: (Point, (point.x + 200,)))  # replaced
    assert pickle.loads(codepickle.dumps(Point(1))).x == 201
    monkeypatch.undo()
    assert pickle.loads(codepickle.dumps(Point(1))).x == 1
