"""The Store contract (nbburst.testing.contracts.store), run against every adapter: LocalStore, GCSStore (on a
GCS emulator), and the flaky LocalStore of the chaos tests (30% of its file operations fail; its retry must
hide that). Here only what each adapter needs to run it; tests of GCSStore alone are in test_store_gcs.py.

The GCS emulator (fake-gcs-server, see nbburst.testing.gcs) runs once
per session (the ``gcs_emulator`` fixture of nbburst.testing.pytest_plugin);
every test gets a fresh bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nbburst.store.base import Store
from nbburst.store.local import LocalStore
from nbburst.testing.contracts.store import StoreContract
from nbburst.testing.faults import FlakyStore

pytestmark = pytest.mark.timeout(120)


class TestLocalStore(StoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[..., Store]:
        return lambda name="root", **kw: LocalStore(tmp_path / name)


class TestFlakyStore(StoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[..., Store]:
        return lambda name="root", **kw: FlakyStore(f"flaky://{tmp_path / name}", rate=0.3)


class TestGCSStore(StoreContract):
    @pytest.fixture
    def make_store(self, make_gcs_store: Callable[..., Store]) -> Callable[..., Store]:
        return make_gcs_store

    @pytest.fixture
    def enforcing(self, gcs_enforcing: None) -> None:
        """The emulator's own answer: create-only tests run only where it enforces create-only."""

    @pytest.fixture
    def single_request_uploads(self, gcs_single_request_uploads: list[int]) -> list[int]:
        return gcs_single_request_uploads
