"""``nbburst gc`` leaves nothing half-written behind: spec-less job folders, unfinished writes, blobs no job
names and keys of jobs that never were go once older than the grace period, and nothing younger, nothing a job
names, and nothing of another Store does. Real folders, in a LocalStore and in the GCS emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from support import kill_agents

from nbburst.client import gc
from nbburst.client.burst import Burst
from nbburst.machines.local import LocalMachines
from nbburst.protocol import signing
from nbburst.protocol.job import JobLayout, new_job_id
from nbburst.store import Store, open_store
from nbburst.ui import cli

OLD_BLOB = "blobs/" + "d" * 64
FRESH_BLOB = "blobs/" + "f" * 64
WHEEL_BLOB = "blobs/" + "e" * 64

# A submission killed half-way: at its spec (everything else written), or in the middle of a blob.
KILLED = {
    "at-spec": """
        from nbburst.protocol.folder import JobFolder
        create = JobFolder.create_record
        def die(self, key, raw):
            if key.endswith("/spec.json"):
                os._exit(9)
            return create(self, key, raw)
        JobFolder.create_record = die
    """,
    "mid-blob": """
        from nbburst.store import base, local
        for cls in (base.Store, local.LocalStore):
            def put_addressed(self, prefix, chunks, address, _original=cls.put_addressed):
                def dying():
                    yield b"x" * 100_000
                    os._exit(9)
                return _original(self, prefix, dying, address)
            cls.put_addressed = put_addressed
    """,
}


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path, monkeypatch) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    for name, value in request.getfixturevalue("gcs_emulator").env().items():
        monkeypatch.setenv(name, value)
    return f"gs://{request.getfixturevalue('gcs_bucket')}/nbburst"


@pytest.fixture
def burst(root, tmp_path, monkeypatch):
    monkeypatch.setenv("NBBURST_ROOT", root)
    monkeypatch.setenv("NBBURST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NBBURST_BACKEND", "local")
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")  # the held job below must stay held
    yield Burst()
    assert not kill_agents(root)


def killed_submission(burst: Burst, how: str, values: list[int]) -> str:
    """Run a submission in a process that dies half-way; returns the id of the job it was writing."""
    script = (
        "import os\n"
        + textwrap.dedent(KILLED[how])
        + f"from nbburst.client.burst import Burst\nBurst().submit(sum, {values!r})\n"
    )
    before = {e.job_id for e in burst.keyring.entries()}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    (job_id,) = {e.job_id for e in burst.keyring.entries()} - before
    return job_id


def addresses(store: Store, job_id: str) -> set[str]:
    return set(json.loads(store.get(JobLayout(job_id).inputs))["values"].values())


def gc_cli(capsys, *flags: str) -> str:
    """``nbburst gc`` (in this process: its notion of "now" is the test's)."""
    capsys.readouterr()
    assert cli.main(["gc", *flags]) == cli.EXIT_OK
    return capsys.readouterr().out


def test_gc_removes_what_killed_submissions_left_and_keeps_the_rest(burst, monkeypatch, capsys):
    store = burst.store
    with monkeypatch.context() as held:  # a job that exists (its spec is there), its machine not started
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        kept = burst.submit(sum, [1, 2, 3])
    store.put(kept.layout.key("dist/manifest.json"), json.dumps({"wheel": {"blob": WHEEL_BLOB}}).encode())
    store.put(WHEEL_BLOB, b"a wheel")  # named by a manifest of the job, not by its inputs
    specless = killed_submission(burst, "at-spec", [4, 5, 6])
    blobless = killed_submission(burst, "mid-blob", [7, 8, 9])
    store.put(OLD_BLOB, b"named by no job")
    store.put("clock/12345-dead", b"")  # a reader of the Store's clock killed between its probe and the delete
    assert not store.exists(JobLayout(specless).spec) and store.list(JobLayout(specless).prefix)
    assert burst.keyring.has(specless) and burst.keyring.has(blobless)
    assert not store.list(JobLayout(blobless).prefix)  # it died before writing anything of the job
    temporaries = store.temporaries()
    assert bool(temporaries) == store.url.startswith("/")  # a GCS upload never finished leaves nothing

    # what is younger than the grace period stays: an upload may still be in progress
    mid = store.now()
    time.sleep(6.0)  # the grace below falls 1 s after mid: 5 s to spare for the fresh objects on a busy machine
    fresh = new_job_id()
    store.put(JobLayout(fresh).inputs, json.dumps({"values": {"x": FRESH_BLOB[6:]}}).encode())
    store.put(FRESH_BLOB, b"being uploaded")
    store.put("clock/12345-alive", b"")
    burst.keyring.create(fresh, store.url)

    def grace() -> str:  # between the ages of the old leftovers and of the fresh ones
        return f"{store.now() - mid - 1.0:.3f}s"

    only_specless = addresses(store, specless) - addresses(store, kept.id)
    assert only_specless  # its arguments; the function's blob is shared with the kept job
    dry = gc_cli(capsys, "--dry-run", "--grace", grace())
    assert f"would delete job folder jobs/{specless}/" in dry and "no spec.json" in dry
    for address in only_specless:
        assert f"would delete blob blobs/{address}" in dry
    assert f"would delete blob {OLD_BLOB}" in dry and "no job refers to it" in dry
    assert "would delete clock probe clock/12345-dead" in dry and "clock/12345-alive" not in dry
    assert f"would delete key {specless}" in dry and f"would delete key {blobless}" in dry
    for name in temporaries:
        assert f"would delete temporary {name}" in dry and "a write that never finished" in dry
    for never in (kept.id, fresh, FRESH_BLOB, WHEEL_BLOB, *addresses(store, kept.id)):
        assert never not in dry
    assert store.exists(OLD_BLOB) and store.list(JobLayout(specless).prefix) and burst.keyring.has(blobless)
    assert store.temporaries() == temporaries

    # a job deleted in the same run (gc --older-than) names nothing any more
    dropped = {item.name for item in gc.sweep(store, 0.0, dropped=[kept.id]) if item.kind == "blob"}
    assert {f"blobs/{a}" for a in addresses(store, kept.id)} | {WHEEL_BLOB} <= dropped

    gc_cli(capsys, "--grace", grace())
    assert not store.exists(OLD_BLOB) and not store.list(JobLayout(specless).prefix)
    assert not store.exists("clock/12345-dead") and store.exists("clock/12345-alive")
    assert not any(store.exists(f"blobs/{a}") for a in only_specless)
    assert store.temporaries() == [] and not burst.keyring.has(specless) and not burst.keyring.has(blobless)
    assert Burst().job(kept.id).spec.kind == "call"  # the job, its key and everything it names are intact
    assert all(store.exists(f"blobs/{a}") for a in addresses(store, kept.id)) and store.exists(WHEEL_BLOB)
    assert store.exists(FRESH_BLOB) and store.list(JobLayout(fresh).prefix) and burst.keyring.has(fresh)
    assert "would delete" not in gc_cli(capsys, "--dry-run", "--grace", grace())  # nothing left to sweep
    kept.cancel(wait_s=0)


def test_keys_of_another_store_are_left_alone(tmp_path):
    store = open_store(str(tmp_path / "store"))
    ring = signing.KeyRing(tmp_path / "keys")
    ids = {name: new_job_id()[:-6] + f"{n:06x}" for n, name in enumerate(["mine", "elsewhere", "unnamed", "young"])}
    ring.create(ids["mine"], store.url)
    ring.create(ids["elsewhere"], "gs://another-bucket/nbburst")
    ring.create(ids["unnamed"])  # made before keys named their Store
    ring.create(ids["young"], store.url)
    long_ago = time.time() - 7200
    for name in ("mine", "elsewhere", "unnamed"):
        os.utime(tmp_path / "keys" / f"{ids[name]}.key", (long_ago, long_ago))
    found = {item.job_id: item for item in gc.orphan_keys(ring, [store], grace_s=3600)}
    assert set(found) == {ids["mine"], ids["unnamed"]}
    assert found[ids["mine"]].why == f"no job {ids['mine']} in {store.url}"
    store.put(JobLayout(ids["unnamed"]).spec, b"{}")  # its job is here after all
    assert {item.job_id for item in gc.orphan_keys(ring, [store], grace_s=3600)} == {ids["mine"]}
    gc.remove(None, ring, gc.orphan_keys(ring, [store], grace_s=3600))
    assert {e.job_id for e in ring.entries()} == {ids["elsewhere"], ids["unnamed"], ids["young"]}
    stores = {e.job_id: e.store for e in ring.entries()}
    assert stores == {ids["elsewhere"]: "gs://another-bucket/nbburst", ids["unnamed"]: "", ids["young"]: store.url}
    assert len(ring.get(ids["elsewhere"])) == 32  # a key that names its Store is still a key
