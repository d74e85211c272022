"""A Figure drawn in one cell and shown again as a later cell's Out, side by side in one run.

``ax.legend(['a']); fig`` on a 2-D axes, ``ax.view_init(60, 35); fig`` on a 3-D surface: each round runs
the cell plainly in this process (as the kernel does: the cell, then its Out drawn to PNG by the shell's
display formatter), under %%burst on a new machine and on a warm session, and beside each a cell that moves
the same bytes with no Figure in it (the Figure's pickle up and back, its PNG's size back, after importing
pyplot there too). Its object graph (thousands of small objects, cycles) once cost minutes to fingerprint
object by object; what is left grows with the graph's objects, a few passes over them (the input's
fingerprint as it arrives and after the cell, its pickle both ways), where the same bytes in one buffer cost
next to nothing: each row's ratio is the figure cell's added seconds over the same-bytes cell's.

(l) a 2-D figure shown again as the Out    (informative)
(m) a 3-D figure shown again as the Out    (informative)

With the ``bench`` extra installed, an ipyparallel engine runs the same figure cell beside them, as ``%%px``
users do it: ``fig`` and ``ax`` pushed, the cell run there and its Out drawn to PNG, ``fig`` and the PNG pulled
back. It moves the same objects by pickle both ways, as any remote Python does: its seconds are what moving the
Figure costs a peer, and each row gives the session's added seconds over ipyparallel's ("session / ipyparallel").

Then, where the figure cell's added time goes, pass by pass, run in this one process as the kernel and the
machine run them (the inputs pickled, unpickled, fingerprinted as they arrive, the cell and its Out drawn,
fingerprinted again, the changed ones pickled back, loaded into the kernel's objects), beside the same passes
over a cell that moves the same bytes: each pass's CPU seconds, the least of --repeat rounds, which other
work on the machine inflates far less than the wall-clock seconds of the rows above.

Run alone: python bench/figures.py [--repeat 5]; bench/overhead.py runs it too (its rows join that table).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SESSION = "session"
IPP = "ipyparallel"
FIGURES = {
    "2-D": (
        "import numpy as np\nimport matplotlib.pyplot as plt\nx = np.linspace(0, 10, 200)\n"
        "fig, ax = plt.subplots()\nax.plot(x, np.sin(x))\nax.scatter(x[::10], np.cos(x[::10]))",
        "ax.legend(['a'])\nfig",
    ),
    "3-D": (
        "import numpy as np\nimport matplotlib.pyplot as plt\n"
        "x, y = np.meshgrid(np.linspace(-2, 2, 40), np.linspace(-2, 2, 40))\nfig = plt.figure()\n"
        "ax = fig.add_subplot(projection='3d')\nax.plot_surface(x, y, np.exp(-x**2 - y**2))",
        "ax.view_init(60, 35)\nfig",
    ),
}


def kernel_like() -> Any:
    """This process's IPython shell with the inline backend, as a notebook's kernel has them: the figure
    formats a burst cell's machine is to draw its Out with come from here."""
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    import matplotlib.pyplot as plt

    plt.close(plt.figure())  # the backend's import configures the shell's formatters
    return shell


def plain(shell: Any, code: str, ns: dict[str, Any]) -> dict[str, Any]:
    """The cell as the kernel runs it: its statements, then its last expression's Out drawn by the shell."""
    return _run(shell, code, ns)[1]


def _run(shell: Any, code: str, ns: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(the cell's Out, its formats as the shell draws them)."""
    *body, last = code.splitlines()
    exec("\n".join(body), ns)
    value = eval(last, ns)
    data, _ = shell.display_formatter.format(value)
    return value, data


def sizes(shell: Any, code: str, ns: dict[str, Any]) -> tuple[int, int]:
    """(the bytes of the Figure's pickle, the bytes of its PNG): what a %%burst cell of it moves."""
    import cloudpickle

    data = plain(shell, code, ns)
    return len(cloudpickle.dumps(ns["fig"])), len(data["image/png"])


def figure(shell: Any, setup: str) -> dict[str, Any]:
    """The namespace after the cell that drew the Figure (the kernel's inline backend closes it after the cell)."""
    import matplotlib.pyplot as plt

    ns: dict[str, Any] = {}
    exec(setup, ns)
    plt.close("all")
    return ns


def measure(bench: Any, Row: Any) -> list[Any]:
    """(l), (m) on ``bench``'s Burst client (bench/overhead.py's :class:`Bench`): seconds of each cell on each
    system; each row's ratio is the figure cell's added seconds over the same-bytes cell's, round by round."""
    sys.path.insert(0, str(HERE))
    from overhead import BURST
    from warm import rounds

    shell = kernel_like()
    repeat = max(bench.args.repeat, 3)
    peer = _Engine.start()
    burst = bench.burst
    burst.sessions.start("figures", cores=1, idle="30m", timeout="2h", preload=[])
    burst.sessions.default = None  # the %%burst rows run on a new machine each; the session rows name it
    rows = []
    try:
        for letter, (kind, (setup, code)) in zip("lm", FIGURES.items(), strict=True):
            ns = figure(shell, setup)
            pickled, png = sizes(shell, code, dict(ns))
            alike = f"import matplotlib.pyplot\nblob[0] ^= 1\npng = bytes({png})"
            session = burst.options(session="figures")

            def on(options: Any, cell: str, values: dict[str, Any]) -> Callable[[], None]:
                return lambda: _round_trip(burst, cell, dict(values), options)

            times = rounds(
                {
                    "plain": lambda code=code, ns=ns: plain(shell, code, dict(ns)),
                    BURST: on(bench.opts, code, ns),
                    "alike": on(bench.opts, alike, {"blob": bytearray(pickled)}),
                    SESSION: on(session, code, ns),
                    "alike on a session": on(session, alike, {"blob": bytearray(pickled)}),
                    **({IPP: lambda code=code, ns=ns: peer.cell(code, ns)} if peer is not None else {}),
                },
                repeat,
            )
            for system, samples in times.items():
                print(f"{kind:>4} {system:>18}: " + " ".join(f"{t:.3f}" for t in samples))
            print(f"{kind:>4} moves a {pickled / 1e3:.0f} kB pickle both ways and a {png / 1e3:.0f} kB PNG back")
            plains = times["plain"]
            row = Row(f"({letter}) a {kind} figure as the Out again", "the cell run plainly", 0.0, None)
            row.baseline_s = statistics.median(plains)
            for system, alike_system in ((BURST, "alike"), (SESSION, "alike on a session")):
                ratios = [
                    (f - p) / max(a, 1e-3) for f, p, a in zip(times[system], plains, times[alike_system], strict=True)
                ]
                row.add(system, statistics.median(times[system]), statistics.median(ratios))
            if peer is not None:
                session_added = statistics.median(_added(times[SESSION], plains))
                peer_added = statistics.median(_added(times[IPP], plains))
                print(f"{kind:>4} added: session {session_added:.3f} s, ipyparallel {peer_added:.3f} s")
                row.add(IPP, statistics.median(times[IPP]), session_added / max(peer_added, 1e-3))
            rows.append(row)
    finally:
        burst.sessions.stop("figures")
        if peer is not None:
            peer.stop()
    return rows


def _added(samples: list[float], plains: list[float]) -> list[float]:
    return [s - p for s, p in zip(samples, plains, strict=True)]


class _Engine:
    """An ipyparallel engine running a figure cell as ``%%px`` does (None without the ``bench`` extra)."""

    def __init__(self, cluster: Any, view: Any):
        self.cluster, self.view = cluster, view

    @classmethod
    def start(cls) -> _Engine | None:
        try:
            import ipyparallel as ipp
        except ImportError:
            print("ipyparallel is not installed (the bench extra): no peer row")
            return None
        cluster = ipp.Cluster(n=1, log_level=40)
        view = cluster.start_and_connect_sync()[0]
        view.block = True
        view.execute("from IPython.core.pylabtools import print_figure\nimport matplotlib.pyplot")
        return cls(cluster, view)

    def cell(self, code: str, ns: dict[str, Any]) -> None:
        """``fig`` and ``ax`` there, the cell's statements and its Out drawn to PNG, both back here."""
        *body, last = code.splitlines()
        self.view.push({"fig": ns["fig"], "ax": ns["ax"]})
        self.view.execute("\n".join(body) + f"\n_png = print_figure({last}, 'png', bbox_inches='tight')")
        self.view.pull(["fig", "_png"])

    def stop(self) -> None:
        self.cluster.stop_cluster_sync()


PASSES = (
    "kernel pickles",
    "machine loads",
    "fingerprints as arrived",
    "cell and Out",
    "fingerprints after",
    "machine pickles",
    "kernel loads",
)


def passes(repeat: int) -> str:
    """The passes of each figure cell and of its same-bytes cell, CPU seconds each (the least of ``repeat``
    rounds), run here as :func:`_passes` runs them: a table."""
    shell = kernel_like()
    lines = [f"{'CPU s, least of ' + str(max(repeat, 3)):<26}" + "".join(f"{p:>14}" for p in ("figure", "same bytes"))]
    for kind, (setup, code) in FIGURES.items():
        ns = figure(shell, setup)
        plain(shell, code, dict(ns))  # drawn once, as the kernel's inline backend draws a Figure it shows
        pickled, _ = sizes(shell, code, dict(ns))
        figure_cell = _least(lambda ns=ns, code=code: _passes(shell, ns, ["fig", "ax"], code), repeat)
        same = _least(
            lambda size=pickled: _passes(shell, {"blob": bytearray(size)}, ["blob"], "blob[0] ^= 1\nNone"), repeat
        )
        for step in PASSES:
            lines.append(f"{kind + ' ' + step:<26}{figure_cell[step]:>14.3f}{same[step]:>14.3f}")
        added = [sum(v for step, v in cell.items() if step != "cell and Out") for cell in (figure_cell, same)]
        lines.append(f"{kind + ' all but the cell':<26}{added[0]:>14.3f}{added[1]:>14.3f}")
    return "\n".join(lines)


def _least(run: Callable[[], dict[str, float]], repeat: int) -> dict[str, float]:
    """The least seconds of each pass over ``repeat`` rounds, after one round that warms up."""
    run()
    rounds = [run() for _ in range(max(repeat, 3))]
    return {step: min(r[step] for r in rounds) for step in rounds[0]}


def _passes(shell: Any, kernel: dict[str, Any], sent: list[str], code: str) -> dict[str, float]:
    """One cell's passes in this process, CPU seconds each, as the kernel and the machine make them
    (client/burst.py, agent/attempt/inputs.py and runner.py): inputs as blobs, loaded, watched, the cell run and
    its Out drawn by the shell's formatter, what changed pickled back and loaded into ``kernel``'s objects."""
    from nbburst.agent.attempt.inputs import Inputs
    from nbburst.protocol import processstate, transfer, views

    spent: dict[str, float] = {}

    def timed(step: str, fn: Callable[[], Any]) -> Any:
        start = time.process_time()
        value = fn()
        spent[step] = time.process_time() - start
        return value

    sent_inner: dict[str, dict[int, Any]] = {}
    blobs = timed("kernel pickles", lambda: transfer.encode_inputs({n: kernel[n] for n in sent}, inner=sent_inner)[0])
    machine: dict[str, Any] = {"__name__": "__main__"}
    inner: dict[str, dict[int, Any]] = {}

    def load() -> None:
        for name, blob in blobs.items():
            machine[name] = transfer.load_value(blob.tobytes(), machine, inner.setdefault(name, {}), inner)

    timed("machine loads", load)
    inputs = Inputs({"track": True}, processstate.Tracker({}))
    timed("fingerprints as arrived", lambda: inputs.watch(machine, list(blobs), inner))
    last, _ = timed("cell and Out", lambda: _run(shell, code, machine))
    values, refs, adopt = timed("fingerprints after", lambda: inputs.returns_of(machine, {}))

    def write() -> Any:
        held = [obj for obj in inputs.held() if id(obj) in refs or id(obj) in adopt]
        writer = transfer.Writer(refs, adopt, views.Regions(held, values.values()))
        for name, value in {**values, transfer.LAST: last}.items():
            writer.add(name, value)
        return writer.finish({})

    result = timed("machine pickles", write)
    timed("kernel loads", lambda: transfer.load_values(result.tobytes(), kernel, sent_inner))
    return spent


def _round_trip(burst: Any, code: str, ns: dict[str, Any], options: Any) -> None:
    """A %%burst cell from submission until its values are in ``ns``."""
    from nbburst.client.capture import capture

    job = burst.submit_cell(code, capture(code, ns), options)
    job.wait()
    job.outcome(ns).merge_into(ns)


def main() -> None:
    sys.path.insert(0, str(HERE))
    from overhead import Bench, Row, table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="nbburst-figures-")
    try:
        t = time.perf_counter()
        print(table(measure(Bench(args, work).start(), Row)))
        print(passes(args.repeat))
        print(f"({time.perf_counter() - t:.0f} s in all)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.environ.pop("NBBURST_ROOT", None)


if __name__ == "__main__":
    main()
