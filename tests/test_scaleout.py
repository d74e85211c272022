"""``--workers N``: one cell on a Dask scheduler beside it and N worker machines (local backend, Compute emulator)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from support import LARGE_QUOTAS, machines_gone, wait_until

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job
from nbburst.errors import UnsupportedOption, UsageError
from nbburst.machines.base import RUNNING, machine_name, worker_name
from nbburst.protocol import cluster, processes
from nbburst.protocol.job import State, worker_id
from nbburst.ui.viewmodel import workers_html

pytest.importorskip("distributed")

#: joblib tasks that say where they ran: the Dask worker's name (its machine) and its process.
WHERE = """
import os, time
import joblib
from distributed import get_client, get_worker

def where(i):
    time.sleep(0.2)
    return get_worker().name, os.getpid()

client = get_client()
ran = joblib.Parallel(n_jobs=-1)(joblib.delayed(where)(i) for i in range(12))
workers = len(client.scheduler_info(n_workers=-1)["workers"])
"""

SEARCH = """
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV

X, y = make_classification(n_samples=200, n_features=6, random_state=0)
search = GridSearchCV(LogisticRegression(), {"C": [0.01, 0.1, 1.0]}, cv=2, n_jobs=-1)
search.fit(X, y)
best = search.best_params_
"""

#: Slow enough that a worker can be preempted while tasks are out; each task says which process ran it.
SLOW = """
import os, time
import joblib

def slow(i):
    time.sleep(0.5)
    return i * i, os.getpid()

out = joblib.Parallel(n_jobs=-1)(joblib.delayed(slow)(i) for i in range(40))
squares = [v for v, _ in out]
"""


def submit(burst: Burst, code: str, **options) -> Job:
    return burst.submit_cell(code, capture(code, {}, None, set()), burst.options(**options))


def nothing_left(job: Job) -> None:
    """No machine of the job (its own or a worker) is listed, and no process carries a marker of either."""
    machines_gone(job.machines, job.id)
    for index in range(job.spec.resources.workers or 0):
        wait_until(lambda i=index: not processes.marked(worker_id(job.id, i)), 60, what=f"worker {index} to end")
    assert not processes.marked(job.id)


def test_joblib_spreads_over_two_worker_machines(burst_env):
    job = submit(Burst(), WHERE, workers=2)
    assert job.wait(timeout=120) == State.SUCCEEDED, (job.terminal(), job.logs())
    values = job.outcome().values
    machines = {name.rsplit("-", 1)[0] for name, _ in values["ran"]}
    assert machines == {worker_name(job.id, 0), worker_name(job.id, 1)}, values["ran"]
    assert len({pid for _, pid in values["ran"]}) >= 2
    assert values["workers"] == 2
    nothing_left(job)


def test_the_cluster_record_holds_the_worker_key_encrypted_and_workers_still_join(burst_env):
    job = submit(Burst(), WHERE, workers=1)
    assert job.wait(timeout=120) == State.SUCCEEDED, (job.terminal(), job.logs())
    assert job.outcome().values["workers"] == 1  # the worker opened the key and joined
    (key,) = job.folder.store.list(job.folder.layout.cluster_prefix)
    raw = job.folder.store.get(key)
    assert b"PRIVATE KEY" not in raw and b"key_sealed" in raw
    sealed = cluster.latest(job.folder)["tls"]
    opened = cluster.open_tls(sealed, job.key(), job.id, 1)
    assert opened["key"].startswith("-----BEGIN PRIVATE KEY-----")
    with pytest.raises(InvalidTag):  # bound to its attempt (and job): a record's key opens nowhere else
        cluster.open_tls(sealed, job.key(), job.id, 2)
    nothing_left(job)


def test_grid_search_best_params_equal_local(burst_env):
    ns: dict = {}
    exec(SEARCH, ns)
    job = submit(Burst(), SEARCH, workers=2)
    assert job.wait(timeout=120) == State.SUCCEEDED, (job.terminal(), job.logs())
    assert job.outcome().values["best"] == ns["best"]
    nothing_left(job)


def test_preempted_worker_is_replaced_and_the_job_succeeds(burst_env):
    burst = Burst()
    job = submit(burst, SLOW, workers=2)
    waiter = threading.Thread(target=lambda: job.wait(timeout=180))
    waiter.start()
    first = worker_name(job.id, 0)
    wait_until(lambda: job.machines.describe(first).state == RUNNING, what="worker 0")
    wait_until(lambda: "joining" in job.machines.console(first), 180, what="worker 0 to join")
    shown = wait_until(lambda: job.info()["workers"], what="the workers in the job's summary")
    assert shown["count"] == 2 and shown["states"] == {RUNNING: 2} and shown["cost_usd"] == 0.0
    assert "2 workers (2 running)" in workers_html(shown, priced=False)
    pid = job.machines.describe(first).detail
    job.machines.preempt(first, 1.0)
    wait_until(lambda: job.machines.describe(first).detail not in ("", pid), 180, what="worker 0 relaunched")
    waiter.join(200)
    assert job.state == State.SUCCEEDED, (job.terminal(), job.logs())
    assert job.outcome().values["squares"] == [i * i for i in range(40)]
    assert job.attempt == 1  # the job's own machine was never relaunched
    nothing_left(job)


def test_a_preempted_job_machine_is_relaunched_and_its_workers_join_the_new_scheduler(burst_env):
    job = submit(Burst(), SLOW, workers=1, max_restarts=2)
    waiter = threading.Thread(target=lambda: job.wait(timeout=180))
    waiter.start()
    worker = worker_name(job.id, 0)
    wait_until(lambda: "(attempt 1)" in job.machines.console(worker), 180, what="the worker to join attempt 1")
    wait_until(lambda: job.state == State.RUNNING, what="the cell to run")
    job.preempt(1.0)
    waiter.join(200)
    assert job.state == State.SUCCEEDED, (job.terminal(), job.logs())
    assert job.attempt == 2 and job.outcome().values["squares"] == [i * i for i in range(40)]
    assert "(attempt 2)" in job.machines.console(worker)  # the same worker machine, now serving attempt 2
    nothing_left(job)


def test_gc_removes_a_worker_machine_left_behind(burst_env, capsys):
    from nbburst.ui import cli

    burst = Burst()
    job = submit(burst, "x = 1", workers=1)
    assert job.wait(timeout=120) == State.SUCCEEDED, (job.terminal(), job.logs())
    nothing_left(job)
    left = job.machines.launch_worker(job.spec, job.url, job.key(), 0, 2)  # as a lost client would leave it
    pid = int(job.machines.describe(left).detail.split()[-1])
    os.killpg(pid, signal.SIGSTOP)  # a worker that cannot end itself (it would on seeing the verdict)
    assert [m.name for m in job.machines.list(job.id)] == [left]
    assert cli.main(["gc"]) == cli.EXIT_OK
    assert f"deleted machine {left} (local): its job ended (SUCCEEDED)" in capsys.readouterr().out
    nothing_left(job)


def test_bad_worker_counts_are_refused_before_launch(burst_env):
    burst = Burst()
    with pytest.raises(UsageError, match="--workers: must be at least 1"):
        burst.options(workers=0)
    with pytest.raises(UsageError, match="--workers"):
        burst.options(workers=-3)


def test_a_backend_without_worker_machines_refuses(burst_env):
    from nbburst.machines.local import LocalMachines
    from nbburst.protocol.job import Resources

    class Single(LocalMachines):
        backend = "single"
        scale_out = False

    with pytest.raises(UnsupportedOption, match="--workers: the single backend cannot start worker machines"):
        Single(Burst().settings).plan(Resources(workers=2))


@pytest.mark.slow
def test_scaleout_notebook(burst_env, tmp_path):
    """notebooks/scaleout.ipynb: a search on two worker machines finds the parameters a local search finds."""
    import nbformat
    from support.nbrun import error, run, stream

    root = Path(__file__).resolve().parents[1]
    nb = run(nbformat.read(root / "notebooks" / "scaleout.ipynb", as_version=4), cwd=tmp_path, timeout=300)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(error(c.outputs) is None for c in code), [error(c.outputs) for c in code]
    text = "".join(stream(c.outputs) for c in code)
    assert "2 workers; best parameters:" in text and "same best parameters as locally: True" in text, text


def spread(n: int) -> list[tuple[str, int]]:
    """Tasks through joblib's default backend (Dask inside a --workers job): which worker, which process."""
    import os
    import time

    import joblib
    from distributed import get_worker

    def where(i: int) -> tuple[str, int]:
        time.sleep(0.2)
        return get_worker().name, os.getpid()

    return joblib.Parallel(n_jobs=-1)(joblib.delayed(where)(i) for i in range(n))


@pytest.mark.compute_emulator(operation_delay=0.02, quotas=LARGE_QUOTAS)
def test_two_worker_vms_on_the_compute_emulator(gce_env, compute_emulator, secretmanager_emulator):
    burst = Burst()
    job = burst.submit(spread, 12, options=burst.options(backend="gce", cores=2, workers=2))
    names = [worker_name(job.id, i) for i in range(2)]
    project, zone = gce_env["NBBURST_PROJECT"], gce_env["NBBURST_ZONE"]
    vms = {name: compute_emulator.api_get(project, zone, name) for name in [machine_name(job.id), *names]}
    for name in names:  # the job's labels, limits and network tag, and the worker's index
        vm = vms[name]
        assert vm["labels"]["nbburst-job"] == job.id and vm["tags"]["items"] == ["nbburst-dask"]
        limit, own = (int(v["scheduling"]["maxRunDuration"]["seconds"]) for v in (vm, vms[machine_name(job.id)]))
        assert abs(limit - own) <= 60 and vm["scheduling"]["instanceTerminationAction"] == "STOP"
        assert {"key": "nbburst-worker", "value": name[-1]} in vm["metadata"]["items"]
    assert job.wait(timeout=240) == State.SUCCEEDED, (job.terminal(), job.logs())
    ran = job.outcome().last
    assert {name.rsplit("-", 1)[0] for name, _ in ran} == set(names), ran
    for name in [machine_name(job.id), *names]:  # every VM deletes itself (or the client does)
        assert compute_emulator.wait_for_status(name, "DELETED", timeout=30) == "DELETED"


@pytest.mark.compute_emulator(quotas={"CPUS": 8, "CPUS_ALL_REGIONS": 8})
def test_worker_quota_is_checked_before_launch(gce_env, compute_emulator):
    burst = Burst()
    burst.options(backend="gce", cores=4)  # one 4-vCPU VM fits
    with pytest.raises(UsageError, match=r"3 spot VMs \(the job's and 2 workers\).* needs 12 CPUS"):
        burst.machines("gce").plan(burst.options(backend="gce", cores=4, workers=2).resources)
    assert not compute_emulator.instances()
