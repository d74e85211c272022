"""The Store contract: what every Store adapter does, as a class of tests any adapter's test module can run.

Subclass :class:`StoreContract` in a test module and provide the ``make_store`` fixture; every test below then
runs against that adapter (nbburst's own: ``tests/test_store_contract.py``)::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda name="root", **options: MyStore(f"my://{tmp_path / name}")

``make_store(name="root", **options)`` makes a Store rooted at a fresh root of this test called ``name``
(two names, two roots that must not see each other's keys); ``options`` are tuning an adapter may take or
ignore (``chunk_size``: upload in chunks of that many bytes). Two more fixtures have defaults an adapter may
override: ``enforcing`` (skip the create-only tests where the service behind the adapter, an emulator, does
not enforce create-only at all, so they would pass without testing anything) and ``single_request_uploads``
(the sizes of the objects the adapter sent in one request, for an adapter that streams large objects and
can see how it sent them; empty otherwise).

Why these: everything that crosses between the notebook and the machine goes through the Store, and a job's
commit points (its end, its result, a lease, a claim) are create-only puts whose races must have exactly
one winner, on whatever storage the adapter writes to.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ...store.base import AlreadyExists, NotFound, Store, StoreError

MiB = 1 << 20
#: Above GCSStore's single-request limit (8 MiB): a resumable upload there.
LARGE = 9 * MiB

ODD_KEYS = [
    "odd/with space.txt",
    "odd/ünïcödé-日本語.bin",
    "odd/plus+equals=and&amp;.x",
    "odd/percent%20not-decoded",
    "odd/hash#question?mark",
    "odd/brackets[1](2){3}",
    "odd/quote's,semi;colon:at@bang!dollar$star*tilde~",
    "odd/.hidden-name",
    "odd/trailing.dots..",
]


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes (cheap to make, easy to compare)."""
    block = hashlib.sha256(str(seed).encode()).digest() * 32768  # 1 MiB pattern
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += block[counter % 251 :] + block[: counter % 251]
        counter += 1
    return bytes(out[:size])


def _real_time() -> float:
    return time.clock_gettime(time.CLOCK_REALTIME)  # not time.time(), which a test may shift


class StoreContract:
    """The tests every Store passes; a subclass provides the ``make_store`` fixture (see the module)."""

    @pytest.fixture
    def store(self, make_store: Callable[..., Store]) -> Store:
        return make_store()

    @pytest.fixture
    def enforcing(self) -> None:
        """Run the create-only tests; an adapter on an emulator that ignores create-only skips them here."""

    @pytest.fixture
    def single_request_uploads(self) -> list[int]:
        """Sizes of the objects the adapter sent in one request: none, unless the adapter overrides this."""
        return []

    # -- basic reads and writes ------------------------------------------------------

    def test_put_get_round_trip(self, store: Store) -> None:
        store.put("jobs/a/spec.json", b'{"x": 1}')
        store.put("empty", b"")
        assert store.get("jobs/a/spec.json") == b'{"x": 1}'
        assert store.get("empty") == b""
        assert store.size("empty") == 0

    def test_put_overwrites(self, store: Store) -> None:
        store.put("k", b"first version")
        store.put("k", b"second")
        assert store.get("k") == b"second"
        assert store.size("k") == len(b"second")

    def test_missing_key(self, store: Store) -> None:
        with pytest.raises(NotFound):
            store.get("nope/missing")
        with pytest.raises(KeyError):  # NotFound is a KeyError
            store.get("nope/missing")
        with pytest.raises(NotFound):
            store.size("nope/missing")
        assert not store.exists("nope/missing")

    def test_exists_and_size(self, store: Store) -> None:
        store.put("a/b/c", b"12345")
        assert store.exists("a/b/c")
        assert not store.exists("a/b")  # a "folder" is not a key
        assert store.size("a/b/c") == 5

    def test_get_file_replaces_atomically(self, store: Store, tmp_path: Path) -> None:
        store.put("blobs/x", b"payload")
        target = tmp_path / "out" / "x.bin"
        target.parent.mkdir()
        target.write_bytes(b"old contents that are longer")
        store.get_file("blobs/x", target)
        assert target.read_bytes() == b"payload"
        with pytest.raises(NotFound):
            store.get_file("blobs/missing", target)
        assert target.read_bytes() == b"payload"  # a failed download leaves the file alone
        assert [p.name for p in target.parent.iterdir()] == ["x.bin"]  # no temporary left behind

    # -- create-only ------------------------------------------------------------------

    def test_create_only(self, store: Store, enforcing: None) -> None:
        store.create("jobs/a/result.pkl", b"mine")
        with pytest.raises(AlreadyExists):
            store.create("jobs/a/result.pkl", b"theirs")
        with pytest.raises(AlreadyExists):  # identical bytes from another writer still conflict
            store.create("jobs/a/result.pkl", b"mine")
        assert store.get("jobs/a/result.pkl") == b"mine"
        store.put("jobs/a/result.pkl", b"overwritten")  # put still replaces
        assert store.get("jobs/a/result.pkl") == b"overwritten"

    def test_create_only_via_put_chunks_and_put_file(self, store: Store, enforcing: None, tmp_path: Path) -> None:
        store.put_chunks("c", [b"a", memoryview(b"b")], create=True)
        assert store.get("c") == b"ab"
        with pytest.raises(AlreadyExists):
            store.put_chunks("c", [b"x"], create=True)
        source = tmp_path / "f"
        source.write_bytes(b"file bytes")
        store.put_file("f", source, create=True)
        with pytest.raises(AlreadyExists):
            store.put_file("f", source, create=True)
        assert store.get("c") == b"ab" and store.get("f") == b"file bytes"

    def test_create_race_has_exactly_one_winner(self, store: Store, enforcing: None) -> None:
        # Small objects, sent in one request; test_large_create_that_loses_a_race_is_already_exists has large ones.
        writers = 20
        barrier = threading.Barrier(writers)

        def write(i: int) -> bool:
            barrier.wait()
            try:
                store.create("jobs/race/lease", b"writer-%d" % i)
            except AlreadyExists:
                return False
            return True

        with ThreadPoolExecutor(max_workers=writers) as pool:
            won = list(pool.map(write, range(writers)))  # any other error is raised here
        winners = [i for i, w in enumerate(won) if w]
        assert len(winners) == 1
        assert store.get("jobs/race/lease") == b"writer-%d" % winners[0]

    def test_large_create_that_loses_a_race_is_already_exists(
        self, make_store: Callable[..., Store], enforcing: None, single_request_uploads: list[int]
    ) -> None:
        # GCS checks ifGenerationMatch=0 of a resumable upload only when it is finalised; fake-gcs-server alone
        # does not check it at all, so this fails unless the emulator's proxy answers 412 there as GCS does.
        store = make_store(chunk_size=4 * MiB)  # several chunks: the 412 comes with the last one
        store.create("jobs/big/result.pkl", payload(LARGE, seed=1))
        with pytest.raises(AlreadyExists):
            store.put_chunks("jobs/big/result.pkl", iter([payload(LARGE, seed=2)]), create=True)
        assert store.get("jobs/big/result.pkl") == payload(LARGE, seed=1)

        writers = 3
        barrier = threading.Barrier(writers)

        def write(i: int) -> bool:
            barrier.wait()
            try:
                store.create("jobs/big/lease", payload(LARGE + i, seed=10 + i))
            except AlreadyExists:
                return False
            return True

        with ThreadPoolExecutor(max_workers=writers) as pool:
            won = list(pool.map(write, range(writers)))  # any other error is raised here
        winners = [i for i, w in enumerate(won) if w]
        assert len(winners) == 1
        assert store.get("jobs/big/lease") == payload(LARGE + winners[0], seed=10 + winners[0])
        assert single_request_uploads == []

    # -- listing and deleting ------------------------------------------------------------

    def test_list_by_prefix(self, store: Store) -> None:
        keys = ["jobs/a/spec.json", "jobs/a/logs/0/0001", "jobs/a1/spec.json", "jobs/b/spec.json", "blobs/ff"]
        for key in keys:
            store.put(key, b"x")
        assert store.list("jobs/a/") == ["jobs/a/logs/0/0001", "jobs/a/spec.json"]
        assert store.list("jobs/a1/") == ["jobs/a1/spec.json"]
        assert store.list("jobs/a") == ["jobs/a/logs/0/0001", "jobs/a/spec.json", "jobs/a1/spec.json"]
        assert store.list("") == sorted(keys)
        assert store.list("nothing/") == []

    def test_roots_do_not_leak_into_each_other(self, make_store: Callable[..., Store]) -> None:
        inner, sibling = make_store("root"), make_store("root2")
        inner.put("k", b"1")
        sibling.put("k", b"2")
        sibling.put("other", b"3")
        assert inner.list("") == ["k"]
        assert sibling.list("") == ["k", "other"]
        assert inner.get("k") == b"1"
        assert inner.delete_prefix("") == 1
        assert sibling.list("") == ["k", "other"]

    def test_list_dirs(self, store: Store) -> None:
        for key in ["jobs/a/spec.json", "jobs/a/logs/0/1", "jobs/b1/spec.json", "jobs/top.json", "blobs/x"]:
            store.put(key, b"x")
        assert store.list_dirs("jobs/") == ["a", "b1"]
        assert store.list_dirs("jobs/a/") == ["logs"]
        assert store.list_dirs("") == ["blobs", "jobs"]
        assert store.list_dirs("nothing/") == []

    def test_delete(self, store: Store) -> None:
        store.put("a/b", b"1")
        store.put("a/c", b"2")
        store.delete("a/b")
        assert not store.exists("a/b")
        assert store.list("a/") == ["a/c"]
        store.delete("a/b")  # missing: no error
        store.delete("never/there")

    def test_delete_prefix(self, store: Store) -> None:
        keys = [f"jobs/x/logs/0/{i:04d}" for i in range(25)] + ["jobs/x/spec.json", "jobs/x1/spec.json"]
        for key in keys:
            store.put(key, b"x")
        assert store.delete_prefix("jobs/x/") == 26
        assert store.list("jobs/") == ["jobs/x1/spec.json"]
        assert store.delete_prefix("jobs/x/") == 0

    # -- large objects ---------------------------------------------------------------------

    def test_large_streamed_round_trip(self, store: Store, tmp_path: Path, single_request_uploads: list[int]) -> None:
        data = payload(20 * MiB + 12345)
        digest = hashlib.sha256(data).hexdigest()

        def chunks() -> Iterator[bytes | memoryview]:
            view = memoryview(data)
            step = 3 * MiB + 17  # not aligned with any upload chunk size
            for start in range(0, len(view), step):
                yield view[start : start + step]

        store.put_chunks("big/chunks", chunks())
        source = tmp_path / "big.bin"
        source.write_bytes(data)
        store.put_file("big/file", source)
        store.put_chunks("big/created", chunks(), create=True)

        for key in ["big/chunks", "big/file", "big/created"]:
            assert store.size(key) == len(data)
            out = tmp_path / (key.replace("/", "_") + ".out")
            store.get_file(key, out)
            assert hashlib.sha256(out.read_bytes()).hexdigest() == digest
        assert hashlib.sha256(store.get("big/chunks")).hexdigest() == digest
        assert single_request_uploads == []  # large writes stream through resumable sessions, not one request

    # -- keys ----------------------------------------------------------------------------------

    def test_keys_with_odd_characters(self, store: Store) -> None:
        for i, key in enumerate(ODD_KEYS):
            store.put(key, b"%d" % i)
        for i, key in enumerate(ODD_KEYS):
            assert store.get(key) == b"%d" % i, key
            assert store.exists(key)
            assert store.size(key) == len(b"%d" % i)
        assert store.list("odd/") == sorted(ODD_KEYS)
        store.delete(ODD_KEYS[0])
        assert store.list("odd/") == sorted(ODD_KEYS[1:])

    @pytest.mark.parametrize("key", ["", "/abs", "a/../b", "../escape"])
    def test_invalid_keys_are_rejected(self, store: Store, key: str) -> None:
        with pytest.raises(StoreError):
            store.put(key, b"x")

    def test_put_addressed_stores_once_under_its_address(self, store: Store) -> None:
        data = b"content-addressed " * 1000
        address = hashlib.sha256(data).hexdigest()
        calls = []

        def chunks():
            calls.append(1)
            return [data[:100], data[100:]]

        assert store.put_addressed("blobs/", chunks, lambda: address) == address
        assert store.get("blobs/" + address) == data
        assert store.put_addressed("blobs/", chunks, lambda: address) == address  # already there: kept as it is
        assert store.get("blobs/" + address) == data
        assert store.list("blobs/") == ["blobs/" + address]  # no staging leftovers

    # -- the Store's clock -------------------------------------------------------------

    def test_updated_is_stamped_by_the_store_at_each_write(self, store: Store) -> None:
        before = _real_time()
        store.put("jobs/a/status/0001.json", b"1")
        first = store.updated("jobs/a/status/0001.json")
        assert before - 2 <= first <= _real_time() + 2
        time.sleep(0.05)
        store.put("jobs/a/status/0001.json", b"2")
        assert store.updated("jobs/a/status/0001.json") > first
        store.create("jobs/a/claims/0002", b"")
        assert store.updated("jobs/a/claims/0002") >= store.updated("jobs/a/status/0001.json")
        with pytest.raises(NotFound):
            store.updated("jobs/a/missing")

    def test_now_and_age_follow_the_store_not_this_machines_clock(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store.put("k", b"v")
        written = store.updated("k")
        real = time.time
        for shift in (3600.0, -3600.0):  # the first reading of the Store's clock is taken an hour off
            monkeypatch.setattr(time, "time", lambda shift=shift: real() + shift)
            assert abs(store.now() - _real_time()) < 2
            assert 0 <= store.age("k") < 5
            assert store.age("k") == pytest.approx(store.now() - written, abs=0.5)
        assert store.list("clock/") == []  # the probes are removed

    def test_now_is_carried_forward_between_readings(self, store: Store) -> None:
        first = store.now()
        time.sleep(0.2)
        second = store.now()
        assert 0.15 < second - first < 2
        assert store.list("clock/") == []
