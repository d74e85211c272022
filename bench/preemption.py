"""What a preemption costs, measured side by side in one run (local backend; Compute emulator if present).

(a) work redone per preemption vs. the checkpoint interval: a 24-step loop (0.1 s a step) that
    commits every k steps (nbburst.checkpoint.range over chunks of k), preempted mid-way; redone
    steps are counted from what the cell really executed. Expect about k/2 on average (at most k),
    and the whole run without checkpoints.
(b) a RandomizedSearchCV preempted half-way: fits computed twice vs. fits in flight (n_jobs);
    target: at most the fits in flight. Also the cost of keeping task results: the same search
    uninterrupted with and without it.
(c) resume latency: from the preemption notice to the PREEMPTED verdict, to the next attempt
    running, and to its first output line.

Run: python bench/preemption.py [--repeat 2] [--no-gce]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

LOOP = """
import nbburst, time
with open(SIDE, "a") as side:
    for chunk in nbburst.checkpoint.range(STEPS // K):
        for s in range(K):
            time.sleep(0.1)
            side.write(f"{chunk * K + s}\\n")
            side.flush()
            if chunk * K + s == 0:
                print("first step", flush=True)
done = True
"""

PLAIN = """
import time
with open(SIDE, "a") as side:
    for step in range(STEPS):
        time.sleep(0.1)
        side.write(f"{step}\\n")
        side.flush()
        if step == 0:
            print("first step", flush=True)
done = True
"""

SEARCH = """
import time
from scipy.stats import loguniform
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import RandomizedSearchCV

class Timed(SGDClassifier):
    def fit(self, X, y, **kw):
        with open(SIDE, "a") as f:
            f.write(f"{self.alpha!r} {float(X.sum()):.4f}\\n")
        time.sleep(0.1)
        return super().fit(X, y, **kw)

X, y = load_digits(return_X_y=True)
X, y = X[:600] / 16.0, y[:600]
t0 = time.perf_counter()
search = RandomizedSearchCV(Timed(max_iter=20, tol=None, random_state=0), {"alpha": loguniform(1e-5, 1e-1)},
                            n_iter=N_ITER, cv=3, n_jobs=N_JOBS, random_state=7, refit=False)
search.fit(X, y)
seconds = time.perf_counter() - t0
best = search.best_params_
"""


def wait_for(cond, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError("benchmark step timed out")
        time.sleep(0.01)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Bench:
    def __init__(self, burst, work: Path, backend: str):
        from nbburst.client.capture import capture

        self.burst, self.work, self.backend, self.capture = burst, work, backend, capture
        self.n = 0

    def submit(self, code: str, **subs):
        self.n += 1
        side = self.work / f"{self.backend}-side-{self.n}.txt"
        for k, v in {"SIDE": repr(str(side)), **subs}.items():
            code = code.replace(k, str(v))
        opts = self.burst.options(backend=self.backend, timeout="10m", max_restarts=5)
        return self.burst.submit_cell(code, self.capture(code, {}, None, set()), opts), side

    def supervise_until(self, job, cond, timeout: float = 120.0) -> None:
        wait_for(lambda: job.supervise() is not None and cond(), timeout)

    # (a)
    def redone(self, k: int | None, steps: int, rng: random.Random) -> int:
        code = PLAIN if k is None else LOOP
        job, side = self.submit(code, STEPS=steps, K=k or 1)
        at = rng.randint(steps // 3, 2 * steps // 3)
        self.supervise_until(job, lambda: len(lines(side)) >= at)
        job.preempt(3)
        assert job.wait(timeout=120).value == "SUCCEEDED", job.terminal()
        return len(lines(side)) - steps

    # (b)
    def search(self, n_iter: int, n_jobs: int, preempt_at: float | None, env_off: bool = False) -> dict:
        if env_off:
            os.environ["NBBURST_RESUME_TASKS"] = "0"
        try:
            job, side = self.submit(SEARCH, N_ITER=n_iter, N_JOBS=n_jobs)
            total = n_iter * 3
            if preempt_at is not None:
                self.supervise_until(job, lambda: len(lines(side)) >= int(total * preempt_at))
                time.sleep(0.05)
                job.preempt(3)
            assert job.wait(timeout=300).value == "SUCCEEDED", job.terminal()
        finally:
            os.environ.pop("NBBURST_RESUME_TASKS", None)
        fits = lines(side)
        values = job.outcome().values
        return {
            "recomputed": len(fits) - len(set(fits)),
            "fits": len(set(fits)),
            "seconds": values["seconds"],
            "best": values["best"],
            "attempts": job.attempt,
        }

    # (c)
    def latency(self) -> tuple[float, float, float]:
        job, side = self.submit(LOOP, STEPS=60, K=1)
        self.supervise_until(job, lambda: len(lines(side)) >= 3)
        before = len(lines(side))
        t0 = time.perf_counter()
        job.preempt(3)
        t_verdict = t_running = None
        while True:
            state = job.supervise()
            now = time.perf_counter()
            if t_verdict is None and job.statuses()[0].state.value == "PREEMPTED":
                t_verdict = now - t0
            if t_running is None and job.attempt == 2 and job.latest_status().state.value == "RUNNING":
                t_running = now - t0
            if job.attempt == 2 and len(lines(side)) > before:
                t_output = now - t0
                break
            if state.terminal or now - t0 > 120:
                raise RuntimeError(f"no resume: {job.terminal()}")
            time.sleep(0.005)
        job.cancel()
        return t_verdict or float("nan"), t_running or t_output, t_output


def run_backend(burst, work: Path, backend: str, args, rng: random.Random) -> list[tuple[str, str]]:
    bench = Bench(burst, work, backend)
    out: list[tuple[str, str]] = []
    if backend == "local":
        steps = 24
        rows = []
        for k in (1, 4, 12, None):
            redone = [bench.redone(k, steps, rng) for _ in range(args.repeat)]
            interval = k or steps
            rows.append((k, interval, statistics.mean(redone), max(redone)))
        print("\n(a) work redone per preemption vs. checkpoint interval (0.1 s steps, 24 steps)")
        print(f"    {'interval':>14} {'redone (mean)':>14} {'redone (max)':>13} {'mean/interval':>14}")
        for k, interval, mean, worst in rows:
            name = f"{interval} steps" if k else "no checkpoint"
            print(f"    {name:>14} {mean:>10.1f} st {worst:>9d} st {mean / interval:>13.2f}x")
            out.append((f"redone, interval {name}", f"{mean:.1f} steps ({mean * 0.1:.1f} s)"))

        n_iter, n_jobs = 16, 2
        plains, cacheds = [], []
        for _ in range(args.repeat):  # interleaved: both see the same load
            plains.append(bench.search(n_iter, n_jobs, None, env_off=True))
            cacheds.append(bench.search(n_iter, n_jobs, None))
        plain = {"seconds": statistics.median(p["seconds"] for p in plains), "best": plains[0]["best"]}
        cached = {"seconds": statistics.median(c["seconds"] for c in cacheds), "best": cacheds[0]["best"]}
        hit = bench.search(n_iter, n_jobs, 0.5)
        assert hit["best"] == plain["best"] == cached["best"]
        print(f"\n(b) RandomizedSearchCV, {n_iter * 3} fits of 0.1 s, n_jobs={n_jobs}, preempted after half of them")
        print(
            f"    fits computed twice: {hit['recomputed']}   fits in flight (n_jobs): {n_jobs}   "
            f"{'ok' if hit['recomputed'] <= n_jobs else 'MISSED'} (target: at most the fits in flight)"
        )
        ratio = cached["seconds"] / plain["seconds"]
        print(
            f"    uninterrupted search (median of {args.repeat}): {cached['seconds']:.2f} s keeping task results "
            f"vs. {plain['seconds']:.2f} s without   ratio {ratio:.2f}x"
        )
        out.append(("search: fits recomputed / in flight", f"{hit['recomputed']} / {n_jobs}"))
        out.append(("search: overhead of keeping results", f"{ratio:.2f}x"))

    lat = [bench.latency() for _ in range(args.repeat)]
    verdict, running, output = (statistics.median(x) for x in zip(*lat, strict=True))
    print(f"\n(c) resume latency on {backend} (median of {args.repeat})")
    print(
        f"    notice -> PREEMPTED verdict {verdict:6.2f} s   -> next attempt RUNNING {running:6.2f} s   "
        f"-> its first output {output:6.2f} s"
    )
    out.append((f"resume latency ({backend}), notice to first output", f"{output:.2f} s"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-gce", action="store_true", help="skip the Compute Engine emulator")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    work = Path(tempfile.mkdtemp(prefix="nbburst-bench-preempt-"))
    os.environ.update(
        {
            "NBBURST_ROOT": str(work / "store"),
            "NBBURST_STATE_DIR": str(work / "state"),
            "NBBURST_BACKEND": "local",
            "NBBURST_PREEMPT_BUDGET": "1.5",
        }
    )
    from nbburst.client.burst import Burst

    summary = run_backend(Burst(), work, "local", args, rng)
    if not args.no_gce:
        summary += gce(work, args, rng)
    print("\nsummary")
    for name, value in summary:
        print(f"    {name:<52} {value}")
    shutil.rmtree(work, ignore_errors=True)


def gce(work: Path, args, rng: random.Random) -> list[tuple[str, str]]:
    try:
        import nbburst.machines.gce.machines  # noqa: F401
        from nbburst.testing import ComputeEmulator
        from nbburst.testing.gcs import GCSEmulator
        from nbburst.testing.pytest_plugin import TEST_DEFAULTS
    except ImportError as exc:
        print(f"\n(c) on the Compute emulator: skipped ({exc})")
        return []
    compute = ComputeEmulator(work / "compute", **TEST_DEFAULTS).start()
    gcs = GCSEmulator().start()
    saved = dict(os.environ)
    try:
        gcs.create_bucket("nbburst-bench")
        os.environ.update(
            {
                **gcs.env(),
                **compute.env(),
                "NBBURST_ROOT": "gs://nbburst-bench/nbburst",
                "NBBURST_BACKEND": "gce",
                "GOOGLE_CLOUD_PROJECT": compute.project,
                "NBBURST_STATE_DIR": str(work / "gce-state"),
            }
        )
        from nbburst.client.burst import Burst

        return run_backend(Burst(), work, "gce", args, rng)
    except Exception as exc:  # the emulator path is best effort in a benchmark
        print(f"\n(c) on the Compute emulator: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return []
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for emulator in (compute, gcs):
            try:
                emulator.stop()
            except Exception:
                pass


if __name__ == "__main__":
    main()
