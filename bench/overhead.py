"""Overhead of %%burst on the local backend, as ratios measured side by side in one run.

(a) round trip of an empty burst cell        vs. starting a bare `python -c pass`   target <= 3x
(b) submitting a cell that uses a 1 GiB array vs. shutil.copyfile of a 1 GiB file   target <= 1.5x
(c) resubmitting it unchanged                 vs. that copy                          target <= 0.1x
(d) a cell that shuffles that array in place, round trip (the change lands in the notebook's own array)
                                              vs. the same cell run plainly          target <= 3x
(e) the cells of a real notebook, each under %%burst (a new machine per cell): the median added seconds
    and the median per-cell ratio               vs. the same cells run plainly in a kernel (informative)
(f)-(k) a warm session beside ipyparallel and Dask (bench/warm.py)
(l), (m) a 2-D and a 3-D Figure from an earlier cell shown again as the Out, on a new machine and on a session
                                              vs. a cell moving the same bytes      (bench/figures.py)

Each measurement is a function of the shared :class:`Bench` that returns :class:`Row` s; a row holds the
seconds of every system measured on the same workload (today only ``%%burst``), each printed as its own
column with its ratio against the row's baseline. Another system (a warm session, ipyparallel, Dask)
adds its seconds to the rows of the measurements it can do, and appears as a column of its own.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BURST = "%%burst"


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def once(fn: Callable[[], Any]) -> float:
    return median_time(fn, 1)


def paired_ratio(samples: list[float], baselines: list[float]) -> float:
    """The median of per-round ratios: the machine's speed drifts between rounds, so each sample is
    compared with the baseline measured right beside it, not with a median of the baselines."""
    return statistics.median(s / b for s, b in zip(samples, baselines, strict=True))


@dataclass
class Row:
    """One measurement: a baseline, and the seconds (median) and ratio of each system measured."""

    name: str
    baseline: str
    baseline_s: float
    target: float | None  # the ratio to stay under; None: informative
    seconds: dict[str, float] = field(default_factory=dict)  # system -> seconds
    ratios: dict[str, float] = field(default_factory=dict)  # system -> ratio against the baseline
    worst: float | None = None  # of a row over several cells: the largest cell's seconds

    def add(self, system: str, seconds: float, ratio: float | None = None) -> Row:
        self.seconds[system] = seconds
        self.ratios[system] = ratio if ratio is not None else seconds / self.baseline_s
        return self


@dataclass
class Bench:
    """What the measurements share: the options, a Store in a temp folder, one Burst client."""

    args: argparse.Namespace
    work: str
    burst: Any = None
    opts: Any = None

    def start(self) -> Bench:
        import compileall

        import nbburst
        from nbburst.client.burst import Burst

        os.environ["NBBURST_ROOT"] = os.path.join(self.work, "store")
        os.environ["NBBURST_STATE_DIR"] = os.path.join(self.work, "state")
        os.environ["NBBURST_BACKEND"] = "local"
        # As after `pip install`, which compiles bytecode: an editable install under
        # PYTHONDONTWRITEBYTECODE would otherwise recompile nbburst at every agent start.
        compileall.compile_dir(os.path.dirname(nbburst.__file__), quiet=1)
        self.burst = Burst()
        self.opts = self.burst.options(timeout="10m")
        return self

    def submit(self, code: str, ns: dict) -> Any:
        from nbburst.client.capture import capture

        return self.burst.submit_cell(code, capture(code, ns), self.opts)

    def round_trip(self, code: str, ns: dict) -> None:
        """A burst cell from submission until its values are in ``ns``."""
        job = self.submit(code, ns)
        job.wait()
        job.outcome(ns).merge_into(ns)

    def forget_jobs(self) -> None:
        """Delete every job and blob: the next round writes onto the same disk state as the last."""
        from nbburst.protocol.job import BLOBS_PREFIX

        for job in self.burst.handles():
            self.burst.store.delete_prefix(job.layout.prefix)
        self.burst.store.delete_prefix(BLOBS_PREFIX)


def empty_cell(bench: Bench) -> list[Row]:
    """(a) an empty cell, submission to values back, against starting a bare interpreter."""
    bench.round_trip("pass", {})  # warm-up: imports, environment manifest
    bare = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), bench.args.repeat)
    empty = median_time(lambda: bench.round_trip("pass", {}), bench.args.repeat)
    return [Row("(a) empty cell round trip", "python -c pass", bare, 3.0).add(BURST, empty)]


def big_input(bench: Bench) -> list[Row]:
    """(b) submitting a cell that uses a big array, (c) resubmitting it unchanged, against a file copy."""
    import numpy as np

    n = int(bench.args.gib * 2**30 / 8)
    big = np.random.default_rng(0).random(n)
    src, dst = os.path.join(bench.work, "big.bin"), os.path.join(bench.work, "copy.bin")
    big.tofile(src)

    def copy() -> None:
        if os.path.exists(dst):
            os.remove(dst)
        shutil.copyfile(src, dst)

    code, ns = "shape = big.shape", {"big": big}
    jobs: list = []
    # Interleaved, each step after `sync` so no one pays for the other's dirty pages.
    copies, firsts, resubmits = [], [], []
    for i in range(bench.args.repeat):
        os.sync()
        copies.append(once(copy))
        os.remove(dst)
        big[0] = i + 0.5  # new content: a first submission, hashed and written in full
        os.sync()
        firsts.append(once(lambda: jobs.append(bench.submit(code, ns))))
        assert jobs[-1].wait().value == "SUCCEEDED" and jobs[-1].outcome().values["shape"] == (n,)
        os.sync()
        resubmits.append(once(lambda: jobs.append(bench.submit(code, ns))))
        jobs[-1].wait()
        # Like the copy's target, this round's blob goes before the next round: both then write
        # 1 GiB onto the same disk state (gigabytes left behind slow every later write on some disks).
        bench.forget_jobs()
    for name, samples in (("copyfile", copies), ("submit", firsts), ("resubmit", resubmits)):
        print(f"{name:>9} samples: " + " ".join(f"{t:.3f}" for t in samples))
    size, copy_s = f"{bench.args.gib:g} GiB", statistics.median(copies)
    return [
        Row(f"(b) submit a cell using a {size} array", f"copyfile {size}", copy_s, 1.5).add(
            BURST, statistics.median(firsts), paired_ratio(firsts, copies)
        ),
        Row("(c) resubmit it unchanged", f"copyfile {size}", copy_s, 0.1).add(
            BURST, statistics.median(resubmits), paired_ratio(resubmits, copies)
        ),
    ]


def mutated_input(bench: Bench) -> list[Row]:
    """(d) a cell that changes its big input in place: the change travels back and lands in the kernel's
    own array. Each round's array is new content (the last round changed it), as after any such cell."""
    import numpy as np

    big = np.random.default_rng(0).random(int(bench.args.gib * 2**30 / 8))
    mutate = "np.random.default_rng(seed).shuffle(big)"
    plains, trips = [], []
    for seed in range(bench.args.repeat):
        plains.append(once(lambda seed=seed: exec(mutate, {"np": np, "big": big, "seed": seed})))
        expected = big.copy()
        np.random.default_rng(seed).shuffle(expected)
        ns = {"np": np, "big": big, "seed": seed}
        trips.append(once(lambda ns=ns: bench.round_trip(mutate, ns)))
        assert ns["big"] is big and np.array_equal(big, expected), "the change did not land in place"
        bench.forget_jobs()
    print(f"{'mutate':>9} samples: " + " ".join(f"{t:.3f}/{p:.3f}" for t, p in zip(trips, plains, strict=True)))
    row = Row(f"(d) a {bench.args.gib:g} GiB input changed in place", "the cell run plainly", 0.0, 3.0)
    row.baseline_s = statistics.median(plains)
    return [row.add(BURST, statistics.median(trips), paired_ratio(trips, plains))]


def notebook(bench: Bench) -> list[Row]:
    """(e) every cell of a real notebook, plainly in a kernel and under %%burst (the fidelity harness's
    two variants): the median per-cell ratio, and the median added seconds."""
    path = Path(bench.args.notebook)
    plain, bursted = (notebook_cell_seconds(path, bench.work, burst) for burst in (False, True))
    added = [b - p for p, b in zip(plain, bursted, strict=True)]
    print(f"{'cells':>9} added seconds: " + " ".join(f"{a:.2f}" for a in added))
    print(f"(e) median added seconds per cell: {statistics.median(added):.3f} over {len(added)} cells")
    ratios = [b / max(p, 1e-3) for p, b in zip(plain, bursted, strict=True)]
    row = Row(f"(e) a cell of {path.stem}", "the cell run plainly", statistics.median(plain), None)
    return [row.add(BURST, statistics.median(bursted), statistics.median(ratios))]


def notebook_cell_seconds(path: Path, work: str, burst: bool) -> list[float]:
    """Each code cell's seconds in one run of ``path``, plainly or with %%burst on every cell."""
    from nbclient import NotebookClient

    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.fidelity import load, variant

    nb = variant(load(path), burst=burst)
    folder = Path(tempfile.mkdtemp(dir=work)) / "notebook"
    shutil.copytree(path.parent, folder)  # its data files are found beside it; what it writes stays here
    resources = {"metadata": {"path": str(folder)}}
    NotebookClient(nb, kernel_name="python3", timeout=900, allow_errors=True, resources=resources).execute()
    cells = [c for c in nb.cells if c.cell_type == "code"][(1 if burst else 0) : -1]  # not %load_ext, summary
    raised = sum(any(o.output_type == "error" for o in c.outputs) for c in cells)
    print(f"{'burst' if burst else 'plain'} run of {path.name}: {len(cells)} cells, {raised} raised")
    return [_elapsed(cell.metadata.execution) for cell in cells]


def _elapsed(timing: dict) -> float:
    """Seconds from the kernel's taking the cell to its reply (nbclient records both)."""
    start, end = (datetime.datetime.fromisoformat(timing[k]) for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


#: The measurements, in the order they run.
def warm_session(bench: Bench) -> list[Row]:
    """(f)-(k) a warm session beside ipyparallel and a Dask LocalCluster on the same cells (bench/warm.py)."""
    from warm import measure  # bench/ is this script's folder: first on sys.path

    return measure(bench, Row)


def figure_out(bench: Bench) -> list[Row]:
    """(l), (m) a Figure shown again as a cell's Out, beside a cell that moves the same bytes (bench/figures.py)."""
    from figures import measure

    return measure(bench, Row)


MEASUREMENTS: list[Callable[[Bench], list[Row]]] = [
    empty_cell,
    big_input,
    mutated_input,
    notebook,
    warm_session,
    figure_out,
]


def table(rows: list[Row]) -> str:
    """One line per row: the baseline, then seconds and ratio for each system (a column each)."""
    systems = list(dict.fromkeys(s for row in rows for s in row.seconds))
    head = f"{'measurement':<40} {'baseline':<22} {'seconds':>8}"
    head += "".join(f"   {s + ' s':>12} {'ratio':>7}" for s in systems) + "   target"
    lines = [head, "(seconds: medians; ratios: median of the per-round or per-cell ratios)"]
    for row in rows:
        line = f"{row.name:<40} {row.baseline:<22} {row.baseline_s:>8.3f}"
        for system in systems:
            if system in row.seconds:
                line += f"   {row.seconds[system]:>12.3f} {row.ratios[system]:>6.2f}x"
            else:
                line += f"   {'-':>12} {'-':>7}"
        if row.target is None:
            line += "   informative"
        else:
            missed = [s for s, r in row.ratios.items() if r > row.target]
            line += f"   <= {row.target}x " + (f"MISSED by {', '.join(missed)}" if missed else "ok")
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="size of the array for (b), (c) and (d)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--notebook", default=str(HERE.parent / "tests/thirdparty/statsmodels/wls.ipynb"), help="for (e)"
    )
    parser.add_argument("--only", nargs="*", help="measurements to run, by function name (default: all)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="nbburst-bench-")
    try:
        bench = Bench(args, work).start()
        rows = [
            row for measure in MEASUREMENTS if not args.only or measure.__name__ in args.only for row in measure(bench)
        ]
        print(table(rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
