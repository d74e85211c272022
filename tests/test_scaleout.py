"""``--workers N``: one cell on a Dask scheduler beside it and N worker machines (local backend, Compute emulator)."""

from __future__ import annotations

import threading

import pytest
from support import machines_gone, wait_until

from nbburst.client.burst import Burst, Job
from nbburst.client.capture import capture
from nbburst.errors import UnsupportedOption, UsageError
from nbburst.machines.base import RUNNING, worker_name
from nbburst.protocol import processes
from nbburst.protocol.job import State, worker_id

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

X, y = make_classification(n_samples=300, n_features=8, random_state=0)
search = GridSearchCV(LogisticRegression(max_iter=500), {"C": [0.01, 0.1, 1.0, 10.0]}, cv=3, n_jobs=-1)
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
    machines_gone(job.machines, job.id, timeout=15)
    for index in range(job.spec.resources.workers or 0):
        wait_until(lambda i=index: not processes.marked(worker_id(job.id, i)), 10, what=f"worker {index} to end")
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
    wait_until(lambda: job.machines.describe(first).state == RUNNING, 30, what="worker 0")
    wait_until(lambda: "joining" in job.machines.console(first), 60, what="worker 0 to join")
    pid = job.machines.describe(first).detail
    job.machines.preempt(first, 1.0)
    wait_until(lambda: job.machines.describe(first).detail not in ("", pid), 60, what="worker 0 relaunched")
    waiter.join(200)
    assert job.state == State.SUCCEEDED, (job.terminal(), job.logs())
    assert job.outcome().values["squares"] == [i * i for i in range(40)]
    assert job.attempt == 1  # the job's own machine was never relaunched
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
