"""Overhead of %%burst on the local backend, as ratios measured side by side in one run.

(a) round trip of an empty burst cell        vs. starting a bare `python -c pass`   target <= 3x
(b) submitting a cell that uses a 1 GiB array vs. shutil.copyfile of a 1 GiB file   target <= 1.5x
(c) resubmitting it unchanged                 vs. that copy                          target <= 0.1x
(d) a cell that shuffles that array in place, round trip (the change lands in the notebook's own array)
                                              vs. the same cell run plainly          target <= 3x
(e) the cells of a real notebook, each under %%burst (a new machine per cell): the median added seconds
    and the median per-cell ratio               vs. the same cells run plainly in a kernel (informative)

Run: python bench/overhead.py [--gib 1.0] [--repeat 5] [--notebook tests/thirdparty/statsmodels/wls.ipynb]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="size of the array for (b) and (c)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--notebook", default=str(HERE.parent / "tests/thirdparty/statsmodels/wls.ipynb"), help="for (e)"
    )
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="nbburst-bench-")
    os.environ["NBBURST_ROOT"] = os.path.join(work, "store")
    os.environ["NBBURST_STATE_DIR"] = os.path.join(work, "state")
    os.environ["NBBURST_BACKEND"] = "local"

    import compileall

    import numpy as np

    import nbburst
    from nbburst.client.burst import Burst
    from nbburst.client.capture import capture
    from nbburst.protocol.job import BLOBS_PREFIX

    # As after `pip install`, which compiles bytecode: an editable install under
    # PYTHONDONTWRITEBYTECODE would otherwise recompile nbburst at every agent start.
    compileall.compile_dir(os.path.dirname(nbburst.__file__), quiet=1)
    burst = Burst()
    opts = burst.options(timeout="10m")
    rows = []

    def round_trip(code: str, ns: dict) -> None:
        job = burst.submit_cell(code, capture(code, ns), opts)
        job.wait()
        job.outcome(ns).merge_into(ns)

    # (a) empty cell round trip vs bare interpreter start
    round_trip("pass", {})  # warm-up: imports, environment manifest
    bare = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.repeat)
    empty = median_time(lambda: round_trip("pass", {}), args.repeat)
    rows.append(("(a) empty %%burst round trip", empty, "python -c pass", bare, 3.0, empty / bare))

    # (b) and (c): a cell that uses a big array
    n = int(args.gib * 2**30 / 8)
    big = np.random.default_rng(0).random(n)
    src = os.path.join(work, "big.bin")
    big.tofile(src)
    dst = os.path.join(work, "copy.bin")

    def copy() -> None:
        if os.path.exists(dst):
            os.remove(dst)
        shutil.copyfile(src, dst)

    code = "shape = big.shape"
    ns = {"big": big}
    jobs: list = []

    def submit() -> None:
        jobs.append(burst.submit_cell(code, capture(code, ns), opts))

    # Interleaved, each step after `sync` so no one pays for the other's dirty pages.
    copies, firsts, resubmits = [], [], []
    for i in range(args.repeat):
        os.sync()
        copies.append(median_time(copy, 1))
        os.remove(dst)
        big[0] = i + 0.5  # new content: a first submission, hashed and written in full
        os.sync()
        firsts.append(median_time(submit, 1))
        assert jobs[-1].wait().value == "SUCCEEDED" and jobs[-1].outcome().values["shape"] == (n,)
        os.sync()
        resubmits.append(median_time(submit, 1))
        jobs[-1].wait()
        # Like the copy's target, this round's blob goes before the next round: both then write
        # 1 GiB onto the same disk state (gigabytes left behind slow every later write on some disks).
        for job in jobs[-2:]:
            burst.store.delete_prefix(job.layout.prefix)
        burst.store.delete_prefix(BLOBS_PREFIX)
    copy_time, first_submit, resubmit = map(statistics.median, (copies, firsts, resubmits))
    # Each round's submission is compared with the copy made just before it: the disk's speed drifts
    # between rounds, so the ratio is the median of the paired ratios, not a ratio of medians.
    first_ratio = statistics.median(f / c for f, c in zip(firsts, copies, strict=True))
    resubmit_ratio = statistics.median(r / c for r, c in zip(resubmits, copies, strict=True))
    for name, samples in (("copyfile", copies), ("submit", firsts), ("resubmit", resubmits)):
        print(f"{name:>9} samples: " + " ".join(f"{t:.3f}" for t in samples))
    size = f"{args.gib:g} GiB"
    rows.append((f"(b) submit cell using {size} array", first_submit, f"copyfile {size}", copy_time, 1.5, first_ratio))
    rows.append(("(c) resubmit it unchanged", resubmit, f"copyfile {size}", copy_time, 0.1, resubmit_ratio))

    # (d) the cell changes its input in place: the change travels back and lands in the kernel's own array.
    # Each round's array is new content (the last round changed it), as after any cell that changes it.
    mutate = "np.random.default_rng(seed).shuffle(big)"
    plains, trips = [], []
    for seed in range(args.repeat):
        plains.append(median_time(lambda seed=seed: exec(mutate, {"np": np, "big": big, "seed": seed}), 1))
        expected = big.copy()
        np.random.default_rng(seed).shuffle(expected)
        ns = {"np": np, "big": big, "seed": seed}
        trips.append(median_time(lambda ns=ns: round_trip(mutate, ns), 1))
        assert ns["big"] is big and np.array_equal(big, expected), "the change did not land in place"
        for job in burst.handles():
            burst.store.delete_prefix(job.layout.prefix)
        burst.store.delete_prefix(BLOBS_PREFIX)
    mutate_ratio = statistics.median(t / p for t, p in zip(trips, plains, strict=True))
    print(f"{'mutate':>9} samples: " + " ".join(f"{t:.3f}/{p:.3f}" for t, p in zip(trips, plains, strict=True)))
    rows.append(
        (
            f"(d) {size} input changed in place",
            statistics.median(trips),
            "the cell run plainly",
            statistics.median(plains),
            3.0,
            mutate_ratio,
        )
    )

    # (e) a real notebook, every cell under %%burst, against the same cells in a plain kernel
    added, ratios, plain_cell, burst_cell = notebook_cells(Path(args.notebook), work)
    print(f"{'cells':>9} added seconds: " + " ".join(f"{a:.2f}" for a in added))
    rows.append(
        (
            f"(e) a cell of {Path(args.notebook).stem}",
            burst_cell,
            "the cell run plainly",
            plain_cell,
            None,
            statistics.median(ratios),
        )
    )
    print(f"(e) median added seconds per cell: {statistics.median(added):.3f} over {len(added)} cells")

    print(
        f"{'measurement':<38} {'seconds':>8}   {'baseline':<22} {'seconds':>8}   {'ratio':>6}  target"
        "   (seconds: medians; (b)-(e): median of the per-round or per-cell ratios)"
    )
    for name, value, base_name, base, target, ratio in rows:
        verdict = "informative" if target is None else f"<= {target}x " + ("ok" if ratio <= target else "MISSED")
        print(f"{name:<38} {value:>8.3f}   {base_name:<22} {base:>8.3f}   {ratio:>5.2f}x  {verdict}")
    shutil.rmtree(work, ignore_errors=True)


def notebook_cells(path: Path, work: str) -> tuple[list[float], list[float], float, float]:
    """Run ``path`` plainly and with %%burst on every code cell (the fidelity harness's variants);
    returns each cell's added seconds, each cell's ratio, and the median cell time of each run."""
    from nbclient import NotebookClient

    sys.path.insert(0, str(HERE.parent / "tests"))
    from fidelity import load, variant

    def cell_seconds(burst: bool) -> list[float]:
        nb = variant(load(path), burst=burst)
        resources = {"metadata": {"path": work}}
        NotebookClient(nb, kernel_name="python3", timeout=900, allow_errors=True, resources=resources).execute()
        cells = [c for c in nb.cells if c.cell_type == "code"][(1 if burst else 0) : -1]  # not %load_ext, summary
        raised = sum(any(o.output_type == "error" for o in c.outputs) for c in cells)
        print(f"{'burst' if burst else 'plain'} run of {path.name}: {len(cells)} cells, {raised} raised")
        return [_elapsed(cell.metadata.execution) for cell in cells]

    plain, bursted = cell_seconds(False), cell_seconds(True)
    added = [b - p for p, b in zip(plain, bursted, strict=True)]
    ratios = [b / max(p, 1e-3) for p, b in zip(plain, bursted, strict=True)]
    return added, ratios, statistics.median(plain), statistics.median(bursted)


def _elapsed(timing: dict) -> float:
    """Seconds from the kernel's taking the cell to its reply (nbclient records both)."""
    start, end = (datetime.datetime.fromisoformat(timing[k]) for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


if __name__ == "__main__":
    main()
