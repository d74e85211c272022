"""The Store contract, run against every adapter: LocalStore, GCSStore (on a GCS emulator), and the flaky
LocalStore of the chaos tests (30% of its file operations fail; its retry must hide that).

The GCS emulator (fake-gcs-server, see nbburst.testing.gcs) runs once
per session (the ``gcs_emulator`` fixture of nbburst.testing.pytest_plugin);
every test gets a fresh bucket.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nbburst.store.base import AlreadyExists, NotFound, Store, StoreError
from nbburst.store.local import LocalStore

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["local", "flaky", "gcs"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A factory of stores of this backend, all below one fresh root for this test."""
    if backend == "local":
        return lambda name="root", **kw: LocalStore(tmp_path / name)
    if backend == "flaky":
        from nbburst.testing.faults import FlakyStore

        return lambda name="root", **kw: FlakyStore(f"flaky://{tmp_path / name}", rate=0.3)
    emulator, bucket = request.getfixturevalue("gcs_emulator"), request.getfixturevalue("gcs_bucket")
    for name, value in emulator.env().items():
        monkeypatch.setenv(name, value)
    from nbburst.store.gcs import GCSStore

    return lambda name="root", **kw: GCSStore(f"gs://{bucket}/{name}", **kw)


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


@pytest.fixture
def enforcing(backend: str, request: pytest.FixtureRequest) -> None:
    """Skip create-only tests on an emulator that would let them pass without enforcing anything."""
    if backend == "gcs" and not request.getfixturevalue("gcs_emulator").enforces_preconditions:
        pytest.skip("this GCS emulator ignores generation preconditions")


@pytest.fixture
def single_request_uploads(backend: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the objects GCSStore sent in one request (not through a resumable session)."""
    sizes: list[int] = []
    if backend == "gcs":
        from google.cloud.storage import Blob

        real = Blob.upload_from_string

        def spy(self: Blob, payload: bytes, *args: object, **kwargs: object) -> None:
            sizes.append(len(payload))
            return real(self, payload, *args, **kwargs)

        monkeypatch.setattr(Blob, "upload_from_string", spy)
    return sizes


def _payload(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes (cheap to make, easy to compare)."""
    block = hashlib.sha256(str(seed).encode()).digest() * 32768  # 1 MiB pattern
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += block[counter % 251 :] + block[: counter % 251]
        counter += 1
    return bytes(out[:size])


# -- basic reads and writes ------------------------------------------------------


def test_put_get_round_trip(store: Store) -> None:
    store.put("jobs/a/spec.json", b'{"x": 1}')
    store.put("empty", b"")
    assert store.get("jobs/a/spec.json") == b'{"x": 1}'
    assert store.get("empty") == b""
    assert store.size("empty") == 0


def test_put_overwrites(store: Store) -> None:
    store.put("k", b"first version")
    store.put("k", b"second")
    assert store.get("k") == b"second"
    assert store.size("k") == len(b"second")


def test_missing_key(store: Store) -> None:
    with pytest.raises(NotFound):
        store.get("nope/missing")
    with pytest.raises(KeyError):  # NotFound is a KeyError
        store.get("nope/missing")
    with pytest.raises(NotFound):
        store.size("nope/missing")
    assert not store.exists("nope/missing")


def test_exists_and_size(store: Store) -> None:
    store.put("a/b/c", b"12345")
    assert store.exists("a/b/c")
    assert not store.exists("a/b")  # a "folder" is not a key
    assert store.size("a/b/c") == 5


def test_get_file_replaces_atomically(store: Store, tmp_path: Path) -> None:
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


def test_create_only(store: Store, enforcing: None) -> None:
    store.create("jobs/a/result.pkl", b"mine")
    with pytest.raises(AlreadyExists):
        store.create("jobs/a/result.pkl", b"theirs")
    with pytest.raises(AlreadyExists):  # identical bytes from another writer still conflict
        store.create("jobs/a/result.pkl", b"mine")
    assert store.get("jobs/a/result.pkl") == b"mine"
    store.put("jobs/a/result.pkl", b"overwritten")  # put still replaces
    assert store.get("jobs/a/result.pkl") == b"overwritten"


def test_create_only_via_put_chunks_and_put_file(store: Store, enforcing: None, tmp_path: Path) -> None:
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


def test_create_race_has_exactly_one_winner(store: Store, enforcing: None) -> None:
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


LARGE = 9 * MiB  # above GCSStore's single-request limit (8 MiB): a resumable upload


def test_large_create_that_loses_a_race_is_already_exists(
    make_store: Callable[..., Store], enforcing: None, single_request_uploads: list[int]
) -> None:
    # GCS checks ifGenerationMatch=0 of a resumable upload only when it is finalised; fake-gcs-server alone
    # does not check it at all, so this fails unless the emulator's proxy answers 412 there as GCS does.
    store = make_store(chunk_size=4 * MiB)  # several chunks: the 412 comes with the last one
    store.create("jobs/big/result.pkl", _payload(LARGE, seed=1))
    with pytest.raises(AlreadyExists):
        store.put_chunks("jobs/big/result.pkl", iter([_payload(LARGE, seed=2)]), create=True)
    assert store.get("jobs/big/result.pkl") == _payload(LARGE, seed=1)

    writers = 3
    barrier = threading.Barrier(writers)

    def write(i: int) -> bool:
        barrier.wait()
        try:
            store.create("jobs/big/lease", _payload(LARGE + i, seed=10 + i))
        except AlreadyExists:
            return False
        return True

    with ThreadPoolExecutor(max_workers=writers) as pool:
        won = list(pool.map(write, range(writers)))  # any other error is raised here
    winners = [i for i, w in enumerate(won) if w]
    assert len(winners) == 1
    assert store.get("jobs/big/lease") == _payload(LARGE + winners[0], seed=10 + winners[0])
    assert single_request_uploads == []


# -- GCS only: a retried create whose first attempt succeeded unseen ---------------


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_retried_create_is_recognised_as_ours(store: Store, enforcing: None) -> None:
    # The same logical write (same write id, same bytes) finding its own object succeeds.
    store.create("jobs/a/status/0.json", b"SUCCEEDED", write_id="attempt-0")
    store.create("jobs/a/status/0.json", b"SUCCEEDED", write_id="attempt-0")
    with pytest.raises(AlreadyExists):  # another writer, even with identical bytes
        store.create("jobs/a/status/0.json", b"SUCCEEDED")
    with pytest.raises(AlreadyExists):  # same id but other bytes: not what we wrote
        store.create("jobs/a/status/0.json", b"FAILED", write_id="attempt-0")
    assert store.get("jobs/a/status/0.json") == b"SUCCEEDED"


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_library_retry_after_unseen_success(
    make_store: Callable[..., Store], enforcing: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real scenario: the upload commits, the response is lost, the client library retries -> 412."""
    import requests
    from google.cloud.storage.retry import DEFAULT_RETRY

    store = make_store(retry=DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.05))
    http = store.client._http
    real_request = http.request
    dropped: list[str] = []

    def lose_first_upload_response(method: str, url: str, *args: object, **kwargs: object) -> object:
        response = real_request(method, url, *args, **kwargs)
        if "uploadType=multipart" in url and not dropped:
            dropped.append(url)
            raise requests.exceptions.ConnectionError("connection reset after the server committed")
        return response

    monkeypatch.setattr(http, "request", lose_first_upload_response)
    store.create("jobs/a/result.pkl", b"result bytes")  # retried, got 412, recognised as ours
    assert dropped
    assert store.get("jobs/a/result.pkl") == b"result bytes"
    with pytest.raises(AlreadyExists):
        store.create("jobs/a/result.pkl", b"result bytes")


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_large_create_repeated_with_its_write_id_is_ours(
    store: Store, enforcing: None, single_request_uploads: list[int]
) -> None:
    data = _payload(LARGE, seed=3)
    store.create("jobs/a/result.pkl", data, write_id="attempt-0")
    store.create("jobs/a/result.pkl", data, write_id="attempt-0")  # a new session, 412 at its end: ours
    with pytest.raises(AlreadyExists):  # another writer, even with identical bytes
        store.create("jobs/a/result.pkl", data)
    with pytest.raises(AlreadyExists):  # same id but other bytes: not what we wrote
        store.create("jobs/a/result.pkl", _payload(LARGE, seed=4), write_id="attempt-0")
    assert store.get("jobs/a/result.pkl") == data
    assert single_request_uploads == []


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_large_create_whose_last_answer_is_lost(
    make_store: Callable[..., Store], enforcing: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last chunk commits, its answer is lost, the library sends it again: GCS answers with the object."""
    import requests
    from google.cloud.storage.retry import DEFAULT_RETRY

    store = make_store(retry=DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.05), chunk_size=4 * MiB)
    http = store.client._http
    real_request = http.request
    dropped: list[str] = []

    def lose_last_chunk_answer(method: str, url: str, *args: object, **kwargs: object) -> object:
        response = real_request(method, url, *args, **kwargs)
        content_range = (kwargs.get("headers") or {}).get("content-range", "")
        if "upload_id=" in url and not content_range.endswith("/*") and not dropped:
            dropped.append(content_range)
            raise requests.exceptions.ConnectionError("connection reset after the server committed")
        return response

    monkeypatch.setattr(http, "request", lose_last_chunk_answer)
    data = _payload(LARGE, seed=5)
    store.create("jobs/a/result.pkl", data)
    assert dropped == [f"bytes {8 * MiB}-{LARGE - 1}/{LARGE}"]
    assert store.get("jobs/a/result.pkl") == data
    with pytest.raises(AlreadyExists):
        store.create("jobs/a/result.pkl", data)


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_emulator_checks_generation_on_deletes(store: Store, enforcing: None) -> None:
    from google.api_core.exceptions import PreconditionFailed

    store.put("k", b"v")
    blob = store.client.bucket(store.bucket_name).get_blob(store.prefix + "k")
    with pytest.raises(PreconditionFailed):
        blob.delete(if_generation_match=blob.generation + 1)
    assert store.exists("k")
    blob.delete(if_generation_match=blob.generation)
    assert not store.exists("k")


# -- listing and deleting ------------------------------------------------------------


def test_list_by_prefix(store: Store) -> None:
    keys = ["jobs/a/spec.json", "jobs/a/logs/0/0001", "jobs/a1/spec.json", "jobs/b/spec.json", "blobs/ff"]
    for key in keys:
        store.put(key, b"x")
    assert store.list("jobs/a/") == ["jobs/a/logs/0/0001", "jobs/a/spec.json"]
    assert store.list("jobs/a1/") == ["jobs/a1/spec.json"]
    assert store.list("jobs/a") == ["jobs/a/logs/0/0001", "jobs/a/spec.json", "jobs/a1/spec.json"]
    assert store.list("") == sorted(keys)
    assert store.list("nothing/") == []


def test_roots_do_not_leak_into_each_other(make_store: Callable[..., Store]) -> None:
    inner, sibling = make_store("root"), make_store("root2")
    inner.put("k", b"1")
    sibling.put("k", b"2")
    sibling.put("other", b"3")
    assert inner.list("") == ["k"]
    assert sibling.list("") == ["k", "other"]
    assert inner.get("k") == b"1"
    assert inner.delete_prefix("") == 1
    assert sibling.list("") == ["k", "other"]


def test_list_dirs(store: Store) -> None:
    for key in ["jobs/a/spec.json", "jobs/a/logs/0/1", "jobs/b1/spec.json", "jobs/top.json", "blobs/x"]:
        store.put(key, b"x")
    assert store.list_dirs("jobs/") == ["a", "b1"]
    assert store.list_dirs("jobs/a/") == ["logs"]
    assert store.list_dirs("") == ["blobs", "jobs"]
    assert store.list_dirs("nothing/") == []


def test_delete(store: Store) -> None:
    store.put("a/b", b"1")
    store.put("a/c", b"2")
    store.delete("a/b")
    assert not store.exists("a/b")
    assert store.list("a/") == ["a/c"]
    store.delete("a/b")  # missing: no error
    store.delete("never/there")


def test_delete_prefix(store: Store) -> None:
    keys = [f"jobs/x/logs/0/{i:04d}" for i in range(25)] + ["jobs/x/spec.json", "jobs/x1/spec.json"]
    for key in keys:
        store.put(key, b"x")
    assert store.delete_prefix("jobs/x/") == 26
    assert store.list("jobs/") == ["jobs/x1/spec.json"]
    assert store.delete_prefix("jobs/x/") == 0


# -- large objects ---------------------------------------------------------------------


def test_large_streamed_round_trip(store: Store, tmp_path: Path, single_request_uploads: list[int]) -> None:
    data = _payload(20 * MiB + 12345)
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


def test_keys_with_odd_characters(store: Store) -> None:
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
def test_invalid_keys_are_rejected(store: Store, key: str) -> None:
    with pytest.raises(StoreError):
        store.put(key, b"x")


# -- GCS configuration errors ----------------------------------------------------------------


def test_gcs_missing_bucket_is_a_clear_error(gcs_emulator: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbburst.store.gcs import GCSStore

    for name, value in gcs_emulator.env().items():
        monkeypatch.setenv(name, value)
    store = GCSStore("gs://no-such-bucket-here/prefix")
    for operation in [lambda: store.put("k", b"x"), lambda: store.get("k"), lambda: store.list("")]:
        with pytest.raises(StoreError, match="no-such-bucket-here") as info:
            operation()
        assert not isinstance(info.value, NotFound)
        assert "Create it" in str(info.value)


def test_gcs_missing_credentials_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbburst.store.gcs import GCSStore

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    store = GCSStore("gs://some-bucket/prefix")
    with pytest.raises(StoreError, match="gcloud auth application-default login"):
        store.get("k")


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_store_pickles_without_its_client(store: Store) -> None:
    import pickle

    store.put("k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.url == store.url and clone.get("k") == b"v"


def test_importing_nbburst_store_does_not_import_the_gcs_client() -> None:
    import subprocess
    import sys

    code = "import sys, nbburst.store; print('google.cloud.storage' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_emulator_stop_leaves_no_process() -> None:
    from nbburst.testing.gcs import GCSEmulator

    with GCSEmulator() as emulator:
        assert emulator.env() == {"STORAGE_EMULATOR_HOST": f"http://{emulator.host}"}
        emulator.create_bucket("b1")
        emulator.create_bucket("b1")  # exists already: fine
        process = emulator._process
    assert emulator._process is None and emulator._server is None
    if process is not None:  # fake-gcs-server ran as a child: it is gone and reaped
        assert process.returncode is not None
        with pytest.raises(ProcessLookupError):
            os.kill(process.pid, 0)


def test_put_addressed_stores_once_under_its_address(store: Store) -> None:
    import hashlib

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


def _real_time() -> float:
    return time.clock_gettime(time.CLOCK_REALTIME)  # not time.time(), which a test may shift


def test_updated_is_stamped_by_the_store_at_each_write(store: Store) -> None:
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


def test_now_and_age_follow_the_store_not_this_machines_clock(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.put("k", b"v")
    written = store.updated("k")
    real = time.time
    for shift in (3600.0, -3600.0):  # the first reading of the Store's clock is taken an hour off
        monkeypatch.setattr(time, "time", lambda shift=shift: real() + shift)
        assert abs(store.now() - _real_time()) < 2
        assert 0 <= store.age("k") < 5
        assert store.age("k") == pytest.approx(store.now() - written, abs=0.5)
    assert store.list("clock/") == []  # the probes are removed


def test_now_is_carried_forward_between_readings(store: Store) -> None:
    first = store.now()
    time.sleep(0.2)
    second = store.now()
    assert 0.15 < second - first < 2
    assert store.list("clock/") == []


@pytest.mark.parametrize("backend", ["gcs"])
def test_gcs_transient_faults_are_retried(
    make_store: Callable[..., Store], gcs_emulator: object, gcs_bucket: str
) -> None:
    """A third of the requests fail with 503 (some after the write was applied): every call still succeeds."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    if getattr(gcs_emulator, "kind", "") != "fake-gcs-server":
        pytest.skip("fault injection needs fake-gcs-server")
    store = make_store(retry=DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.05))
    gcs_emulator.set_faults(gcs_bucket, 0.3)
    before = gcs_emulator.faults_injected
    try:
        for i in range(20):
            store.put(f"jobs/a/status/{i:04d}.json", b"%d" % i)
            store.create(f"jobs/a/logs/{i:08d}", b"line %d" % i)
            assert store.get(f"jobs/a/logs/{i:08d}") == b"line %d" % i
            assert store.exists(f"jobs/a/status/{i:04d}.json")
            store.updated(f"jobs/a/status/{i:04d}.json")
        assert len(store.list("jobs/a/logs/")) == 20
        with pytest.raises(AlreadyExists):
            store.create("jobs/a/logs/00000000", b"another writer")
        store.delete_prefix("jobs/a/")
        assert store.list("jobs/a/") == []
    finally:
        gcs_emulator.set_faults(gcs_bucket, 0)
    assert gcs_emulator.faults_injected - before > 10
