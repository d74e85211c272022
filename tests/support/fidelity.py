"""Fidelity of ``%%burst`` on real third-party notebooks.

Each notebook under ``tests/thirdparty/<project>/`` (``.ipynb`` as written, or a
sphinx-gallery ``.py`` script split at its ``# %%`` markers) runs twice in a fresh
``python3`` kernel with nbclient:

* plainly, cell by cell, as its authors wrote it;
* with ``%load_ext nbburst`` as a first cell and ``%%burst`` put before every
  code cell (the local backend), so each cell runs in an agent process.

Both runs end with a cell that prints a fingerprint of the user namespace. The
two runs are then compared cell by cell: stdout (normalised), the ``Out`` value
(text/plain), the display MIME types in order, whether the cell raised (and
what), and finally the namespace. stderr is compared too but only reported,
never counted (warnings name files and lines that legitimately differ).

Use from a test::

    from support.fidelity import check
    result = check("statsmodels/glm_formula", control=True)
    assert result.status == "identical", result.describe()

or from a shell: ``python tests/support/fidelity.py [NAME ...] [--jobs 2] [--timeout S]``.
A NAME is ``project/stem``, a stem, or a project; none means every notebook.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
CORPUS = TESTS / "thirdparty"
MARKER = "@@FIDELITY-NAMESPACE@@"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
JOB_VIEW_HTML = "data-nbburst-job="  # the job view's static HTML form (nbburst/ui/view.py)
PLAIN_TIMEOUT = 120  # seconds for a whole plain run (the corpus is chosen to run in ~20 s)
BURST_TIMEOUT = 900  # seconds for a whole burst run (every cell pays an agent start)
MAX_DIFFS = 6  # differences listed per notebook in a report

# -- the corpus -----------------------------------------------------------------------------------


def entries(folder: Path) -> list[Path]:
    """The notebooks of one project folder: its ``.ipynb`` files; in a folder of sphinx-gallery scripts (no
    ``.ipynb``), its ``.py`` files. A ``.py`` file beside ``.ipynb`` notebooks is a module they import."""
    return sorted(folder.glob("*.ipynb")) or sorted(folder.glob("*.py"))


def discover(names: list[str] | None = None) -> list[Path]:
    """Notebooks (``.ipynb``) and gallery scripts (``.py``) of the corpus, by name."""
    found = sorted(p for folder in CORPUS.iterdir() if folder.is_dir() for p in entries(folder))
    if not names:
        return found
    picked = []
    for name in names:
        name = name.removesuffix(".ipynb").removesuffix(".py")
        hits = [p for p in found if name in (notebook_id(p), p.stem, p.parent.name)]
        if not hits:
            raise SystemExit(f"no notebook called {name!r} under {CORPUS}")
        picked += [p for p in hits if p not in picked]
    return picked


def notebook_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


_CELL_MARKER = re.compile(r"^# ?%%")


def py_to_notebook(text: str) -> nbformat.NotebookNode:
    """A sphinx-gallery script as a notebook: the module docstring and every ``# %%``
    block that is only comments become markdown; every other block a code cell."""
    lines = text.splitlines()
    blocks: list[list[str]] = [[]]
    for line in lines:
        if _CELL_MARKER.match(line):
            blocks.append([])
        else:
            blocks[-1].append(line)
    cells = []
    for i, block in enumerate(blocks):
        body = "\n".join(block).strip("\n")
        if not body.strip():
            continue
        if i == 0 and body.lstrip().startswith(('"""', "'''", 'r"""')):
            quote = '"""' if '"""' in body else "'''"
            start = body.index(quote)
            end = body.index(quote, start + 3)
            cells.append(nbformat.v4.new_markdown_cell(body[start + 3 : end].strip()))
            body = body[end + 3 :].strip("\n")
            if not body.strip():
                continue
        code_lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if code_lines:
            cells.append(nbformat.v4.new_code_cell(body))
        else:
            cells.append(nbformat.v4.new_markdown_cell("\n".join(ln.lstrip("# ") for ln in body.splitlines())))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def load(path: Path) -> nbformat.NotebookNode:
    if path.suffix == ".py":
        return py_to_notebook(path.read_text(encoding="utf-8"))
    return nbformat.read(path, as_version=4)


# -- the two variants -----------------------------------------------------------------------------

SUMMARY_CELL = r"""
def __fidelity_summary():
    import hashlib, json, re, types
    ip = get_ipython()
    ns = ip.user_ns
    hidden = set(getattr(ip, "user_ns_hidden", {}))
    skip = {"In", "Out", "exit", "quit", "get_ipython"}
    addr = re.compile(r"0x[0-9a-fA-F]+")
    def h(data):
        if isinstance(data, str):
            data = data.encode("utf-8", "replace")
        return hashlib.sha1(data).hexdigest()[:12]
    def tname(v):
        t = type(v)
        name = t.__qualname__ if t.__module__ == "builtins" else t.__module__ + "." + t.__qualname__
        if t.__module__ == "__main__" and ns.get(t.__qualname__) is not t:
            name += " (not the class now bound to that name)"
        return name
    def rnum(x):
        x = complex(x) if isinstance(x, complex) else float(x)
        if isinstance(x, complex):
            return repr(complex(float(f"{x.real:.10g}"), float(f"{x.imag:.10g}")))
        return repr(float(f"{x:.10g}"))
    def fp(v):
        import sys
        np = sys.modules.get("numpy")
        pd = sys.modules.get("pandas")
        if v is None or isinstance(v, (bool, int)):
            return tname(v) + " " + repr(v)
        if isinstance(v, (str, bytes)):
            r = repr(v)
            return tname(v) + " " + (r if len(r) <= 120 else "len=%d sha1=%s" % (len(v), h(v)))
        if isinstance(v, (float, complex)):
            return tname(v) + " " + rnum(v)
        if np is not None:
            if isinstance(v, np.generic):
                if isinstance(v, (np.floating, np.complexfloating)):
                    return tname(v) + " " + rnum(v)
                return tname(v) + " " + repr(v.item())
            if isinstance(v, np.ndarray):
                a = v
                if a.dtype.kind in "fc":
                    a = np.round(a, 8) + 0.0
                    data = a.tobytes()
                elif a.dtype.kind in "biu":
                    data = a.tobytes()
                else:
                    data = addr.sub("0x", repr(a.tolist()))
                return "%s shape=%s dtype=%s sha1=%s" % (tname(v), v.shape, v.dtype, h(data))
        if pd is not None and isinstance(v, (pd.DataFrame, pd.Series, pd.Index)):
            obj = v.to_frame() if isinstance(v, pd.Index) else v
            cols = list(map(str, obj.columns)) if isinstance(obj, pd.DataFrame) else [str(obj.name)]
            text = obj.to_csv(float_format="%.8g")
            return "%s shape=%s columns=%s sha1=%s" % (tname(v), v.shape, cols[:20], h(addr.sub("0x", text)))
        sk = sys.modules.get("sklearn.base")
        if sk is not None and isinstance(v, sk.BaseEstimator):
            try:
                from sklearn.utils.validation import check_is_fitted
                check_is_fitted(v)
                fitted = True
            except Exception:
                fitted = False
            params = addr.sub("0x", repr(sorted(v.get_params(deep=False).items(), key=lambda kv: kv[0])))
            return "%s fitted=%s params_sha1=%s" % (tname(v), fitted, h(params))
        if isinstance(v, (list, tuple, dict, set, frozenset)):
            return "%s len=%d" % (tname(v), len(v))
        return tname(v)
    out = {}
    for name in sorted(ns):
        if name.startswith("_") or name in skip or name in hidden:
            continue
        v = ns[name]
        if isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
            continue
        try:
            out[name] = fp(v)
        except Exception as exc:
            out[name] = tname(v) + " <no fingerprint: %s>" % type(exc).__name__
    print("@@FIDELITY-NAMESPACE@@" + json.dumps(out, sort_keys=True))
__fidelity_summary()
del __fidelity_summary
""".strip()


def code_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


#: The cells a variant runs before the notebook's own and after them (before the summary), by mode.
AROUND = {
    "plain": ([], []),
    "burst": (["%load_ext nbburst"], []),
    "session": (["%load_ext nbburst", "%burst session start --idle 10m --timeout 1h"], ["%burst session stop"]),
}


def variant(nb: nbformat.NotebookNode, burst: bool, session: bool = False) -> nbformat.NotebookNode:
    """The notebook to execute: its code cells (outputs dropped), ``%%burst`` before each
    when ``burst`` (on one warm session when ``session``), then the namespace summary cell
    (always run plainly in the kernel)."""
    before, after = AROUND[_mode(burst, session)]
    cells = [nbformat.v4.new_code_cell(source) for source in before]
    for source in code_cells(nb):
        cells.append(nbformat.v4.new_code_cell("%%burst\n" + source if burst else source))
    cells += [nbformat.v4.new_code_cell(source) for source in after]
    cells.append(nbformat.v4.new_code_cell(SUMMARY_CELL))
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return out


def _mode(burst: bool, session: bool) -> str:
    return "session" if session else "burst" if burst else "plain"


# -- executing ------------------------------------------------------------------------------------


@dataclass
class Run:
    """One execution of a variant: the executed cells, or why it could not finish."""

    mode: str
    cells: list[dict] = field(default_factory=list)  # observations, one per original code cell
    namespace: dict[str, str] | None = None
    elapsed: float = 0.0
    failure: str | None = None  # timeout, dead kernel, harness crash


def _kill_marked(marker: str) -> None:
    """End every process that inherited this run's marker (kernel, agents, their children)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of nbburst
        return
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.environ().get("FIDELITY_RUN") == marker:
                proc.kill()
        except (psutil.Error, OSError):
            continue


def snapshot_nbburst() -> tuple[Path, str]:
    """A frozen copy of the nbburst package under test, and which tree it is (commit, dirty or not):
    a run of the whole corpus takes many minutes, and the working tree may change meanwhile."""
    source = REPO / "nbburst"
    where = Path(tempfile.mkdtemp(prefix="fidelity-nbburst-"))
    shutil.copytree(source, where / "nbburst", ignore=shutil.ignore_patterns("__pycache__", "labextension"))
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "nbburst"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        label = f"{head}{' + uncommitted changes' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        label = "unknown"
    return where, label


def execute(
    nb: nbformat.NotebookNode, source_dir: Path, mode: str, timeout: float, package_dir: Path | None = None
) -> Run:
    """Run ``nb`` in a fresh kernel in a child process, in a temp copy of ``source_dir``,
    with HOME, IPython, matplotlib, Jupyter and nbburst state in temp folders; with
    ``package_dir``, the nbburst package is imported from there (see :func:`snapshot_nbburst`)."""
    run = Run(mode=mode)
    scratch = Path(tempfile.mkdtemp(prefix=f"fidelity-{mode}-"))
    work = scratch / "work"
    own = {p.name for p in entries(source_dir)}  # the notebooks; their data files and modules are copied

    def left_out(folder: str, names: list[str]) -> list[str]:
        here = Path(folder) == source_dir
        return [n for n in names if (here and n in own) or n.startswith(("LICENSE", "README"))]

    shutil.copytree(source_dir, work, ignore=left_out)
    home = scratch / "home"
    for sub in ("ipython", "mpl", "jupyter/config", "jupyter/data", "jupyter/runtime", "nbburst/root", "nbburst/state"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBBURST_", "JUPYTER_", "JPY_"))}
    env.pop("MPLBACKEND", None)
    if package_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package_dir), env.get("PYTHONPATH", "")) if p)
    env.update(
        HOME=str(home),
        IPYTHONDIR=str(home / "ipython"),
        MPLCONFIGDIR=str(home / "mpl"),
        JUPYTER_CONFIG_DIR=str(home / "jupyter/config"),
        JUPYTER_DATA_DIR=str(home / "jupyter/data"),
        JUPYTER_RUNTIME_DIR=str(home / "jupyter/runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local/share"),
        NBBURST_ROOT=str(home / "nbburst/root"),
        NBBURST_STATE_DIR=str(home / "nbburst/state"),
        NBBURST_BACKEND="local",
        PYTHONHASHSEED="0",
        FIDELITY_RUN=marker,
        # no network at run time: anything that tries fails at once instead of hanging
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        no_proxy="",
        NO_PROXY="",
    )
    # the kernelspec of this interpreter, so the kernel imports the same nbburst and libraries
    spec_dir = home / "jupyter/data/kernels/python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3",
                "language": "python",
            }
        )
    )
    nb_in, nb_out = scratch / "in.ipynb", scratch / "out.json"
    nbformat.write(nb, nb_in)
    started = time.monotonic()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--execute", str(nb_in), str(nb_out), str(work), str(timeout)]
    proc = subprocess.Popen(
        cmd, env=env, cwd=str(work), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        log, _ = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        run.failure = f"timeout: the whole run took over {timeout + 30:.0f} s"
    finally:
        _kill_marked(marker)
    run.elapsed = time.monotonic() - started
    if nb_out.exists():
        result = json.loads(nb_out.read_text())
        executed = nbformat.from_dict(result["nb"])
        if result.get("error") and run.failure is None:
            run.failure = result["error"]
        cells = [c for c in executed.cells if c.cell_type == "code"]
        before, after = AROUND[mode]
        summary, cells = cells[-1], cells[len(before) : len(cells) - 1 - len(after)]
        run.cells = [observe(c) for c in cells]
        text = "".join(o.get("text", "") for o in summary.get("outputs", []) if o.get("output_type") == "stream")
        for line in text.splitlines():
            if line.startswith(MARKER):
                run.namespace = json.loads(line[len(MARKER) :])
        if run.namespace is None and run.failure is None:
            err = observe(summary)["error"]
            run.failure = f"the namespace summary cell did not print ({err})"
    elif run.failure is None:
        run.failure = "the runner crashed: " + log.decode(errors="replace")[-600:]
    shutil.rmtree(scratch, ignore_errors=True)
    return run


def _execute_here(nb_in: str, nb_out: str, cwd: str, timeout: str) -> None:
    """Child process: execute one notebook with nbclient and write what came of it."""
    from nbclient import NotebookClient
    from nbrun import execute  # this file runs as a script here, beside it

    nb = nbformat.read(nb_in, as_version=4)
    error = None
    try:
        execute(
            lambda: NotebookClient(
                nb,
                kernel_name="python3",
                timeout=int(float(timeout)),
                startup_timeout=120,
                allow_errors=True,
                interrupt_on_timeout=True,
                resources={"metadata": {"path": cwd}},
            )
        )
    except BaseException as exc:  # CellTimeoutError, DeadKernelError: keep what ran
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    Path(nb_out).write_text(json.dumps({"nb": nb, "error": error}))


# -- observing and comparing ---------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NORMALISE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"^.*(Wall time|CPU times).*$\n?", re.M), ""),
    (re.compile(r"\b\d+(\.\d+)?\s?(s|ms|µs|us|ns|min|sec|seconds)\b"), "<time>"),
    (re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} \w{3} \d{4}\b"), "<date>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}\b"), "<clock>"),
    (re.compile(r"[ \t]+$", re.M), ""),
    (re.compile(r"/ipykernel_\d+/"), "/ipykernel_<pid>/"),  # the kernel's name for a cell's code: its process id
]


def normalise(text: str) -> str:
    text = _ANSI.sub("", text)
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    return text


def observe(cell: dict) -> dict:
    """What a person sees of one executed cell, normalised for comparison."""
    stdout, stderr, out, mimes, error = [], [], None, [], None
    for o in cell.get("outputs", []):
        kind = o.get("output_type")
        if kind == "stream":
            (stdout if o.get("name") == "stdout" else stderr).append(o.get("text", ""))
        elif kind == "execute_result":
            out = normalise(o.get("data", {}).get("text/plain", ""))
        elif kind == "display_data":
            data = o.get("data", {})
            if WIDGET_MIME in data or JOB_VIEW_HTML in data.get("text/html", "") or "nbburst" in o.get("metadata", {}):
                continue  # the job view: its widget and its static summary
            mimes.append("+".join(sorted(data)))
        elif kind == "error":
            error = {"ename": o.get("ename"), "evalue": normalise(o.get("evalue", ""))[:200]}
    return {
        "source": cell.get("source", ""),
        "stdout": normalise("".join(stdout)),
        "stderr": normalise("".join(stderr)),
        "out": out,
        "mimes": mimes,
        "error": error,
    }


def _short(value: Any, width: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def _first_diff(a: str, b: str) -> tuple[str, str]:
    """The first differing line of two texts, each side."""
    la, lb = a.splitlines(), b.splitlines()
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else "<end>"
        y = lb[i] if i < len(lb) else "<end>"
        if x != y:
            return f"line {i + 1}: {x!r}", f"{y!r}"
    return repr(a[-60:]), repr(b[-60:])


def compare(plain: Run, burst: Run, unstable: frozenset = frozenset()) -> tuple[list[str], list[str]]:
    """(differences, notes): differences count against fidelity, notes (stderr) do not.
    ``unstable`` holds the keys (:func:`diff_keys`) of aspects that differ between two plain runs."""
    return [m for k, m in _diffs(plain, burst) if k not in unstable], _notes(plain, burst)


def diff_keys(a: Run, b: Run) -> frozenset:
    """Which aspects of two runs differ: ``(cell, aspect)`` and ``("namespace", name)``."""
    return frozenset(k for k, _ in _diffs(a, b))


def aspect_name(key: tuple) -> str:
    """``(2, "stdout")`` -> ``"cell 3 stdout"``; ``("namespace", "x")`` -> ``"namespace x"``."""
    return f"namespace {key[1]}" if key[0] == "namespace" else f"cell {key[0] + 1} {key[1]}"


def aspect_keys(names: Iterable[str]) -> frozenset:
    """The keys of :func:`diff_keys` for aspects named as :func:`aspect_name` writes them."""
    keys = set()
    for name in names:
        kind, _, rest = name.partition(" ")
        if kind == "namespace":
            keys.add(("namespace", rest))
        else:
            number, _, aspect = rest.partition(" ")
            keys.add((int(number) - 1, aspect))
    return frozenset(keys)


def _diffs(plain: Run, burst: Run) -> list[tuple[tuple, str]]:
    diffs: list[tuple[tuple, str]] = []
    for i, p in enumerate(plain.cells):
        head = p["source"].strip().splitlines()[0] if p["source"].strip() else ""
        where = f"cell {i + 1} `{_short(head, 50)}`"
        if i >= len(burst.cells):
            diffs.append(((i, "run"), f"{where}: not executed in the burst run"))
            break
        b = burst.cells[i]
        pe, be = p["error"], b["error"]
        if (pe or {}).get("ename") != (be or {}).get("ename"):
            diffs.append(
                (
                    (i, "error"),
                    f"{where}: error plain={_short(pe and pe['ename'] + ': ' + pe['evalue'])} "
                    f"burst={_short(be and be['ename'] + ': ' + be['evalue'], 160)}",
                )
            )
        if p["stdout"] != b["stdout"]:
            x, y = _first_diff(p["stdout"], b["stdout"])
            diffs.append(((i, "stdout"), f"{where}: stdout {_short(x)} vs burst {_short(y)}"))
        if p["out"] != b["out"]:
            diffs.append(((i, "out"), f"{where}: Out plain={_short(p['out'])} burst={_short(b['out'])}"))
        if p["mimes"] != b["mimes"]:
            diffs.append(((i, "mimes"), f"{where}: displays plain={p['mimes']} burst={b['mimes']}"))
    if plain.namespace is not None and burst.namespace is not None:
        for name in sorted(set(plain.namespace) | set(burst.namespace)):
            x, y = plain.namespace.get(name), burst.namespace.get(name)
            if x != y:
                diffs.append((("namespace", name), f"namespace `{name}`: plain={_short(x, 70)} burst={_short(y, 70)}"))
    elif plain.namespace is not None:
        diffs.append((("namespace", None), "namespace: the burst run printed no summary"))
    return diffs


def _notes(plain: Run, burst: Run) -> list[str]:
    notes = []
    for i, (p, b) in enumerate(zip(plain.cells, burst.cells, strict=False)):
        if p["stderr"] != b["stderr"]:
            x, y = _first_diff(p["stderr"], b["stderr"])
            notes.append(f"cell {i + 1}: stderr {_short(x)} vs burst {_short(y)}")
    return notes


@dataclass
class Result:
    name: str
    status: str  # identical | differs | failed
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plain_seconds: float = 0.0
    burst_seconds: float = 0.0
    failure: str | None = None
    unstable: list[str] = field(default_factory=list)  # aspects left out: known to vary, or two plain runs disagree

    def describe(self, limit: int = MAX_DIFFS) -> str:
        lines = [f"{self.name}: {self.status} (plain {self.plain_seconds:.1f} s, burst {self.burst_seconds:.1f} s)"]
        if self.failure:
            lines.append(f"  failure: {self.failure}")
        if self.unstable:
            lines.append(f"  ignored, not reproducible: {', '.join(self.unstable)}")
        for d in self.differences[:limit]:
            lines.append(f"  - {d}")
        if len(self.differences) > limit:
            lines.append(f"  ... {len(self.differences) - limit} more differences")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return self.__dict__.copy()


def check(
    name_or_path: str | Path,
    plain_timeout: float = PLAIN_TIMEOUT,
    burst_timeout: float = BURST_TIMEOUT,
    package_dir: Path | None = None,
    control: bool = False,
    ignore: Iterable[str] = (),
    session: bool = False,
) -> Result:
    """Run one notebook plainly and under ``%%burst`` (every cell on one warm session when ``session``)
    and compare the two. With ``control``, a second plain run first finds what the notebook itself does
    not reproduce (unseeded randomness, timings), and those aspects are left out of the comparison;
    ``ignore`` names aspects known to vary (:func:`aspect_keys`), left out as well."""
    path = Path(name_or_path) if Path(name_or_path).suffix in (".ipynb", ".py") else discover([str(name_or_path)])[0]
    nb = load(path)
    plain = execute(variant(nb, burst=False), path.parent, "plain", plain_timeout, package_dir)
    result = Result(name=notebook_id(path), status="identical", plain_seconds=plain.elapsed)
    if plain.failure:
        result.status, result.failure = "failed", f"plain run: {plain.failure}"
        return result
    unstable: frozenset = aspect_keys(ignore)
    if control:
        again = execute(variant(nb, burst=False), path.parent, "plain", plain_timeout, package_dir)
        if again.failure is None:
            unstable |= diff_keys(plain, again)
    result.unstable = sorted(map(aspect_name, unstable))
    mode = _mode(True, session)
    burst = execute(variant(nb, burst=True, session=session), path.parent, mode, burst_timeout, package_dir)
    result.burst_seconds = burst.elapsed
    result.differences, result.notes = compare(plain, burst, unstable)
    if burst.failure:
        result.status, result.failure = "failed", f"burst run: {burst.failure}"
    elif result.differences:
        result.status = "differs"
    return result


def run_all(
    names: list[str] | None = None,
    jobs: int = 2,
    plain_timeout: float = PLAIN_TIMEOUT,
    burst_timeout: float = BURST_TIMEOUT,
    progress: Any = None,
    package_dir: Path | None = None,
    control: bool = False,
    session: bool = False,
) -> list[Result]:
    """Check every notebook named (all by default), ``jobs`` notebooks at a time (at most 2)."""
    paths = discover(names)

    def one(path: Path) -> Result:
        try:
            result = check(path, plain_timeout, burst_timeout, package_dir, control, session=session)
        except Exception as exc:  # a harness bug must not hide the other notebooks
            result = Result(name=notebook_id(path), status="failed", failure=f"harness: {type(exc).__name__}: {exc}")
        if progress:
            progress(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, 2))) as pool:
        return list(pool.map(one, paths))


def report(results: list[Result], limit: int = MAX_DIFFS) -> str:
    counts = {s: sum(r.status == s for r in results) for s in ("identical", "differs", "failed")}
    total = len(results)
    lines = [
        f"{counts['identical']}/{total} identical, {counts['differs']} differ, {counts['failed']} failed",
        "",
    ]
    for r in sorted(results, key=lambda r: (r.status != "failed", r.status != "differs", r.name)):
        lines.append(r.describe(limit))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--execute":
        _execute_here(*argv[1:5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="project/stem, stem or project (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks at a time (at most 2)")
    parser.add_argument("--plain-timeout", type=float, default=PLAIN_TIMEOUT)
    parser.add_argument("--burst-timeout", type=float, default=BURST_TIMEOUT)
    parser.add_argument("--json", help="also write the results as JSON to this file")
    parser.add_argument("--limit", type=int, default=MAX_DIFFS, help="differences shown per notebook")
    parser.add_argument(
        "--control",
        action="store_true",
        help="run each notebook plainly twice and ignore what differs between those two runs",
    )
    parser.add_argument("--session", action="store_true", help="run the burst cells on one warm session")
    parser.add_argument(
        "--no-snapshot", action="store_true", help="import nbburst from the working tree as it is at each run"
    )
    args = parser.parse_args(argv)

    def progress(r: Result) -> None:
        print(f"[{r.status}] " + r.describe(args.limit), flush=True)

    package_dir, label = None, "the installed nbburst"
    if not args.no_snapshot:
        package_dir, label = snapshot_nbburst()
    print(f"nbburst under test: {label}", flush=True)
    try:
        results = run_all(
            args.names,
            args.jobs,
            args.plain_timeout,
            args.burst_timeout,
            progress,
            package_dir,
            args.control,
            args.session,
        )
    finally:
        if package_dir is not None:
            shutil.rmtree(package_dir, ignore_errors=True)
    print()
    print(report(results, args.limit))
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_json() for r in results], indent=1))
    return 0 if all(r.status == "identical" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
