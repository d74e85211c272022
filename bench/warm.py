"""Warm sessions beside the warm peers, on the same cells, side by side in one run.

Each round runs the cell plainly in this process, then on a warm nbburst session (``%%burst`` on a
session started before), on an ipyparallel engine (what ``%%px`` does: ``view.execute``) and on a Dask
LocalCluster worker (``client.submit``), interleaved so that a slower moment of the machine costs
every system alike. The rows give each system's median *added* seconds over the plain cell and its
ratio to ipyparallel's (the peers' level the issue sets):

(f) ``x = 1``                                   target: session median <= 0.05 s added, no cell over 0.2 s
(g) a LogisticRegression fit (about 0.1 s plainly)
(h) a cell reading an unchanged 100 MiB input   target: <= 0.05 s added (pushed / scattered before for peers)
(i) bringing a 100 MiB array back               target: <= 1.2x ipyparallel's pull
(j) starting a session, until a first cell ran  target: <= 1 s (Dask LocalCluster: 0.8-1.0 s here)
(k) the cells of a real notebook on one session target: median <= 0.05 s added, no cell over 0.2 s (each
    cell's added seconds: its median over --rounds runs of the notebook, plainly then on a session)

``--gce`` adds a session on the gce backend to (f) and (h), on the Compute Engine and GCS emulators started for
the run (no network: what remains is nbburst's own way to the VM and the Store's requests), beside the local one.

Run alone: python bench/warm.py [--repeat 11] [--mib 100] [--rounds 3] [--gce [--store-latency off]]
[--notebook tests/thirdparty/statsmodels/wls.ipynb];
bench/overhead.py runs it too (its rows join that table). Needs the ``bench`` extra (ipyparallel, distributed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SESSION, IPP, DASK, GCE = "session", "ipyparallel", "dask", "gce session"
CELLS = {
    "x = 1": ("x = 1", "x"),
    "fit": (
        "from sklearn.linear_model import LogisticRegression\n"
        "model = LogisticRegression(max_iter=200).fit(X, y)\nscore = model.score(X, y)",
        "score",
    ),
}


def _fit_data() -> dict[str, Any]:
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=20000, n_features=20, random_state=0)
    return {"X": X, "y": y}


class Peers:
    """The systems measured: a warm nbburst session, an ipyparallel engine, a Dask worker (one core each)."""

    def __init__(self, burst: Any, gce: Any = None):
        self.burst = burst
        self.gce = gce  # a Burst client whose sessions run on the gce backend (the emulators), or None
        self.ipp_cluster: Any = None
        self.view: Any = None
        self.dask: Any = None
        self.cluster: Any = None
        self.start_s: dict[str, float] = {}

    def start(self) -> Peers:
        # (j) Each start is timed until a first trivial cell has run on it: a session listens at once, then
        # warms up (nbburst's runtime, the shell made ahead) while that first cell waits. Timed with nothing to
        # preload, as the peers start with nothing imported.
        t = time.perf_counter()
        self.burst.sessions.start("bench", cores=1, idle="30m", timeout="2h", preload=[])
        self.session("x = 1", {})
        self.start_s[SESSION] = time.perf_counter() - t
        self.burst.sessions.stop("bench")
        # The session the cells run on preloads what they use, as a notebook's kernel would have imported it
        # (not this process's modules: they include the peers' packages). Its first cell waits for the imports.
        t = time.perf_counter()
        self.burst.sessions.start("bench", cores=1, idle="30m", timeout="2h", preload=["numpy", "sklearn"])
        self.session("x = 1", {})
        self.start_s["preloaded"] = time.perf_counter() - t
        if self.gce is not None:
            t = time.perf_counter()
            self.gce.sessions.start("bench", cores=1, idle="30m", timeout="2h", preload=["numpy", "sklearn"])
            self.session("x = 1", {}, self.gce)
            self.start_s[GCE] = time.perf_counter() - t
        if not _installed("ipyparallel", "distributed"):
            print("ipyparallel or distributed is not installed (the bench extra): the peers are not measured")
            return self
        import ipyparallel as ipp
        from distributed import Client, LocalCluster

        t = time.perf_counter()
        self.cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
        self.dask = Client(self.cluster)
        self.dask.submit(_run, "x = 1", {}, pure=False).result()
        self.start_s[DASK] = time.perf_counter() - t
        t = time.perf_counter()
        self.ipp_cluster = ipp.Cluster(n=1, log_level=40)
        rc = self.ipp_cluster.start_and_connect_sync()
        self.view = rc[0]
        self.view.block = True
        self.ipp("x = 1")
        self.start_s[IPP] = time.perf_counter() - t
        return self

    def stop(self) -> None:
        if self.ipp_cluster is not None:
            self.ipp_cluster.stop_cluster_sync()
        if self.dask is not None:
            self.dask.close()
            self.cluster.close()
        for burst in (self.burst, self.gce):
            for session in burst.sessions.all() if burst is not None else []:
                burst.sessions.stop(session.name)

    # -- one cell on each system -----------------------------------------------------------------
    def session(self, code: str, ns: dict[str, Any], burst: Any = None) -> None:
        """A %%burst cell on the session (of ``burst``, the local one's by default): submission until its
        variables are in ``ns``."""
        from nbburst.client.capture import capture

        burst = burst or self.burst
        job = burst.submit_cell(code, capture(code, ns), burst.options(session="bench"))
        job.wait()
        job.outcome(ns).merge_into(ns)

    def ipp(self, code: str) -> None:
        self.view.execute(code)


def _installed(*names: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in names)


def _run(code: str, ns: dict[str, Any]) -> None:
    exec(code, ns)


def _added(samples: list[float], plains: list[float]) -> list[float]:
    return [s - p for s, p in zip(samples, plains, strict=True)]


def rounds(systems: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Seconds of each system, interleaved round after round; the first round (imports, first uploads)
    warms every system up and is left out."""
    times: dict[str, list[float]] = {k: [] for k in systems}
    for _ in range(repeat + 1):
        for system, fn in systems.items():
            t = time.perf_counter()
            fn()
            times[system].append(time.perf_counter() - t)
    return {k: v[1:] for k, v in times.items()}


def _cell_systems(peers: Peers, code: str, name: str, data: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """The cell ``code`` (inputs ``data``, result ``name``) on each system; the peers got ``data`` before."""
    systems = {
        "plain": lambda: _run(code, dict(data)),
        SESSION: lambda: peers.session(code, dict(data)),
    }
    if peers.view is not None:
        peers.view.push(data)
        scattered = {k: peers.dask.scatter(v, broadcast=True) for k, v in data.items()}

        def dask_cell(**values: Any) -> Any:
            ns = dict(values)
            exec(code, ns)
            return ns[name]

        systems[IPP] = lambda: peers.ipp(code)
        systems[DASK] = lambda: peers.dask.submit(dask_cell, pure=False, **scattered).result()
    if peers.gce is not None and name == "x":
        systems[GCE] = lambda: peers.session(code, dict(data), peers.gce)
    return systems


def cells(peers: Peers, repeat: int, Row: Any) -> list[Any]:
    """(f), (g): a trivial cell and a real fit, added seconds per system."""
    rows = []
    for letter, (label, (code, name)) in zip("fg", CELLS.items(), strict=True):
        times = rounds(_cell_systems(peers, code, name, _fit_data() if label == "fit" else {}), repeat)
        rows.append(_row(Row, f"({letter}) {label}: added s", times))
        _print_samples(label, times)
    return rows


def big_input(peers: Peers, repeat: int, mib: int, Row: Any) -> list[Any]:
    """(h) a cell reading an unchanged input, (i) a cell whose big output comes back."""
    import numpy as np

    big = np.random.default_rng(0).random(mib * 2**20 // 8)
    read = "s = float(big.sum())"
    systems = {
        "plain": lambda: _run(read, {"big": big}),
        SESSION: lambda: peers.session(read, {"big": big}),
    }
    if peers.view is not None:
        peers.view.push({"big": big})
        future = peers.dask.scatter(big)
        systems[IPP] = lambda: peers.ipp(read)
        systems[DASK] = lambda: peers.dask.submit(np.sum, future, pure=False).result()
    if peers.gce is not None:
        systems[GCE] = lambda: peers.session(read, {"big": big}, peers.gce)
    times = rounds(systems, repeat)
    rows = [_row(Row, f"(h) read an unchanged {mib} MiB input: added s", times)]
    _print_samples("read", times)
    n = mib * 2**20 // 8
    make = f"out = np.ones({n})"
    systems = {"plain": lambda: _run(make, {"np": np}), SESSION: lambda: peers.session(make, {"np": np})}
    if peers.view is not None:
        systems[IPP] = lambda: (peers.ipp("import numpy as np\n" + make), peers.view.pull("out"))
        systems[DASK] = lambda: peers.dask.submit(np.ones, n, pure=False).result()
    times = rounds(systems, repeat)
    rows.append(_row(Row, f"(i) bring {mib} MiB back: added s", times, target=1.2))
    _print_samples("pull", times)
    return rows


def starts(peers: Peers, Row: Any) -> list[Any]:
    """(j) the start of a session, beside a Dask LocalCluster's and an ipyparallel cluster's (once each), each
    until a first ``x = 1`` has run on it."""
    s = peers.start_s
    print(f"(j) a session preloading numpy and scikit-learn: its first cell ran after {s['preloaded']:.3f} s")
    if GCE in s:
        print(f"(j) a gce session (emulators) preloading numpy and scikit-learn: first cell ran after {s[GCE]:.3f} s")
    if IPP not in s:
        return [Row("(j) start: seconds", "session", s[SESSION], None)]
    row = Row("(j) start: seconds", "ipyparallel cluster", s[IPP], None)
    return [row.add(SESSION, s[SESSION]).add(DASK, s[DASK])]


def notebook_on_session(path: Path, work: str) -> tuple[list[float], list[float]]:
    """(k) each code cell's seconds plainly, and under %%burst on one warm session (started in a cell of
    its own, not counted)."""
    from nbclient import NotebookClient

    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.fidelity import AROUND, load, variant

    seconds = []
    for burst in (False, True):
        nb = variant(load(path), burst=burst, session=burst)
        folder = Path(tempfile.mkdtemp(dir=work)) / "notebook"
        shutil.copytree(path.parent, folder)
        resources = {"metadata": {"path": str(folder)}}
        NotebookClient(nb, kernel_name="python3", timeout=900, allow_errors=True, resources=resources).execute()
        before, after = AROUND["session" if burst else "plain"]
        code = [c for c in nb.cells if c.cell_type == "code"]
        code = code[len(before) : len(code) - 1 - len(after)]  # not the cells around the notebook's, the summary
        seconds.append([_elapsed(c.metadata.execution) for c in code])
    return seconds[0], seconds[1]


def notebook(path: Path, work: str, Row: Any, rounds: int) -> list[Any]:
    """(k) each cell's added seconds, the median of ``rounds`` runs of the notebook: a full garbage collection
    of the kernel, or a slow moment of this machine, lands on one cell of one run."""
    if not _compiled("matplotlib"):
        print("(k) warning: matplotlib is not compiled to bytecode here (scripts/setup compiles it, as pip does):")
        print("    every import compiles it again, in the kernel and on the machine; a user's cells import faster")
    runs = [notebook_on_session(path, work) for _ in range(rounds)]
    added_runs = [_added(warm, plain) for plain, warm in runs]
    for run in added_runs:
        print(f"{'cells':>9} added seconds on a session: " + " ".join(f"{a:.3f}" for a in run))
    added = [statistics.median(cell) for cell in zip(*added_runs, strict=True)]
    print(f"{'cells':>9} their medians over {rounds} runs: " + " ".join(f"{a:.3f}" for a in added))
    print(f"(k) median added {statistics.median(added):.3f} s, max {max(added):.3f} s over {len(added)} cells")
    plain, warm = (statistics.median(s for run in runs for s in run[i]) for i in (0, 1))
    row = Row(f"(k) a cell of {path.stem} on a session: added s", "(none: the plain cell)", 0.0, None)
    row.worst = max(added)
    return [row.add(SESSION, statistics.median(added), warm / max(plain, 1e-3))]


def _compiled(package: str) -> bool:
    """Whether ``package``'s modules import from bytecode here rather than being compiled by each process."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    origin = spec.origin if spec is not None else None
    return origin is None or os.path.exists(importlib.util.cache_from_source(origin))


def _elapsed(timing: dict) -> float:
    import datetime

    start, end = (datetime.datetime.fromisoformat(timing[k]) for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def _row(Row: Any, name: str, times: dict[str, list[float]], target: float | None = None) -> Any:
    """Added seconds (median) of each system, its ratio to ipyparallel's (to the local session's without it)."""
    added = {k: _added(v, times["plain"]) for k, v in times.items() if k != "plain"}
    baseline = IPP if IPP in added else SESSION
    base = max(statistics.median(added[baseline]), 1e-4)
    row = Row(name, baseline, statistics.median(added[baseline]), target)
    for system in (SESSION, DASK, GCE):
        if system not in added:
            continue
        median = statistics.median(added[system])
        row.add(system, median, median / base)
    return row


def _print_samples(label: str, times: dict[str, list[float]]) -> None:
    for system, samples in times.items():
        print(f"{label:>6} {system:>11}: " + " ".join(f"{t:.3f}" for t in samples))
    for system, samples in times.items():
        if system != "plain":
            added = _added(samples, times["plain"])
            print(f"{label:>6} {system:>11} added: median {statistics.median(added):.3f} max {max(added):.3f}")


def targets(rows: list[Any]) -> list[str]:
    """The issue's absolute targets, checked on the rows (the table's ratios are against ipyparallel)."""
    out = []
    for row in rows:
        if row.name.startswith(("(f)", "(h)", "(k)")) and SESSION in row.seconds:
            ok = row.seconds[SESSION] <= 0.05
            out.append(f"{row.name.split(':')[0]}: session adds {row.seconds[SESSION]:.3f} s (<= 0.05 s: {ok})")
        if row.name.startswith(("(f)", "(h)")) and GCE in row.seconds:
            limit = 0.15 if row.name.startswith("(f)") else 0.2
            added = row.seconds[GCE]
            out.append(f"{row.name.split(':')[0]}: gce session adds {added:.3f} s (<= {limit} s: {added <= limit})")
        if row.name.startswith("(k)") and row.worst is not None:
            out.append(f"(k) no cell over 0.2 s: the largest cell adds {row.worst:.3f} s ({row.worst <= 0.2})")
        if row.name.startswith("(j)") and SESSION in row.seconds:
            out.append(f"(j) session start {row.seconds[SESSION]:.3f} s (<= 1 s: {row.seconds[SESSION] <= 1})")
    return out


def measure(bench: Any, Row: Any) -> list[Any]:
    """All of the above on ``bench``'s Burst client (bench/overhead.py's :class:`Bench`)."""
    repeat = max(bench.args.repeat, 5)
    mib = getattr(bench.args, "mib", 100)
    with contextlib.ExitStack() as stack:
        latency = getattr(bench.args, "store_latency", "on") == "on"
        gce = stack.enter_context(gce_client(bench.work, latency)) if getattr(bench.args, "gce", False) else None
        peers = Peers(bench.burst, gce).start()
        try:
            rows = cells(peers, repeat, Row) + big_input(peers, repeat, mib, Row) + starts(peers, Row)
        finally:
            peers.stop()
    if getattr(bench.args, "notebook", None):
        rows += notebook(Path(bench.args.notebook), bench.work, Row, getattr(bench.args, "rounds", 3))
    for line in targets(rows):
        print(line)
    return rows


@contextlib.contextmanager
def gce_client(work: str, store_latency: bool = True) -> Iterator[Any]:
    """A Burst client on the gce backend, its Compute Engine and GCS emulators started for the run (instant
    boots: what is measured is nbburst's way to the VM, not Google's).

    Each answer of the GCS emulator's proxy reaches its client late: the proxy sends an answer's headers and
    body in two writes, and the second waits for the client's delayed acknowledgement of the first (Nagle's
    algorithm). That delay is of the order of a round trip to Cloud Storage from a notebook outside its region,
    so it is left on by default; ``store_latency=False`` turns it off for this run, to see what the requests cost
    without it (docs/performance.md gives both)."""
    from nbburst.client.burst import Burst
    from nbburst.testing import ComputeEmulator, gcs_proxy
    from nbburst.testing.gcs import GCSEmulator
    from nbburst.testing.secretmanager import SecretManagerEmulator

    if not store_latency:
        gcs_proxy._Handler.disable_nagle_algorithm = True  # noqa: SLF001 - this run's proxy only

    compute = ComputeEmulator(Path(work) / "compute", operation_delay=0.0).start()
    gcs = GCSEmulator().start()
    secrets = SecretManagerEmulator(compute.project).start()
    compute.instance_env.update(secrets.env())  # the session VM reads its secret there
    try:
        gcs.create_bucket("bench")
        os.environ.update({**gcs.env(), **compute.env(), **secrets.env(), "GOOGLE_CLOUD_PROJECT": compute.project})
        os.environ["NBBURST_WATCHER"] = "false"  # no watcher VM: the run measures the session alone
        local = {key: os.environ[key] for key in ("NBBURST_ROOT", "NBBURST_BACKEND", "NBBURST_STATE_DIR")}
        state = os.path.join(work, "gce-state")  # its own sessions' records: both sessions are called "bench"
        os.environ.update({"NBBURST_ROOT": "gs://bench/nbburst", "NBBURST_BACKEND": "gce", "NBBURST_STATE_DIR": state})
        try:
            burst = Burst()  # its settings are read now: the local client keeps its own
        finally:
            os.environ.update(local)
        yield burst
    finally:
        compute.stop()
        gcs.stop()
        secrets.stop()


def main() -> None:
    sys.path.insert(0, str(HERE))
    from overhead import Bench, Row, table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--mib", type=int, default=100, help="size of the arrays of (h) and (i)")
    parser.add_argument("--notebook", default=str(HERE.parent / "tests/thirdparty/statsmodels/wls.ipynb"))
    parser.add_argument("--no-notebook", dest="notebook", action="store_const", const="")
    parser.add_argument("--rounds", type=int, default=3, help="runs of the notebook for (k)")
    parser.add_argument("--gce", action="store_true", help="a session on the gce backend (emulators) too")
    parser.add_argument(
        "--store-latency", choices=("on", "off"), default="on", help="the GCS emulator's delay on each answer"
    )
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="nbburst-warm-")
    try:
        print(table(measure(Bench(args, work).start(), Row)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.environ.pop("NBBURST_ROOT", None)


if __name__ == "__main__":
    main()
