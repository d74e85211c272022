"""GCSStore alone, on the GCS emulator: a retried create that finds its own object, uploads whose answer is
lost, transient faults, configuration errors, and the emulator itself. What every Store does is the contract
(test_store_contract.py); these are what only Cloud Storage's generations and its client library bring.

The GCS emulator (fake-gcs-server, see nbburst.testing.gcs) runs once per session (the ``gcs_emulator``
fixture of nbburst.testing.pytest_plugin); every test gets a fresh bucket.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nbburst.store.base import AlreadyExists, NotFound, Store, StoreError
from nbburst.testing.contracts.store import LARGE, MiB, payload

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def make_store(make_gcs_store: Callable[..., Store]) -> Callable[..., Store]:
    return make_gcs_store


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


@pytest.fixture
def enforcing(gcs_enforcing: None) -> None:
    """Create-only tests run only where the emulator enforces create-only."""


@pytest.fixture
def single_request_uploads(gcs_single_request_uploads: list[int]) -> list[int]:
    return gcs_single_request_uploads


def test_gcs_retried_create_is_recognised_as_ours(store: Store, enforcing: None) -> None:
    # The same logical write (same write id, same bytes) finding its own object succeeds.
    store.create("jobs/a/status/0.json", b"SUCCEEDED", write_id="attempt-0")
    store.create("jobs/a/status/0.json", b"SUCCEEDED", write_id="attempt-0")
    with pytest.raises(AlreadyExists):  # another writer, even with identical bytes
        store.create("jobs/a/status/0.json", b"SUCCEEDED")
    with pytest.raises(AlreadyExists):  # same id but other bytes: not what we wrote
        store.create("jobs/a/status/0.json", b"FAILED", write_id="attempt-0")
    assert store.get("jobs/a/status/0.json") == b"SUCCEEDED"


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


def test_gcs_large_create_repeated_with_its_write_id_is_ours(
    store: Store, enforcing: None, single_request_uploads: list[int]
) -> None:
    data = payload(LARGE, seed=3)
    store.create("jobs/a/result.pkl", data, write_id="attempt-0")
    store.create("jobs/a/result.pkl", data, write_id="attempt-0")  # a new session, 412 at its end: ours
    with pytest.raises(AlreadyExists):  # another writer, even with identical bytes
        store.create("jobs/a/result.pkl", data)
    with pytest.raises(AlreadyExists):  # same id but other bytes: not what we wrote
        store.create("jobs/a/result.pkl", payload(LARGE, seed=4), write_id="attempt-0")
    assert store.get("jobs/a/result.pkl") == data
    assert single_request_uploads == []


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
    data = payload(LARGE, seed=5)
    store.create("jobs/a/result.pkl", data)
    assert dropped == [f"bytes {8 * MiB}-{LARGE - 1}/{LARGE}"]
    assert store.get("jobs/a/result.pkl") == data
    with pytest.raises(AlreadyExists):
        store.create("jobs/a/result.pkl", data)


def test_gcs_emulator_checks_generation_on_deletes(store: Store, enforcing: None) -> None:
    from google.api_core.exceptions import PreconditionFailed

    store.put("k", b"v")
    blob = store.client.bucket(store.bucket_name).get_blob(store.prefix + "k")
    with pytest.raises(PreconditionFailed):
        blob.delete(if_generation_match=blob.generation + 1)
    assert store.exists("k")
    blob.delete(if_generation_match=blob.generation)
    assert not store.exists("k")


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
        process = emulator.process
    assert not emulator.running
    if process is not None:  # fake-gcs-server ran as a child: it is gone and reaped
        assert process.returncode is not None
        with pytest.raises(ProcessLookupError):
            os.kill(process.pid, 0)


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
