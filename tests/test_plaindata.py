"""Which inputs a warm parent may load ahead: only pickles that call numpy, pandas and Python's own types."""

from __future__ import annotations

import collections
import datetime

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from nbburst.client.submission import encode_all
from nbburst.protocol import payload, plaindata


class Notebooks:
    """A class of the notebook's: loading it runs the notebook's code."""

    def __init__(self) -> None:
        self.x = np.ones(3)


def _blob(value: object) -> bytes:
    return encode_all({"v": value}, frozenset(), {}, {})["v"].tobytes()


@pytest.mark.parametrize(
    "value",
    [
        np.arange(10.0),
        pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}),
        pd.Series([1, 2, 3]),
        {"nested": [np.ones(2), (1, "s")], "when": datetime.date(2026, 1, 1)},
        collections.OrderedDict(a=1),
    ],
)
def test_data_is_plain(value):
    assert plaindata.plain_value(_blob(value))


@pytest.mark.parametrize("value", [LogisticRegression(), lambda: 1, Notebooks(), [np.ones(2), Notebooks()]])
def test_what_runs_code_of_its_own_is_not(value):
    assert not plaindata.plain_value(_blob(value))


def test_a_global_named_through_the_memo_is_checked_too():
    # The same global twice: the second time, its module and name come from the memo.
    assert plaindata.plain_value(_blob([np.float32(1), np.float32(2)]))
    assert not plaindata.plain_value(_blob([Notebooks(), Notebooks()]))


def test_what_cannot_be_read_is_not_plain():
    assert not plaindata.plain_value(b"not a blob")
    assert not plaindata.plain_pickle(b"\x80\x05garbage")
    assert not plaindata.plain_value(payload.encode(1).tobytes() + b"trailing")
