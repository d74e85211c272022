"""Lines printed at once by parallel workers of a %%burst cell arrive whole: never two workers' text on one line.

Workers share the cell's stdout and stderr pipes. Loky workers, multiprocessing children (fork and spawn), a
subprocess and the cell itself each print a few hundred lines of a known pattern and length (some over 1 KiB),
to stdout and to stderr, all at the same time; forked children display long HTML while the cell does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from support.nbrun import data, error, run_cells, stream

from nbburst.agent.linebuffered import HOOK_DIR, install

LINES = 150

#: What each worker runs (``exec`` of it travels by reference to every kind of worker, fresh interpreters too).
CHATTER = f"""
import sys
for n in range({LINES}):
    print(f"{{WHO}}-line-{{n}}-" + "x" * (n * 397 % 3000))
    print(f"{{WHO}}-err-{{n}}-" + "y" * (n * 211 % 1500), file=sys.stderr)
"""

CELL = f"""%%burst --cores 2
import multiprocessing, subprocess, sys
from joblib import Parallel, delayed

CHATTER = {CHATTER!r}
child = subprocess.Popen([sys.executable, "-c", "WHO = 'subprocess'" + CHATTER])
procs = [
    multiprocessing.get_context(kind).Process(target=exec, args=(f"WHO = '{{kind}}{{i}}'" + CHATTER, {{}}))
    for kind in ("fork", "spawn") for i in range(2)
]
for p in procs:
    p.start()
Parallel(n_jobs=2)(delayed(exec)(f"WHO = 'loky{{i}}'" + CHATTER, {{}}) for i in range(4))
exec("WHO = 'cell'" + CHATTER)
for p in procs:
    p.join()
child.wait()
del child, procs, p  # nothing to bring back (they do not pickle)
"""

WORKERS = {
    "subprocess",
    "cell",
    *(f"loky{i}" for i in range(4)),
    *(f"{k}{i}" for k in ("fork", "spawn") for i in range(2)),
}
LINE = re.compile(r"(?P<who>[a-z]+\d?)-(?P<kind>line|err)-(?P<n>\d+)-(?P<pad>x*|y*)")


def whole_lines(text: str, kind: str, pad: str, modulo: tuple[int, int]) -> set[tuple[str, int]]:
    """Every line of ``text`` as (worker, number); fails on a line that is not exactly one pattern line."""
    seen = set()
    for line in text.splitlines():
        m = LINE.fullmatch(line)
        assert m and m["kind"] == kind and set(m["pad"]) <= {pad}, f"spliced or foreign line: {line[:200]!r}"
        n = int(m["n"])
        assert len(m["pad"]) == n * modulo[0] % modulo[1], f"a line cut short or run on: {line[:200]!r}"
        seen.add((m["who"], n))
    return seen


def test_lines_of_parallel_workers_arrive_whole_and_on_their_stream(burst_env):
    outs = run_cells(["%load_ext nbburst", CELL])
    assert error(outs[1]) is None, error(outs[1])
    expected = {(who, n) for who in WORKERS for n in range(LINES)}
    assert whole_lines(stream(outs[1]), "line", "x", (397, 3000)) == expected
    assert whole_lines(stream(outs[1], "stderr"), "err", "y", (211, 1500)) == expected


def test_the_hook_line_buffers_pythons_on_pipes_and_runs_the_sitecustomize_it_hides(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.users_site = True\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    install(env)
    probe = "import sys; print(sys.stdout.line_buffering, sys.stdout.write_through, getattr(sys, 'users_site', 0))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "True"]
    assert env["PYTHONPATH"].split(os.pathsep) == [HOOK_DIR, str(tmp_path)]


DISPLAYS = 12
DISPLAY_CELL = f"""%%burst --cores 2
import multiprocessing
from IPython.display import HTML, display

def show(who):
    for n in range({DISPLAYS}):
        display(HTML(f"<p>{{who}}-display-{{n}}-" + "z" * (n * 2777 % 20000) + "</p>"))

procs = [multiprocessing.get_context("fork").Process(target=show, args=(f"fork{{i}}",)) for i in range(2)]
for p in procs:
    p.start()
show("cell")
for p in procs:
    p.join()
del procs, p
"""


def test_long_displays_of_forked_children_arrive_whole(burst_env):
    outs = run_cells(["%load_ext nbburst", DISPLAY_CELL])
    assert error(outs[1]) is None, error(outs[1])
    seen = set()
    for html in (d["text/html"] for d in data(outs[1]) if "text/html" in d):
        m = re.fullmatch(r"<p>(?P<who>\w+)-display-(?P<n>\d+)-(?P<pad>z*)</p>", html)
        assert m and len(m["pad"]) == int(m["n"]) * 2777 % 20000, html[:200]
        seen.add((m["who"], int(m["n"])))
    assert seen == {(who, n) for who in ("cell", "fork0", "fork1") for n in range(DISPLAYS)}
