"""The Store registry: nbburst's own schemes, those ``$NBBURST_STORES`` adds for a process and its children, and
clear errors for an unknown scheme or a malformed entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbburst.errors import UsageError
from nbburst.store import ENV_STORES, open_store, schemes
from nbburst.testing.faults import STORES, FlakyStore


def test_flaky_folders_open_only_where_the_environment_adds_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_STORES, raising=False)
    assert set(schemes()) == {"file", "gs"}
    with pytest.raises(UsageError, match="no Store for flaky:// URLs"):
        open_store(f"flaky://{tmp_path}")
    monkeypatch.setenv(ENV_STORES, STORES)
    assert isinstance(open_store(f"flaky://{tmp_path}"), FlakyStore)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("flaky", "is not scheme=module:Class"),
        ("flaky=nbburst.testing.faults", "is not scheme=module:Class"),
        ("flaky=nbburst.testing.faults:NoSuchStore", "nbburst.testing.faults has no NoSuchStore"),
        ("flaky=no_such_module_here:Store", "No module named 'no_such_module_here'"),
    ],
)
def test_a_wrong_entry_says_what_is_wrong(entry: str, message: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_STORES, entry)
    with pytest.raises(UsageError, match=message):
        open_store(f"flaky://{tmp_path}")
