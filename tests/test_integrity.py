"""Nothing in the Store is trusted unless sealed to its place: forged, copied and replayed objects are refused.

The attacker here can write the bucket but has no job key: it plants objects, alters them, copies a genuine
object of the job (or of another job) over another one, or puts an older version back. Each is refused with a
message that says which object and why, and nothing forged reaches the notebook, the tables or the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest
from support import wait_until
from support.jobs import attempts_never_overlap, expected_loop, gone, running_step, side_loop, submit
from support.notebook import run_notebook

from nbburst import checkpoint
from nbburst.agent.attempt import checkpoints as mirror
from nbburst.agent.attempt import verdict
from nbburst.client.burst import Burst
from nbburst.client.job import UNVERIFIED
from nbburst.client.supervision.loop import Loop
from nbburst.machines.gce.machines import GCEMachines
from nbburst.machines.local import LocalMachines
from nbburst.protocol import fence, outcome, sealed, signing
from nbburst.protocol.folder import JobFolder
from nbburst.protocol.job import JobLayout, JobSpec, Resources, State, Status, Terminal, encode_records
from nbburst.server.manager import JobsManager
from nbburst.store import open_store

JOB = "b20260101-000000-abcdef"
FORGED_HTML = "<b>FORGED-HTML</b><script>alert('forged')</script>"

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the agent cannot import this module


@pytest.fixture(autouse=True)
def no_background_supervisor(monkeypatch):
    """Only the supervisors a test runs itself: held jobs stay held, forgeries meet the supervisor under test."""
    monkeypatch.setenv("NBBURST_BACKGROUND_SUPERVISOR", "false")


@pytest.fixture
def folder(tmp_path) -> JobFolder:
    return JobFolder(open_store(str(tmp_path / "store")), JobLayout(JOB), signing.new_key())


def spec_json(**changes) -> bytes:
    spec = JobSpec(JOB, "demo", "local", "cell", Resources(cores=2), 60.0, 3, None, created=1.0)
    for name, value in changes.items():
        setattr(spec, name, value)
    return spec.to_json()


# -- every kind of record and object, at the protocol level --------------------------------------------


RECORDS = {  # kind -> (a place, another place of the same kind, a record for either)
    "spec": ("spec.json", "status/0001.json", lambda: spec_json()),
    "status": ("status/0003.json", "status/0002.json", lambda: Status(3, State.RUNNING, machine="m").to_json()),
    "verdict": ("terminal.json", "status/0001.json", lambda: Terminal(State.SUCCEEDED, "done").to_json()),
    "cancel": ("cancel.json", "lease/00000001.json", lambda: b'{"at": 1.0}'),
    "lease": ("lease/00000002.json", "lease/00000001.json", lambda: b'{"holder": "me", "expires": 9e9}'),
    "relaunch": ("relaunch.json", "status/0001.json", lambda: b'{"waiting": {"on_demand": false}, "events": []}'),
    "checkpoint manifest": (
        "checkpoints/manifest/00000005.json",
        "checkpoints/manifest/00000004.json",
        lambda: b'{"number": 5, "state": null, "files": {}}',
    ),
}
OBJECTS = {  # kind -> (a place, another place, content)
    "log chunk": ("logs/0001/00000003", "logs/0001/00000000", b'{"s":"stdout","x":"hi"}\n'),
    "log chunk of another attempt": ("logs/0002/00000000", "logs/0001/00000000", b'{"s":"stdout","x":"hi"}\n'),
    "result": ("result.pkl", "error.pkl", b"pickled values"),
    "checkpoint object": ("checkpoints/state/acc/00000007.pkl", "checkpoints/state/decoy/00000007.pkl", b"state"),
    "checkpoint version": ("checkpoints/state/acc/00000007.pkl", "checkpoints/state/acc/00000004.pkl", b"old"),
    "task results": ("checkpoints/tasks/0002-000000.pkl", "checkpoints/tasks/0001-000000.pkl", b"batch"),
}


@pytest.mark.parametrize("kind", RECORDS)
def test_records_open_only_where_and_for_whom_they_were_sealed(folder, kind):
    place, other, make = RECORDS[kind]
    record = make()
    key, other_key = folder.layout.key(place), folder.layout.key(other)
    folder.put_record(key, record)
    assert json.loads(folder.get_record(key)) == json.loads(record)  # the genuine record opens
    assert "seal" in json.loads(folder.store.get(key))  # and stays readable JSON

    # copied from another place of the job (a replay): the seal names where it belongs
    folder.put_record(other_key, record)
    folder.store.put(key, folder.store.get(other_key))
    with pytest.raises(sealed.Misplaced, match=rf"{place} of job {JOB} failed its place check: it is {other}, copied"):
        folder.get_record(key)

    # altered in place, the seal kept
    fields = json.loads(folder.seal_record(key, record))
    fields["forged"] = True
    folder.store.put(key, json.dumps(fields).encode())
    with pytest.raises(sealed.Altered, match="failed its signature check: it was altered"):
        folder.get_record(key)

    # planted without a seal, or sealed with another job's key
    folder.store.put(key, record)
    with pytest.raises(sealed.Altered, match="is not sealed by nbburst"):
        folder.get_record(key)
    JobFolder(folder.store, folder.layout, signing.new_key()).put_record(key, record)
    with pytest.raises(sealed.Altered, match="failed its signature check"):
        folder.get_record(key)


@pytest.mark.parametrize("kind", OBJECTS)
def test_objects_open_only_where_and_for_whom_they_were_sealed(folder, kind):
    place, other, content = OBJECTS[kind]
    key, other_key = folder.layout.key(place), folder.layout.key(other)
    folder.create_object(key, content)
    assert folder.get_object(key) == content
    folder.create_object(other_key, b"another " + content)
    folder.store.put(key, folder.store.get(other_key))
    with pytest.raises(sealed.Misplaced, match=rf"it is {other}, copied here"):
        folder.get_object(key)
    raw = bytearray(folder.seal_object(key, content))
    raw[-1] ^= 1
    folder.store.put(key, bytes(raw))
    with pytest.raises(sealed.Altered, match="failed its signature check"):
        folder.get_object(key)
    folder.store.put(key, signing.sign(folder.key, content))  # signed, but for no place: the old format
    with pytest.raises(sealed.Altered, match="not sealed to a place"):
        folder.get_object(key)


def test_a_forged_cancel_request_is_ignored_and_said(folder, capfd):
    folder.store.put(folder.layout.cancel, b'{"at": 1.0}')
    assert folder.cancel_requested() is False
    assert folder.cancel_requested() is False
    assert capfd.readouterr().err.count("cancel.json of job") == 1  # said once
    folder.put_record(folder.layout.cancel, b'{"at": 1.0}')
    assert folder.cancel_requested() is True


def test_a_forged_log_chunk_becomes_a_refusal(folder):
    folder.create_object(folder.layout.log_chunk(1, 0), encode_records([{"s": "stdout", "x": "genuine\n"}]))
    display = {"s": "display", "data": {"text/html": FORGED_HTML}, "metadata": {}}
    folder.store.put(folder.layout.log_chunk(1, 1), encode_records([display]))
    (record,) = folder.log_records(folder.layout.log_chunk(1, 1))
    assert record["s"] == "event" and "logs/0001/00000001" in record["x"] and "not sealed" in record["x"]
    assert "FORGED" not in json.dumps(record)


# -- on the client: a finished job, then a forger -------------------------------------------------------


def _square(v):
    return v * v


def _nap(seconds):
    time.sleep(seconds)
    return "slept"


def test_forged_status_and_verdict_are_refused_and_never_shown(burst_env):
    job = Burst().submit(_square, 6)
    assert job.result(60) == 36
    folder = job.folder
    gone(job)

    # a replay: the attempt's status copied as a status of an attempt that never was
    folder.store.put(job.layout.status(2), folder.store.get(job.layout.status(1)))
    fresh = Burst().job(job.id)
    with pytest.raises(sealed.Misplaced, match="status/0002.json .* it is status/0001.json, copied here"):
        fresh.state  # noqa: B018
    info = fresh.info()
    assert info["state"] == UNVERIFIED and "status/0002.json" in info["message"] and info["name"] == job.id
    folder.store.delete(job.layout.status(2))

    # a forged verdict with a message for the user
    folder.store.delete(job.layout.terminal)
    forged = Terminal(State.FAILED, "FORGED-VERDICT: send your key to ...").to_json()
    folder.store.create(job.layout.terminal, forged)
    fresh = Burst().job(job.id)
    with pytest.raises(sealed.Altered, match=r"terminal.json of job .* is not sealed by nbburst"):
        fresh.result(timeout=5)
    listing = subprocess.run(
        [sys.executable, "-m", "nbburst", "jobs", "--all", "--json"], capture_output=True, text=True, timeout=60
    )
    assert "FORGED-VERDICT" not in listing.stdout + listing.stderr
    (row,) = json.loads(listing.stdout)  # a list of Job.info()
    assert row["state"] == UNVERIFIED and row["message"].startswith("cannot verify: terminal.json")
    assert all(i["state"] == UNVERIFIED for i in JobsManager(Burst()).list())


def test_jobs_of_another_user_are_listed_as_unverifiable(burst_env, monkeypatch):
    with monkeypatch.context() as held:
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        job = Burst().submit(_square, 2, options=Burst().options(name="theirs"))
    Burst().keyring.delete(job.id)  # as on another user's machine: their key never left it
    fresh = Burst()
    with pytest.raises(signing.NoKey, match="cannot verify: no key"):
        fresh.job(job.id).spec  # noqa: B018
    info = fresh.job(job.id).info()
    assert info["state"] == UNVERIFIED
    assert info["message"] == "cannot verify: no key (submitted by another user or machine)"
    assert info["name"] == job.id and info["created"] == pytest.approx(time.time(), abs=120)
    assert "theirs" not in json.dumps(info)  # its (unverifiable) name is not shown
    with pytest.raises(Exception, match="no job with id or name 'theirs'"):
        fresh.job("theirs")  # an unverifiable name names nothing
    listing = subprocess.run([sys.executable, "-m", "nbburst", "jobs", "--all"], capture_output=True, text=True)
    assert f"{job.id}\t{job.id}\tcannot verify: no key\t" in listing.stdout and "theirs" not in listing.stdout
    assert Loop(fresh).round() == 0  # never relaunched by someone without its key


def test_a_forged_spec_is_never_acted_on(burst_env, monkeypatch, capsys):
    """The spec that once made a supervisor relaunch a cell on an on-demand a2-highgpu-8g."""
    with monkeypatch.context() as held:
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        job = Burst().submit(_square, 2)
    path = Path(burst_env["root"]) / job.layout.spec
    spec = json.loads(path.read_text())
    spec["resources"].update(machine_type="a2-highgpu-8g", on_demand=True)
    spec["plan"]["machine_type"] = "a2-highgpu-8g"
    path.write_text(json.dumps(spec))  # the seal kept: it no longer matches
    status = job.folder.status(1)
    status.state, status.heartbeat, status.launched = State.RUNNING, time.time() - 600, time.time() - 600
    job.folder.put_status(status)
    stale = time.time() - 600
    os.utime(Path(burst_env["root"]) / job.layout.status(1), (stale, stale))  # its machine is long gone
    fresh = Burst()
    with pytest.raises(sealed.Altered, match="spec.json of job .* failed its signature check"):
        fresh.job(job.id).spec  # noqa: B018
    assert Loop(fresh).round() == 0
    assert "spec.json" in capsys.readouterr().out and fresh.machines("local").list() == []
    assert fresh.job(job.id).info()["state"] == UNVERIFIED


def test_a_forged_cancel_request_does_not_stop_the_job(burst_env):
    job = Burst().submit(_nap, 2.0)
    wait_until(lambda: job.state == State.RUNNING, what="the job to run")
    job.store.put(job.layout.cancel, b'{"at": 0}')  # planted without a key
    assert job.result(60) == "slept"
    assert job.terminal().by == "agent"


# -- in a notebook: a forged display record never reaches it ----------------------------------------------


def test_forged_display_records_never_reach_the_notebook(burst_env):
    root = Path(burst_env["root"])
    planted: list[tuple[str, int]] = []

    def plant() -> None:
        chunk = wait_until(lambda: next(root.glob("jobs/*/logs/0001/00000000"), None), 60, what="the first chunk")
        display = {"s": "display", "data": {"text/html": FORGED_HTML, "text/plain": "FORGED-TEXT"}, "metadata": {}}
        forged = encode_records([{"t": time.time(), **display}])
        taken = len(list(chunk.parent.iterdir()))
        with open(chunk.parent / f"{taken:08d}", "xb") as f:  # the number the agent takes next
            f.write(forged)
        with open(chunk.parent / f"{taken + 5:08d}", "xb") as f:  # a genuine chunk, replayed
            f.write(chunk.read_bytes())
        planted.append((chunk.parent.parent.parent.name, taken))

    planter = threading.Thread(target=plant, daemon=True)
    planter.start()
    nb = run_notebook(
        [
            "%load_ext nbburst",
            "%%burst --name shown\nimport time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second')\nx = 42",
            "print(x)",
        ]
    )
    planter.join(5)
    assert planted, "nothing was planted"
    saved = json.dumps(nb)
    job_id, taken = planted[0]
    assert "FORGED" not in saved  # neither the HTML nor its text, in outputs or in widget state
    assert f"logs/0001/{taken:08d} of job" in saved and "not sealed by nbburst" in saved
    assert f"logs/0001/{taken + 5:08d} of job" in saved and "it is logs/0001/00000000, copied here" in saved
    assert nb.cells[2].outputs[0]["text"] == "42\n"
    job = Burst().job(job_id)
    assert job.state == State.SUCCEEDED and "second" in job.logs() and job.logs().count("first") == 1


# -- checkpoints: swapped, rolled back ------------------------------------------------------------------


def test_checkpoint_swaps_rollbacks_and_old_files_are_refused(tmp_path):
    store, layout, key = open_store(str(tmp_path / "store")), JobLayout(JOB), signing.new_key()
    keys = mirror.Keys(layout)
    root = tmp_path / "m1" / ".nbburst"
    mirror.restore(store, layout, key, root)
    syncer = mirror.Syncer(store, layout, key, root, attempt=1)
    checkpoint.activate(root, key)
    try:
        for i in checkpoint.range(3, name="steps"):
            checkpoint.save("acc", 100 + i)
            checkpoint.save("decoy", -i)
            (checkpoint.folder() / "model.pt").write_bytes(f"weights {i}".encode())
            syncer.flush()
        syncer.flush()
    finally:
        checkpoint.activate(None)
    manifests = store.list(keys.manifests)
    newest = json.loads(JobFolder(store, layout, key).get_record(manifests[-1]))
    head = newest["state"]["commits"][-1]

    def restored(name: str) -> tuple[dict, object, bytes]:
        counts = mirror.restore(store, layout, key, tmp_path / name / ".nbburst")
        checkpoint.activate(tmp_path / name / ".nbburst", key)
        try:
            return counts, checkpoint.load("acc"), (checkpoint.folder() / "model.pt").read_bytes()
        finally:
            checkpoint.activate(None)

    counts, acc, model = restored("intact")
    assert acc == 102 and model == b"weights 2" and "refused" not in counts

    # a file put back at an older version: refused, the rest restored
    older = store.get(keys.file("model.pt"))
    (root / "folder" / "model.pt").write_bytes(b"weights 3")
    syncer.flush()
    newest_file = store.get(keys.file("model.pt"))
    store.put(keys.file("model.pt"), older)
    counts = mirror.restore(store, layout, key, tmp_path / "old-file" / ".nbburst")
    assert any("model.pt is version" in why and "older copy" in why for why in counts["refused"])
    assert not (tmp_path / "old-file" / ".nbburst" / "folder" / "model.pt").exists()
    store.put(keys.file("model.pt"), newest_file)

    # one checkpoint copied over another: that commit is refused, the one before it is used
    acc_key = keys.state_object(f"acc/{head['objects']['acc']:08d}.pkl")
    decoy_key = keys.state_object(f"decoy/{head['objects']['decoy']:08d}.pkl")
    genuine = store.get(acc_key)
    store.put(acc_key, store.get(decoy_key))
    counts, acc, _ = restored("swapped")
    assert acc == 101 and counts["loops"] == 1
    assert any("it is checkpoints/state/decoy/" in why and "copied here" in why for why in counts["refused"])
    assert any("resuming from checkpoint commit" in why for why in counts["refused"])
    store.put(acc_key, genuine)

    # an older manifest copied over the newest: refused, the newest that opens is used
    manifests = store.list(keys.manifests)
    store.put(manifests[-1], store.get(manifests[-2]))
    counts, acc, _ = restored("rolled-back")
    assert any(f"it is {manifests[-2].split('/', 2)[2]}, copied here" in why for why in counts["refused"])
    assert acc == 102  # the upload before: the same commits

    # anything not sealed by this job stops the restore: nothing of such a folder is trusted
    store.put(acc_key, signing.sign(key, b"planted"))
    with pytest.raises(sealed.Altered, match="not sealed to a place"):
        mirror.restore(store, layout, key, tmp_path / "altered" / ".nbburst")


LOOP = """
import nbburst, time
acc = nbburst.checkpoint.load("acc", default=1)
for i in nbburst.checkpoint.range(30):  # steps enough to be still running when the preemption lands
    acc = (acc * 31 + i) % 1_000_003
    nbburst.checkpoint.save("acc", acc)
    nbburst.checkpoint.save("decoy", -i)
    print("step", i, flush=True)
    time.sleep(0.25)
result = acc
"""


def _expected() -> int:
    acc = 1
    for i in range(30):
        acc = (acc * 31 + i) % 1_000_003
    return acc


@pytest.mark.parametrize("attack", ["swap", "rollback"])
def test_a_tampered_checkpoint_is_refused_and_the_job_still_gets_the_right_result(burst_env, attack):
    burst = Burst()
    job = submit(burst, LOOP)
    keys = mirror.Keys(job.layout)
    wait_until(lambda: running_step(job, 4), what="step 4")
    job.preempt(3)
    wait_until(lambda: job.latest_status().state == State.PREEMPTED, what="the attempt to be preempted")
    gone(job)
    store, folder = job.store, job.folder
    manifests = store.list(keys.manifests)
    head = json.loads(folder.get_record(manifests[-1]))["state"]["commits"][-1]
    if attack == "swap":
        acc_key = keys.state_object(f"acc/{head['objects']['acc']:08d}.pkl")
        store.put(acc_key, store.get(keys.state_object(f"decoy/{head['objects']['decoy']:08d}.pkl")))
    else:
        store.put(manifests[-1], store.get(manifests[-2]))
    job.wait(timeout=90)
    assert job.state == State.SUCCEEDED, job.terminal()
    assert job.outcome().values["result"] == _expected()
    logs = job.logs()
    assert "refused:" in logs and "copied here" in logs
    gone(job)


# -- a bucket writer in the way of the real writer, and an attempt that lost its claim -----------------------


def _claim(folder: JobFolder, attempt: int) -> None:
    folder.put_status(Status(attempt, State.PROVISIONING, machine="m"), create=True)
    fence.claim(folder, attempt)


def _verdict_file(tmp_path: Path, folder: JobFolder, content: bytes, attempt: int, kind: str = verdict.RESULT) -> Path:
    """A verdict as a runner of ``attempt`` hands it over (sealed to its place at that attempt)."""
    handoff = verdict.Handoff(tmp_path / f"verdict-{content.hex()}-{attempt}", folder, attempt)
    handoff.clear()
    handoff.hand_over(kind, [content])
    return handoff.folder / kind


def test_a_verdict_is_bound_to_the_attempt_that_held_the_job(folder, tmp_path, capfd):
    """A result sealed by attempt 1 after attempt 2 was claimed is refused; attempt 2's replaces it, and attempt
    1 coming back later cannot put its own back."""
    result = folder.layout.result
    _claim(folder, 1)
    verdict.commit(folder, verdict.RESULT, _verdict_file(tmp_path, folder, b"one", 1), 1)
    assert outcome.verdict_object(folder, result) == (1, b"one")  # no later claim: it counts
    folder.store.delete(result)
    _claim(folder, 2)
    time.sleep(0.05)
    verdict.commit(
        folder, verdict.RESULT, _verdict_file(tmp_path, folder, b"late", 1), 1
    )  # checked, then claimed, then wrote
    with pytest.raises(outcome.Overtaken, match="result.pkl of job .* written by attempt 1 after attempt 2 had taken"):
        outcome.verdict_object(folder, result)
    assert not outcome.holds_verdict(folder, result)
    verdict.commit(folder, verdict.RESULT, _verdict_file(tmp_path, folder, b"two", 2), 2)
    assert outcome.verdict_object(folder, result) == (2, b"two")
    verdict.commit(
        folder, verdict.RESULT, _verdict_file(tmp_path, folder, b"later", 1), 1
    )  # create-only: attempt 2's stays
    verdict.commit(
        folder, verdict.RESULT, _verdict_file(tmp_path, folder, b"two", 2), 2
    )  # a retried write: still one result
    assert outcome.verdict_object(folder, result) == (2, b"two")
    assert "replacing it with attempt 2's" in capfd.readouterr().err


@pytest.mark.parametrize("kind", [verdict.RESULT, verdict.ERROR])
def test_a_planted_verdict_object_does_not_block_the_real_one(folder, tmp_path, capfd, kind):
    key = folder.layout.result if kind == verdict.RESULT else folder.layout.error
    _claim(folder, 1)
    folder.store.create(key, cloudpickle.dumps("FORGED"))  # create-only writes would leave it in place
    assert not outcome.holds_verdict(folder, key)
    verdict.commit(folder, kind, _verdict_file(tmp_path, folder, b"genuine", 1, kind), 1)
    assert outcome.verdict_object(folder, key) == (1, b"genuine")
    assert (
        f"{Path(key).name} of job {JOB} is not sealed by nbburst; refusing it; replacing it" in capfd.readouterr().err
    )


def test_planted_verdicts_claims_and_leases_neither_stop_an_attempt_nor_outlast_the_real_writer(folder, capfd):
    spec = JobSpec.from_json(spec_json())
    _claim(folder, 1)
    folder.store.create(folder.layout.status(2), Status(2, State.PROVISIONING).to_json())  # a forged claim
    assert not fence.superseded(folder, 1)  # attempt 1 goes on
    assert fence.claim_time(folder, 2) is None and fence.stands(folder, 1, folder.layout.terminal)
    folder.store.delete(folder.layout.status(2))

    folder.store.create(folder.layout.terminal, Terminal(State.FAILED, "FORGED-VERDICT").to_json())
    assert outcome.commit_terminal(folder, spec, State.SUCCEEDED, "", 1, "agent", []) == State.SUCCEEDED
    assert folder.terminal().state == State.SUCCEEDED and folder.terminal().by == "agent"

    folder.store.create(folder.layout.claim(2), b"")  # an early claim marker, planted to void attempt 1's verdict
    time.sleep(0.05)
    _claim(folder, 2)
    assert fence.claim_time(folder, 2) == folder.store.updated(folder.layout.claim(2))
    assert fence.claim_time(folder, 2) > folder.store.updated(folder.layout.terminal)
    assert fence.stands(folder, 1, folder.layout.terminal)  # written before the real claim: it counts
    err = capfd.readouterr().err
    assert "status/0002.json of job" in err and "terminal.json of job" in err and "claims/0002" in err


def test_a_bucket_writers_plants_do_not_stop_the_job(burst_env, tmp_path):
    """While the job runs, a forged result, error, lease, relaunch plan and claim marker of the next attempt are
    planted; then its machine is preempted. The supervisor relaunches it past them and the job ends with the
    real result, each plant reported as refused."""
    side = tmp_path / "side.txt"
    job = submit(Burst(), side_loop(side, 30, 0.2))  # still running when preempted, however busy
    wait_until(lambda: running_step(job, 3), what="step 3")
    store, layout = job.store, job.layout
    for key in (layout.result, layout.error):
        store.put(key, cloudpickle.dumps({"result": "FORGED"}))
    store.put(layout.lease_prefix + "99999999.json", b'{"holder": "forger", "seconds": 1e9}')
    store.put(layout.relaunch, b'{"waiting": {"attempt": 1, "next_try": 9e18}, "events": []}')
    store.put(layout.claim(2), b"")
    job.preempt(2)
    assert job.wait(timeout=120) == State.SUCCEEDED, job.terminal()
    assert job.terminal().attempt == 2
    assert job.outcome().values["result"] == expected_loop(30)
    assert attempts_never_overlap(side)
    gone(job)


def test_a_launch_counts_the_time_left_by_the_stores_clock(burst_env, monkeypatch):
    """The VM's maxRunDuration is the job's time left by the Store's clock: a relauncher whose clock is an hour
    off neither cuts it to nothing nor stretches it by an hour."""
    with monkeypatch.context() as held:
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        job = submit(Burst(), "x = 1", timeout="10m")
    machines = GCEMachines(Burst().settings)  # its Store is the local one of this test
    plan = {**job.spec.plan, "machine_type": "e2-standard-2"}
    real = time.time
    for shift in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda s=shift: real() + s)
        resource = machines.instance_resource(job.spec, job.url, "a-secret", 2, "us-central1-a", plan, True)
        assert 590 < resource.scheduling.max_run_duration.seconds <= 600 + GCEMachines.run_margin_s


def test_a_forged_object_the_job_needs_fails_it_once_with_the_reason(burst_env):
    """Every attempt would meet it again: the job fails at once and says which object, instead of being taken
    for preempted and relaunched until --max-restarts runs out."""
    with pytest.MonkeyPatch.context() as held:
        held.setattr(LocalMachines, "launch", lambda self, *a, **k: "held")
        job = Burst().submit(_square, 3)
    job.store.put(job.layout.env, b'{"python": "3.11", "forged": true}')
    job.start_machine(job.latest_status(), job.spec)
    assert job.wait(timeout=60) == State.FAILED
    assert "env.json does not match the signed job spec" in job.terminal().reason
    assert [row["attempt"] for row in job.attempts()] == [1]
    gone(job)


def test_a_big_object_is_used_in_place_once_checked_and_refused_if_altered(folder):
    """Mapped, not copied (LocalStore.get_buffer): checked all the same, down to one flipped byte at the end;
    writing into what was read leaves the Store's object as it was."""
    key = folder.layout.result
    content = os.urandom(3 << 20) * 7  # 21 MiB: read in pieces
    folder.put_object(key, content, version=1)
    version, view = folder.get_view(key)
    assert version == 1 and view == content and not view.readonly
    view[:4] = b"mine"
    assert folder.get_view(key)[1] == content
    path = Path(folder.store.url) / key
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(sealed.Altered, match="failed its signature check"):
        folder.get_view(key)
