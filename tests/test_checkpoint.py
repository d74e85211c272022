"""nbburst.checkpoint in a plain process, the Store mirror, joblib resume and the metadata watcher (no machines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import nbburst
from nbburst import checkpoint
from nbburst.agent.attempt import checkpoints as mirror
from nbburst.agent.attempt import preemption
from nbburst.agent.hooks import taskreuse as resume
from nbburst.protocol import signing
from nbburst.protocol.job import JobLayout
from nbburst.store import open_store


@pytest.fixture
def ckpt_dir(tmp_path, monkeypatch):
    """The API pointed at a fresh folder, as in a plain kernel."""
    monkeypatch.setenv(checkpoint.ENV_DIR, str(tmp_path / "ckpt"))
    monkeypatch.delenv("NBBURST_JOB_KEY", raising=False)
    checkpoint.activate(None)
    yield tmp_path / "ckpt"
    checkpoint.activate(None)


def test_public_name_and_plain_kernel_default(tmp_path, monkeypatch):
    monkeypatch.delenv(checkpoint.ENV_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    checkpoint.activate(None)
    try:
        assert nbburst.checkpoint is checkpoint
        checkpoint.save("x", {"a": 1})
        assert checkpoint.load("x") == {"a": 1}
        assert (tmp_path / ".nbburst-checkpoints" / "state" / "manifest.json").exists()
        assert checkpoint.folder() == tmp_path / ".nbburst-checkpoints" / "folder"
    finally:
        checkpoint.activate(None)


def test_save_load_versions_and_default(ckpt_dir):
    with pytest.raises(KeyError):
        checkpoint.load("model")
    assert checkpoint.load("model", default=None) is None
    for v in range(5):
        checkpoint.save("model", {"v": v})
    assert checkpoint.load("model") == {"v": 4}
    assert checkpoint.load("model", version=-2) == {"v": 3}
    assert len(checkpoint.versions("model")) == checkpoint.KEEP
    assert checkpoint.load("model", version=-checkpoint.KEEP) == {"v": 2}
    files = list((ckpt_dir / "state" / "model").glob("*.pkl"))
    assert len(files) == checkpoint.KEEP  # older versions are collected
    checkpoint.save("other/name with spaces", [1, 2])
    assert checkpoint.names() == ["model", "other/name with spaces"]


def test_a_partial_write_is_never_loaded(ckpt_dir):
    checkpoint.save("w", "good")
    # a writer killed mid-way leaves a temporary file and an unreferenced object: neither is seen
    (ckpt_dir / "state" / "w" / ".tmp-00000099.pkl-1-1").write_bytes(b"\x80\x05garbage")
    (ckpt_dir / "state" / "w" / "00000099.pkl").write_bytes(b"\x80\x05half")
    assert checkpoint.load("w") == "good"
    manifest = ckpt_dir / "state" / "manifest.json"
    before = manifest.read_bytes()
    with pytest.raises(checkpoint.CheckpointError, match="cannot be pickled"):
        checkpoint.save("w", threading.Lock())
    assert manifest.read_bytes() == before and checkpoint.load("w") == "good"


def _training(stop_after: int | None = None) -> list[int]:
    """A loop whose state must stay consistent with its iteration count."""
    state = checkpoint.load("state", default=[])
    for epoch in checkpoint.range(6):
        state = state + [epoch]
        checkpoint.save("state", state)
        if stop_after is not None and epoch == stop_after:
            raise KeyboardInterrupt  # "preempted" in the middle of the loop, after the save
    return state


def test_range_resumes_after_the_last_committed_iteration(ckpt_dir):
    with pytest.raises(KeyboardInterrupt):
        _training(stop_after=3)
    checkpoint.activate(None)  # a new process: fresh loop bookkeeping
    # iteration 3 saved but did not end: it is redone from the state of iteration 2
    assert checkpoint.load("state") == [0, 1, 2]
    assert _training() == [0, 1, 2, 3, 4, 5]
    checkpoint.activate(None)
    assert _training() == [0, 1, 2, 3, 4, 5]  # finished: nothing runs again
    assert list(checkpoint.range(3, name="fresh")) == [0, 1, 2]


def test_range_arguments_nested_loops_and_break(ckpt_dir):
    assert list(checkpoint.range(2, 11, 3, name="steps")) == [2, 5, 8]
    seen = []

    def nested(crash_at=None):
        for outer in checkpoint.range(3, name="outer"):
            for inner in checkpoint.range(2, name="inner"):
                seen.append((outer, inner))
                if (outer, inner) == crash_at:
                    raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        nested(crash_at=(1, 1))
    checkpoint.activate(None)
    seen.clear()
    nested()
    assert seen == [(1, 1), (2, 0), (2, 1)]  # (1, 0) was committed, the inner loop restarts per outer value

    checkpoint.activate(None)
    for i in checkpoint.range(5, name="brk"):
        checkpoint.save("b", i)
        if i == 2:
            break
    checkpoint.activate(None)
    # the breaking iteration stays uncommitted: a rerun redoes it from iteration 1's state
    assert checkpoint.load("b") == 1
    assert next(iter(checkpoint.range(5, name="brk"))) == 2


def test_saves_outside_a_loop_and_from_other_threads_commit_at_once(ckpt_dir):
    it = iter(checkpoint.range(3, name="t"))
    assert next(it) == 0
    checkpoint.save("inside", 1)
    t = threading.Thread(target=checkpoint.save, args=("hook", "saved by a hook"))
    t.start()
    t.join()
    assert json.loads((ckpt_dir / "state" / "manifest.json").read_text())["commits"][-1]["objects"].keys() == {"hook"}
    assert checkpoint.load("inside") == 1  # read-your-writes within the open iteration
    next(it)
    assert set(checkpoint.names()) == {"hook", "inside"}


def test_kernel_cells_rerun_skip_finished_loops_and_clear_starts_over(tmp_path):
    """The same cell in a plain process (as in a kernel without %%burst), run three times."""
    cell = textwrap.dedent("""
        import nbburst, sys
        total = nbburst.checkpoint.load("total", default=0)
        for i in nbburst.checkpoint.range(4):
            total += i
            nbburst.checkpoint.save("total", total)
            print("ran", i)
            if len(sys.argv) > 1 and i == int(sys.argv[1]):
                raise SystemExit(3)
        print("total", total)
    """)
    env = {k: v for k, v in os.environ.items() if k not in (checkpoint.ENV_DIR, "NBBURST_JOB_KEY")}
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-c", cell, *a],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    first = run("1")
    assert first.returncode == 3 and first.stdout.split("\n")[:2] == ["ran 0", "ran 1"]
    second = run()
    assert second.stdout.splitlines() == ["ran 1", "ran 2", "ran 3", "total 6"]
    assert run().stdout.splitlines() == ["total 6"]
    subprocess.run(
        [sys.executable, "-c", "import nbburst; nbburst.checkpoint.clear()"],
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=60,
    )
    assert run().stdout.splitlines() == ["ran 0", "ran 1", "ran 2", "ran 3", "total 6"]


def test_store_mirror_round_trip_signed_and_verified(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "store"))
    layout = JobLayout("b20260101-000000-abcdef")
    key = signing.new_key()
    root = tmp_path / "machine1" / ".nbburst"
    mirror.restore(store, layout, key, root)
    syncer = mirror.Syncer(store, layout, key, root, attempt=1)
    checkpoint.activate(root, key, on_change=syncer.kick, on_sync=syncer.flush)
    try:
        it = iter(checkpoint.range(10, name="epochs"))
        for _ in range(3):
            i = next(it)
            checkpoint.save("weights", list(range(i + 1)))
        (checkpoint.folder() / "sub").mkdir()
        (checkpoint.folder() / "sub" / "model.pt").write_bytes(b"torch bytes" * 1000)
        (root / "tasks" / "abc.pkl").write_bytes(b"\x80\x05N.")
        checkpoint.sync()
        objects = store.list(layout.checkpoints)
        assert layout.checkpoints + "manifest/00000001.json" in objects  # versioned: one manifest per upload
        assert layout.checkpoints + "files/sub/model.pt" in objects
        assert any(k.startswith(layout.checkpoints + "tasks/0001-") for k in objects)
        assert store.get(layout.checkpoints + "files/sub/model.pt").startswith(signing.MAGIC)
    finally:
        checkpoint.activate(None)

    # a new machine: everything comes back, verified
    root2 = tmp_path / "machine2" / ".nbburst"
    counts = mirror.restore(store, layout, key, root2)
    assert counts == {"objects": 2, "files": 1, "tasks": 1, "loops": 1}
    checkpoint.activate(root2, key)
    try:
        assert checkpoint.load("weights") == [0, 1]  # iteration 2 was still open
        assert next(iter(checkpoint.range(10, name="epochs"))) == 2
        assert (checkpoint.folder() / "sub" / "model.pt").read_bytes() == b"torch bytes" * 1000
    finally:
        checkpoint.activate(None)

    # a tampered object, or another job's key, is refused
    with pytest.raises(signing.SignatureError):
        mirror.restore(store, layout, signing.new_key(), tmp_path / "machine3")
    obj = next(k for k in store.list(layout.checkpoints + "state/weights/"))
    raw = bytearray(store.get(obj))
    raw[-2] ^= 1
    store.put(obj, bytes(raw))
    with pytest.raises(signing.SignatureError):
        mirror.restore(store, layout, key, tmp_path / "machine4")


def test_joblib_tasks_are_cached_and_resumed(tmp_path):
    """Task results survive a "preemption" (a new process) and are not recomputed; keys are deterministic."""
    script = textwrap.dedent("""
        import json, sys
        from nbburst.agent.hooks import taskreuse as resume
        resume.install(sys.argv[1])
        import numpy as np
        from joblib import Parallel, delayed
        big = np.arange(200_000, dtype=float)
        def work(i, arr):
            return float(arr[i] * 2)
        out = Parallel(n_jobs=2)(delayed(work)(i, big) for i in range(12))
        seq = Parallel(n_jobs=1)(delayed(work)(i, big) for i in range(3))
        print(json.dumps({"out": out, "seq": seq, **resume.stats()}))
    """)
    tasks = tmp_path / "tasks"
    first = subprocess.run([sys.executable, "-c", script, str(tasks)], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    a = json.loads(first.stdout)
    assert a["out"] == [i * 2.0 for i in range(12)] and a["hits"] == 0 and a["runs"] == 15
    assert len(list(tasks.glob("*.pkl"))) == 15
    for extra in sorted(tasks.glob("*.pkl"))[:10]:
        extra.unlink()  # as if these had not been uploaded before the machine went
    second = subprocess.run([sys.executable, "-c", script, str(tasks)], capture_output=True, text=True, timeout=120)
    b = json.loads(second.stdout)
    assert b["out"] == a["out"] and b["seq"] == a["seq"]
    assert b["hits"] == 5 and b["runs"] == 10


def test_joblib_patch_is_lazy_and_reversible(tmp_path):
    code = (
        "import sys; from nbburst.agent.hooks import taskreuse as resume; resume.install(sys.argv[1]); "
        "print('joblib' in sys.modules); import joblib.parallel as p; print(p.Parallel.__call__ is resume._call); "
        "resume.uninstall(); print(p.Parallel.__call__ is resume._call)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True", "False"], out.stderr


def test_metadata_watcher_sees_preemption_and_maintenance():
    from nbburst.testing import MetadataServer

    seen: list[tuple[str, str]] = []
    with MetadataServer({"instance/preempted": "FALSE", "instance/maintenance-event": "NONE"}) as md:
        watcher = preemption.MetadataWatcher(
            md.host, on_preempt=lambda r: seen.append(("preempt", r)), on_migrate=lambda r: seen.append(("migrate", r))
        ).start()
        try:
            time.sleep(0.3)
            assert seen == []
            md.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
            _until(lambda: "migrate" in [k for k, _ in seen])
            md.set("instance/maintenance-event", "NONE")
            md.set("instance/preempted", "TRUE")
            _until(lambda: "preempt" in [k for k, _ in seen])
            assert "preempted" in seen[-1][1]
        finally:
            watcher.stop()
            md.set("instance/preempted", "FALSE")  # wakes the hanging GETs


def test_metadata_host_detection(monkeypatch):
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    assert preemption.metadata_host() == "127.0.0.1:9"
    assert preemption.budget() == preemption.GCE_BUDGET
    monkeypatch.setenv(preemption.ENV_BUDGET, "4.5")
    assert preemption.budget() == 4.5


def _until(cond, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_resume_keys_ignore_sklearn_config_wrapper():
    pytest.importorskip("sklearn")
    from sklearn.utils.parallel import delayed

    def f(x):
        return x

    a = delayed(f)(1)[0].with_config_and_warning_filters({"a": 1}, [("ignore", None, Warning, None, 0)])
    b = delayed(f)(1)[0].with_config_and_warning_filters({"a": 2}, [])
    assert resume._task_keys(0, [(a, (1,), {})]) == resume._task_keys(0, [(b, (1,), {})])
    assert resume._task_keys(0, [(a, (1,), {})]) != resume._task_keys(1, [(a, (1,), {})])


KEYS_SCRIPT = """
import json, sys
import joblib.parallel
from nbburst.agent.hooks import taskreuse as resume
keys = []
def record(self, iterable):
    tasks = list(iterable)
    keys.append(resume._task_keys(len(keys), tasks))
    return [None] * len(tasks)
joblib.parallel.Parallel.__call__ = record
ns = {"__name__": "__main__"}
exec(compile(sys.argv[1], "<cell>", "exec"), ns)
print(json.dumps(keys))
"""

SEARCHES = """
from scipy.stats import loguniform
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.model_selection import GridSearchCV, RandomizedSearchCV, cross_validate
class Mine(SGDClassifier):
    def fit(self, X, y, **kw):
        return super().fit(X, y, **kw)
X, y = load_iris(return_X_y=True)
for search in (GridSearchCV(LogisticRegression(max_iter=50), {"C": [0.1, 1.0]}, cv=3, n_jobs=2),
               RandomizedSearchCV(Mine(random_state=0), {"alpha": loguniform(1e-5, 1e-1)}, n_iter=3, cv=3,
                                  n_jobs=2, random_state=1)):
    try:
        search.fit(X, y)
    except Exception:
        pass  # no results came back: only the keys matter here
try:
    cross_validate(Mine(random_state=0), X, y, cv=4, n_jobs=2)
except Exception:
    pass
"""


def test_task_keys_are_the_same_in_every_process():
    """Keys of GridSearchCV, RandomizedSearchCV (scipy distributions) and cross_validate tasks, with a
    class defined in the cell, do not depend on the process (hash seed, global RandomState, callback ids)."""
    pytest.importorskip("sklearn")
    runs = [
        subprocess.run([sys.executable, "-c", KEYS_SCRIPT, SEARCHES], capture_output=True, text=True, timeout=120)
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    first, second = (json.loads(r.stdout) for r in runs)
    assert [len(k) for k in first] == [6, 9, 4]
    assert first == second
    assert len({k for call in first for k in call}) == 19
