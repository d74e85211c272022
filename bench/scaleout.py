"""Scale-out on the local backend: a search of sleep-bound fits on 1, 2 and 4 worker machines.

Each ``%%burst --workers N --cores 1`` cell runs a GridSearchCV whose fits sleep (so the worker count, not this
computer's cores, bounds the speed) and times the search inside the cell (boot, and the workers' first import of
scikit-learn, left out). Prints per
N: the search's seconds, the speedup against 1 worker, and the overhead per task (the time beyond a perfect
spread of the sleeps, divided by the tasks), next to the same search on a plain ``distributed.LocalCluster`` of
N one-thread workers in this process, and the ratio of the two overheads.

Run: python bench/scaleout.py [--fits 48] [--sleep 0.2] [--workers 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import kill_agents  # noqa: E402

SEARCH = """
import time
import numpy as np
from distributed import get_client
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import GridSearchCV

class Sleepy(ClassifierMixin, BaseEstimator):
    def __init__(self, c=0, pause=PAUSE):
        self.c, self.pause = c, pause

    def fit(self, X, y):
        time.sleep(self.pause)
        self.classes_ = np.unique(y)
        return self

    def predict(self, X):
        return np.full(len(X), self.classes_[0])

X = np.arange(40.0).reshape(20, 2)
y = np.arange(20) % 2
search = GridSearchCV(Sleepy(), {"c": list(range(CANDIDATES))}, cv=2, n_jobs=-1, refit=False)
get_client().run(lambda: __import__("sklearn.model_selection"))  # every worker's imports, before the clock starts
GridSearchCV(Sleepy(pause=0.0), search.param_grid, cv=2, n_jobs=-1, refit=False).fit(X, y)  # and a first round
t0 = time.perf_counter()
search.fit(X, y)
seconds = time.perf_counter() - t0
"""


def cell(fits: int, pause: float) -> str:
    return SEARCH.replace("PAUSE", repr(pause)).replace("CANDIDATES", str(fits // 2))


def burst_seconds(code: str, workers: int, work: Path) -> float:
    from nbburst.client.burst import Burst
    from nbburst.client.capture import capture
    from nbburst.client.supervision import laptop
    from nbburst.config import load
    from nbburst.protocol.job import State

    os.environ.update(
        {
            "NBBURST_ROOT": str(work / "store"),
            "NBBURST_STATE_DIR": str(work / "state"),
            "NBBURST_BACKEND": "local",
            "NBBURST_RESUME_TASKS": "0",  # every run fits anew
        }
    )
    burst = Burst()
    try:
        job = burst.submit_cell(code, capture(code, {}, None, set()), burst.options(workers=workers, cores=1))
        state = job.wait(timeout=600)
        if state != State.SUCCEEDED:
            raise SystemExit(f"--workers {workers}: {state.value}: {job.terminal()}\n{job.logs()[-3000:]}")
        return job.outcome().values["seconds"]
    finally:
        laptop.stop_all(load())
        kill_agents(str(work / "store"))


def local_cluster_seconds(code: str, workers: int) -> float:
    import joblib
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster), joblib.parallel_config(backend="dask"):
        ns: dict = {}
        exec(code, ns)
        return ns["seconds"]


def overhead(seconds: float, fits: int, pause: float, workers: int) -> float:
    """Seconds per task beyond a perfect spread of the sleeps over ``workers`` one-thread workers."""
    ideal = -(-fits // workers) * pause
    return max(0.0, seconds - ideal) / fits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=48)
    parser.add_argument("--sleep", type=float, default=0.2)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    code = cell(args.fits, args.sleep)
    print(f"{args.fits} fits of {args.sleep} s each; search time inside the cell")
    print(f"{'workers':>7} {'burst s':>8} {'speedup':>8} {'task ms':>8} {'plain s':>8} {'task ms':>8} {'ratio':>6}")
    base = None
    with tempfile.TemporaryDirectory(prefix="nbburst-scaleout-") as tmp:
        for n in args.workers:
            ours = burst_seconds(code, n, Path(tmp) / f"w{n}")
            plain = local_cluster_seconds(code, n)
            base = base or ours
            mine, theirs = (overhead(s, args.fits, args.sleep, n) for s in (ours, plain))
            ratio = mine / theirs if theirs else float("nan")
            print(
                f"{n:>7} {ours:>8.2f} {base / ours:>7.2f}x {mine * 1e3:>8.1f} {plain:>8.2f} {theirs * 1e3:>8.1f}"
                f" {ratio:>5.2f}x"
            )


if __name__ == "__main__":
    main()
