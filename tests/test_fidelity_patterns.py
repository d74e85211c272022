"""Patterns any notebook may have, identical under ``%%burst``: each as its smallest cells, in every form.

Each test runs its cells three ways in fresh kernels (nbclient): plainly; with ``%%burst`` before the
cells it names, a new machine per cell; and the same on one warm session. What every cell prints and
shows (stdout, its Out, the MIME types of its displays, its error) must be the same, and so must the
namespace left at the end (the fidelity harness's summary, tests/support/fidelity.py). Aliasing is part
of what the cells print (``is``, ``np.shares_memory``), both in the kernel and on the machine.
"""

from __future__ import annotations

import pytest
from support.threeways import assert_identical


def test_state_a_cell_changes_through_a_notebook_functions_globals_comes_back(burst_env, tmp_path):
    """An RNG, a cache, a list, a fitted model, a counter rebound by ``global``: reached by a function,
    a function it calls, a method of a notebook class, a lambda, a closure; in place (other names keep
    seeing the same object)."""
    setup = (
        "import numpy as np\n"
        "from sklearn.linear_model import LinearRegression\n"
        "rng = np.random.RandomState(0)\n"
        "keeps = {'rng': rng}\n"
        "def noisy(n):\n    return rng.randn(n)\n"
        "def deeper(n):\n    return noisy(n) * 2\n"
        "cache, log = {}, []\n"
        "def remember(k):\n    cache[k] = k * 2\n    log.append(k)\n    return cache[k]\n"
        "class Sampler:\n    def draw(self):\n        return rng.randint(0, 100, 3)\n"
        "sampler = Sampler()\n"
        "draw = lambda: rng.rand()\n"
        "def make():\n    def inner():\n        return rng.randint(0, 9)\n    return inner\n"
        "closed = make()\n"
        "model = LinearRegression()\n"
        "def fit():\n    model.fit(np.arange(6.0).reshape(-1, 1), np.arange(6.0) * 3)\n"
        "counter = 0\n"
        "def bump():\n    global counter, gone\n    counter += 1\n    gone = counter\n"
        "def drop():\n    global gone\n    del gone\n"
        "def both():\n    bump()\n    drop()"
    )
    check = (
        "print(rng.randn(2).round(3), keeps['rng'] is rng, cache, log, model.coef_ if hasattr(model, 'coef_') else '-')"
    )
    cells = [
        setup,
        "y = noisy(5)",
        check,
        "z = deeper(2)\nr = remember(4)",
        check,
        "s = sampler.draw()\nd = draw()\nc = closed()",
        check + "\nprint(s, round(d, 4), c)",
        "fit()\nbump()\nbump()",
        check + "\nprint(counter, gone)",
        "both()",
        "print(counter, 'gone' in dir())",
        "y2 = noisy(3)\n" + check,
    ]
    assert_identical(cells, {1, 3, 5, 7, 9, 11}, tmp_path)


def test_views_keep_aliasing_the_kernels_arrays_across_cells(burst_env, tmp_path):
    """Slices, transposes, reversed and strided views, reshapes, ``.view()`` (of another dtype too), views of
    views, of an array inside a container, pandas objects over an array; made on the machine of arrays the
    kernel has, of arrays the cell makes, and inputs that share memory sharing it on the machine."""
    setup = (
        "import numpy as np, pandas as pd\n"
        "a = np.arange(12).reshape(3, 4)\n"
        "f = np.arange(6.0)\n"
        "holder = {'arr': np.arange(5.0)}\n"
        "frame = pd.DataFrame({'x': np.arange(4.0)})"
    )
    share = (
        "print(a, f, holder, frame.x.tolist())\n"
        "pairs = {'a_sub': (a_sub, a), 't': (t, a), 'rev': (rev, a), 'step': (step, a), 'flat': (flat, a),\n"
        "         'same': (same, a), 'raw': (raw, f), 'first': (first, holder['arr']), 's': (s, f),\n"
        "         'df': (df, f), 'vals': (vals, frame), 'y': (y, x), 'tt': (tt, a)}\n"
        "print({k: bool(np.shares_memory(np.asarray(v), np.asarray(w))) for k, (v, w) in pairs.items()})"
    )
    cells = [
        setup,
        "a_sub = a[:2, :2]\nt = a.T\nrev = a[::-1]\nstep = a[:, ::2]\nflat = a.reshape(-1)\nsame = a.view()\n"
        "raw = f.view(np.uint8)\nfirst = holder['arr'][:3]\ns = pd.Series(f, copy=False)\n"
        "df = pd.DataFrame(f.reshape(3, 2), copy=False)\nvals = frame.to_numpy()\n"
        "x = np.arange(10.0)\ny = x[2:]",
        "tt = a_sub.T",
        "a_sub[0, 0] = 99\nt[3, 2] = 98\nrev[0, 0] = 97\nstep[1, 1] = 96\nflat[5] = 95\n"
        "raw[0] = 1\nfirst[1] = 7.0\ns[2] = 3.5\ny[0] = -1.0\ntt[1, 1] = 94\n"
        "print(a[0, 0], f[0] != 0, x[2])",
        share,
        "a_sub[0, 1] = -5\nprint(a[0, 1], tt[1, 0])",
        share,
    ]
    assert_identical(cells, {1, 2, 3, 5, 6}, tmp_path)


def test_the_notebooks_own_modules_travel_with_the_cell(burst_env, tmp_path):
    """Modules and packages beside the notebook and on a sys.path entry of the kernel's, imported by the cell
    or by a notebook function it calls or by one of those modules, imported by the kernel before or not; their
    classes are the machine's and the kernel's own (``type(u) is my_helpers.Thing``); what an import prints is
    printed once, where a plain run prints it."""
    (tmp_path / "my_helpers.py").write_text(
        "import other_helper\n"
        "print('my_helpers: imported')\n"
        "class Thing:\n    def __init__(self, v):\n        self.v = v\n"
        "    def double(self):\n        return Thing(self.v * 2)\n"
        "def scaled(x):\n    return x * 3 + other_helper.OFFSET\n"
    )
    (tmp_path / "other_helper.py").write_text("OFFSET = 100\n")
    (tmp_path / "chatty.py").write_text("print('chatty: imported')\nNAME = 'chatty'\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .core import area\n")
    (tmp_path / "pkg" / "core.py").write_text("def area(r):\n    return 3 * r * r\n")
    (tmp_path / "lib" / "shapes").mkdir(parents=True)
    (tmp_path / "lib" / "shapes" / "__init__.py").write_text("SIDES = {'square': 4}\n")
    cells = [
        "import sys, os\nsys.path.append(os.path.abspath('lib'))\nimport my_helpers\nt = my_helpers.Thing(2)",
        "import pkg\nfrom my_helpers import scaled\nu = t.double()\nbox = [my_helpers.Thing(5)]\n"
        "print(scaled(1), pkg.area(2), type(u) is my_helpers.Thing, type(box[0]) is my_helpers.Thing)",
        "print(type(u) is my_helpers.Thing, u.v, box[0].v)",
        "def uses():\n    import pkg.core\n    import shapes\n    return pkg.core.area(3) + shapes.SIDES['square']",
        "w = uses()\nprint(w)",
        "import chatty\nprint(chatty.NAME)",
        "import chatty\nprint(chatty.NAME, 'again')",
    ]
    assert_identical(cells, {1, 2, 4, 5, 6}, tmp_path)


def test_the_notebooks_own_modules_need_nothing_of_the_notebooks_folder_on_the_machine(tmp_path, monkeypatch):
    """A Compute Engine VM has no access to the laptop: the blob the cell takes is all the machine needs."""
    import subprocess
    import sys

    from nbburst.protocol import payload, sources

    notebook = tmp_path / "notebook"
    (notebook / "pkg").mkdir(parents=True)
    (notebook / "helpers_here.py").write_text("import pkg\nVALUE = pkg.BASE + 1\n")
    (notebook / "pkg" / "__init__.py").write_text("BASE = 41\n")
    monkeypatch.chdir(notebook)
    monkeypatch.syspath_prepend(str(notebook))
    found = sources.collect(["helpers_here", "numpy.linalg", "json"])
    assert sorted(found) == ["helpers_here.py", "pkg/__init__.py"]  # what it imports too; never installed ones
    blob = tmp_path / "sources.blob"
    blob.write_bytes(sources.encode(found).tobytes())
    assert payload.decode(blob.read_bytes())["imported"] == []  # the kernel never imported them
    machine = tmp_path / "machine"
    machine.mkdir()
    code = (
        "import sys\nfrom nbburst.protocol import payload, sources\n"
        f"sources.place(payload.decode(open({str(blob)!r}, 'rb').read()), '.')\n"
        "import helpers_here\nprint(helpers_here.VALUE, helpers_here.__file__)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=machine, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    value, where = done.stdout.split()
    assert value == "42" and where.startswith(str(machine / ".nbburst" / "sources"))


def test_a_module_too_big_to_travel_is_refused_naming_it(tmp_path, monkeypatch):
    from nbburst.errors import UsageError
    from nbburst.protocol import sources

    (tmp_path / "bulky").mkdir()
    (tmp_path / "bulky" / "__init__.py").write_text("")
    with open(tmp_path / "bulky" / "table.bin", "wb") as f:
        f.truncate(sources.MAX_BYTES + 1)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="the module 'bulky'.*--files"):
        sources.collect(["bulky"])


def test_a_star_import_binds_its_names_in_the_kernel_too(burst_env, tmp_path):
    """``from numpy import *`` binds what the module's ``__all__`` (or its public names) says; no syntax shows it."""
    cells = [
        "from numpy import *\nfrom math import *",
        "v = array([1, 2, 3, 4])\nv",
        "print(type(v), linspace(0, 1, 3), pi, floor(2.5), sqrt(4.0))",
    ]
    assert_identical(cells, {0, 1}, tmp_path)


def test_a_name_an_except_clause_unbinds_is_gone_and_one_it_never_bound_stays(burst_env, tmp_path):
    cells = [
        "from math import *\nimport threading\nlock = threading.Lock()",
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print('caught')",
        "print('e' in dir())\nfrom math import *",
        "try:\n    pass\nexcept ValueError as e:\n    pass\ntry:\n    pass\nexcept ValueError as lock:\n    pass",
        "print('e' in dir(), 'lock' in dir())",
    ]
    assert_identical(cells, {1, 3}, tmp_path)


def test_names_notebook_functions_rebind_through_global_are_the_cells_outputs():
    from nbburst.client.capture import capture

    ns: dict = {"__name__": "__main__"}
    exec(
        "counter = 0\n"
        "def bump():\n    global counter\n    counter += 1\n"
        "def drop():\n    global gone\n    del gone\n"
        "class Box:\n    def reset(self):\n        bump()\n        drop()\n"
        "box = Box()",
        ns,
    )
    cap = capture("box.reset()\nx = 1", ns)
    assert cap.outputs == ["x", "counter"] and cap.deletes == ["gone"]
    assert capture("x = 1", ns).outputs == ["x"]
    assert capture("box.reset()", ns, out=["counter"]).outputs == ["counter"]  # --out may name it


def _to_machine_and_back(kernel: dict, cell) -> tuple[dict, dict, int]:
    """Send ``kernel``'s values to a machine namespace, run ``cell(ns)`` there (it returns its outputs), and
    bring back what the agent brings back; returns the machine namespace, what arrived and the blob's size."""
    from nbburst.agent.attempt.inputs import Inputs
    from nbburst.protocol import processstate as state
    from nbburst.protocol import transfer, views

    sent: dict = {}
    encoded, failed = transfer.encode_inputs(kernel, inner=sent)
    assert not failed
    ns: dict = {"__name__": "__main__"}
    arrived: dict = {}
    for name, blob in encoded.items():
        ns[name] = transfer.load_value(blob.tobytes(), ns, arrived.setdefault(name, {}), arrived)
    inputs = Inputs({"track": True}, state.Tracker({}))
    inputs.watch(ns, list(encoded), arrived)
    values, refs, adopt = inputs.returns_of(ns, cell(ns))
    held = [obj for obj in inputs.held() if id(obj) in refs or id(obj) in adopt]
    writer = transfer.Writer(refs, adopt, views.Regions(held, values.values()))
    for name, value in values.items():
        assert writer.add(name, value) is None
    blob = writer.finish({})
    loaded = transfer.load_values(blob.tobytes(), kernel, sent)
    assert not loaded.failed
    return ns, loaded.values, blob.nbytes


def test_a_view_comes_back_on_the_kernels_array_whatever_its_layout_there():
    import numpy as np

    big = np.arange(400_000.0)
    strided = np.arange(30.0).reshape(5, 6)[:, :3]  # not contiguous here, contiguous on the machine
    kernel = {"big": big, "strided": strided}

    def cell(ns: dict) -> dict:
        return {
            "tail": ns["big"][-10:],
            "rows": ns["strided"][1:, ::-1],
            "t": ns["strided"].T,
            "every": ns["strided"][::2],
            "flat": ns["strided"].reshape(-1),  # a view there, a copy here: as reshape makes here
            "cast": ns["big"][:4].view(np.int64),
        }

    ns, back, size = _to_machine_and_back(kernel, cell)
    assert size < 10_000, "a view of an unchanged input travelled as its bytes"
    for name, made in cell({"big": big, "strided": strided}).items():
        of = big if name in ("tail", "cast") else strided
        assert np.array_equal(back[name], made) and back[name].dtype == made.dtype, name
        assert np.shares_memory(back[name], of) == np.shares_memory(made, of), name
    assert type(back["tail"].base) is np.ndarray and back["tail"].flags.writeable
    assert not np.shares_memory(back["flat"], strided)  # a copy, as reshape makes here
    back["rows"][0, 0] = -1.0
    assert strided[1, 2] == -1.0


def test_inputs_that_share_memory_share_it_on_the_machine():
    import numpy as np
    import pandas as pd

    f = np.arange(6.0)
    kernel = {
        "a_sub": (a := np.arange(12).reshape(3, 4))[:2, :2],
        "a": a,
        "holder": {"arr": np.arange(5.0)},
        "frame": pd.DataFrame({"x": np.arange(4.0)}),
        "f": f,
        "s": pd.Series(f, copy=False),
    }
    kernel["first"] = kernel["holder"]["arr"][1:3]
    kernel["vals"] = kernel["frame"].to_numpy()
    ns, _, _ = _to_machine_and_back(kernel, lambda ns: {})
    assert np.shares_memory(ns["a_sub"], ns["a"]) and np.shares_memory(ns["first"], ns["holder"]["arr"])
    assert np.shares_memory(ns["vals"], ns["frame"].to_numpy()) and np.shares_memory(ns["s"].to_numpy(), ns["f"])
    assert not ns["vals"].flags.writeable and ns["a_sub"].flags.writeable  # as they were


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_the_notebooks_own_modules_reach_a_compute_engine_vm(gce_env, compute_emulator, tmp_path, monkeypatch):
    """The VM runs in a folder of its own, with no path to the notebook's: the module comes with the cell."""
    from nbburst.client.burst import Burst
    from nbburst.client.capture import capture
    from nbburst.protocol.job import State

    notebook = tmp_path / "notebook"
    notebook.mkdir()
    (notebook / "my_helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    monkeypatch.chdir(notebook)
    monkeypatch.syspath_prepend(str(notebook))
    code = "import my_helpers\nvalue = my_helpers.twice(21)\nwhere = my_helpers.__file__"
    ns: dict = {"__name__": "__main__"}
    burst = Burst()
    job = burst.submit_cell(code, capture(code, ns), burst.options(backend="gce", cores=2))
    assert job.wait(timeout=120) == State.SUCCEEDED, job.logs()
    values = job.outcome(ns).values
    assert values["value"] == 42 and not values["where"].startswith(str(notebook))
    assert "/.nbburst/sources/" in values["where"]  # from the cell's blob (the first place on the VM's sys.path)
