"""A %%burst cell leaves the notebook's data and process as the same cell run in the kernel would.

Each test runs the same cells twice in fresh kernels (nbclient): plainly, and with ``%%burst`` on
some of them (the local backend), then compares what later plain cells print.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from support.nbrun import error, run_cells, stream

from nbburst.protocol import payload, transfer

LOAD = "%load_ext nbburst"


def both(cells: list[str], burst: set[int]) -> tuple[list[list[dict]], list[list[dict]]]:
    """Outputs of ``cells`` run plainly, and with ``%%burst`` before the cells numbered in ``burst``."""
    plain = run_cells(cells)
    bursted = run_cells([LOAD] + [("%%burst\n" + c if i in burst else c) for i, c in enumerate(cells)])[1:]
    return plain, bursted


def assert_same(plain: list[list[dict]], bursted: list[list[dict]]) -> None:
    for i, (p, b) in enumerate(zip(plain, bursted, strict=True)):
        assert error(p) is None, (i, error(p))
        assert error(b) is None, (i, error(b))
        assert stream(b) == stream(p), f"cell {i} prints differently"


def test_changes_made_in_place_come_back(burst_env):
    setup = (
        "import numpy as np, pandas as pd\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "X = np.random.default_rng(0).random((60, 3)); y = (X[:, 0] > .5).astype(int)\n"
        "model = LogisticRegression(); holder = [model]\n"
        "df = pd.DataFrame({'a': range(4), 'b': list('wxyz')})\n"
        "s = pd.Series([1, 2, 3])\n"
        "lst = [1]; d = {'inner': lst}; box = {'d': d}\n"
        "rng = np.random.default_rng(1); rs = np.random.RandomState(2); keeps = {'rng': rng}\n"
        "arr = np.zeros(4); view = arr[:2]\n"
        "big = np.arange(3_000_000.0)"
    )
    cell = (
        "model.fit(X, y)\n"
        "df['c'] = df['a'] * 2\n"
        "df.set_index('b', inplace=True)\n"
        "s.index = ['p', 'q', 'r']\n"
        "lst.append(2)\n"
        "d['k'] = 5\n"
        "draw = rng.integers(0, 1000, 3)\n"
        "draw2 = rs.randint(0, 1000, 3)\n"
        "arr[0] = 7\n"
        "pair = (big, 1)\n"
        "total = big.sum()"
    )
    check = (
        "print(model.predict(X[:8]), holder[0] is model)\n"
        "print(df.to_dict(), df.index.name)\n"
        "print(s.to_dict())\n"
        "print(lst, d, d['inner'] is lst, box['d'] is d)\n"
        "print(draw, rng.integers(0, 1000, 3), keeps['rng'] is rng)\n"
        "print(draw2, rs.randint(0, 1000, 3))\n"
        "print(arr, view)\n"
        "print(pair[0] is big, total)"
    )
    plain, bursted = both([setup, cell, check], burst={1})
    assert_same(plain, bursted)
    # The unchanged 24 MB input did not travel back: the result holds a reference to the kernel's array.
    results = list((burst_env["root"] / "jobs").glob("*/result.pkl"))
    assert len(results) == 1 and results[0].stat().st_size < 1_000_000


def test_what_a_cell_replaced_inside_its_inputs_is_freed_in_the_kernel_as_plainly(burst_env):
    """The kernel keeps the handle of every job it ran; it must not keep, through it, the objects a cell replaced
    inside its inputs (the transforms of a Figure's earlier draws, an estimator's old arrays)."""
    setup = (
        "import gc, weakref\nclass Part: pass\n"
        "box = {'part': Part(), 'parts': [Part()]}\nrefs = [weakref.ref(box['part']), weakref.ref(box['parts'][0])]"
    )
    cell = "box['part'] = Part()\nbox['parts'][0] = Part()"
    check = "gc.collect()\nprint([ref() is None for ref in refs], type(box['part']).__name__)"
    plain, bursted = both([setup, cell, check, cell, check], burst={1, 3})
    assert_same(plain, bursted)
    assert stream(bursted[2]) == stream(bursted[4]) == "[True, True] Part\n"


def test_functions_resolve_their_globals_in_the_namespace_they_run_in(burst_env):
    cells = [
        "import numpy as np\n"
        "from sklearn.preprocessing import FunctionTransformer\n"
        "from sklearn.pipeline import make_pipeline\n"
        "def f():\n    return later + 1\n"
        "k = 1\n"
        "def g():\n    return k\n"
        "k = 2\n"
        "scale = 2\n"
        "def times(X):\n    return X * scale\n"
        "pipe = make_pipeline(FunctionTransformer(times))\n"
        "class C:\n    def m(self):\n        return scale + 1",
        "later = 41\nr1 = f()\nr2 = g()",
        "later = 100\nprint(r1, r2, f(), g())",
        "def h():\n    return z * 2\nz = 3\nr3 = h()",
        "z = 10\nprint(r3, h())",
        "scale = 3\nout = pipe.fit_transform(np.ones((1, 2)))\nc = C().m()",
        "scale = 5\nprint(out, c, pipe.transform(np.ones((1, 2))), C().m())",
    ]
    plain, bursted = both(cells, burst={1, 3, 5})
    assert stream(plain[2]).split() == ["42", "2", "101", "2"]
    assert_same(plain, bursted)


WARNS = (
    "try:\n    warnings.warn('boom', RuntimeWarning)\n    print('passes')\n"
    "except RuntimeWarning:\n    print('raises')\n"
)


def test_process_state_travels_both_ways(burst_env):
    cells = [
        "import numpy as np, random, warnings, decimal, sklearn, pandas as pd, matplotlib\n"
        "import nbburst\n"
        "nbburst.state.register('decimal.prec', lambda: decimal.getcontext().prec,\n"
        "                       lambda v: setattr(decimal.getcontext(), 'prec', v), module='decimal')\n"
        "np.random.seed(0)\n"
        "random.seed(1)\n"
        "sklearn.set_config(display='text')\n"
        "pd.set_option('display.max_rows', 7)\n"
        "import seaborn\n"
        "seaborn.set_style('darkgrid')  # names the colormap seaborn registers: the machine does not import seaborn\n"
        "matplotlib.rcParams['lines.linewidth'] = 3.5\n"
        "warnings.simplefilter('ignore', UserWarning)\n"
        "decimal.getcontext().prec = 5",
        # in the kernel's state; then changes it
        "print(np.random.rand(), random.random(), sklearn.get_config()['display'])\n"
        "print(pd.get_option('display.max_rows'), matplotlib.rcParams['lines.linewidth'])\n"
        "print(decimal.Decimal(1) / decimal.Decimal(3))\n"
        "print(matplotlib.colormaps[matplotlib.rcParams['image.cmap']].name)\n"
        "warnings.warn('this one is filtered', UserWarning)\n"
        "np.random.seed(5)\n"
        "random.seed(6)\n"
        "sklearn.set_config(assume_finite=True)\n"
        "pd.set_option('display.precision', 3)\n"
        "import matplotlib.pyplot as plt\n"
        "plt.rc('font', size=13)\n"
        "warnings.simplefilter('error', RuntimeWarning)\n"
        "decimal.getcontext().prec = 3",
        # the changes are in force in the kernel afterwards...
        "print(np.random.rand(), random.random(), sklearn.get_config()['assume_finite'])\n"
        "print(pd.get_option('display.precision'), matplotlib.rcParams['font.size'])\n"
        "print(decimal.Decimal(1) / decimal.Decimal(3))\n" + WARNS,
        # ... and in the next burst cell
        "print(np.random.rand(), random.random(), sklearn.get_config()['assume_finite'])\n"
        "print(pd.get_option('display.precision'), matplotlib.rcParams['font.size'])\n"
        "print(decimal.Decimal(1) / decimal.Decimal(3))\n" + WARNS,
    ]
    plain, bursted = both(cells, burst={1, 3})
    assert stream(plain[2]).splitlines()[2:] == ["0.333", "raises"]
    assert_same(plain, bursted)
    assert "filtered" not in stream(bursted[1], "stderr")


def test_a_seed_set_on_the_machine_holds_for_the_next_burst_cell_before_the_kernel_imports_numpy_random(burst_env):
    """numpy imports numpy.random lazily: the kernel holds the seeded state for it (its module not imported
    there yet) and sends it with the next cell, as the statsmodels wls example needs."""
    cells = ["import numpy as np\nnp.random.seed(1024)", "e = np.random.normal(size=3)\nprint(e)"]
    plain, bursted = both(cells, burst={0, 1})
    assert_same(plain, bursted)


def test_arrays_arrive_aligned_contiguous_and_writeable_as_they_were(burst_env):
    setup = (
        "import numpy as np\n"
        "from sklearn.preprocessing import SplineTransformer\n"
        "from sklearn.linear_model import QuantileRegressor\n"
        "rng = np.random.default_rng(0)\n"
        "X = np.linspace(0, 1, 101).reshape(-1, 1)\n"
        "spline = SplineTransformer().fit(X)\n"
        "A = rng.normal(size=(200, 3)); b = A @ [1.0, 2.0, 3.0] + rng.standard_t(3, size=200)\n"
        "frozen = np.arange(3.0); frozen.flags.writeable = False\n"
        "F = np.asfortranarray(np.ones((3, 4)))"
    )
    cell = (
        "T = spline.transform(X)\n"
        "coef = QuantileRegressor(quantile=0.3, alpha=0.01, solver='highs').fit(A, b).coef_\n"
        "print([(a.flags.c_contiguous, a.flags.f_contiguous, a.flags.writeable) for a in (X, A, frozen, F)])\n"
        "print(repr(T.sum()), repr(coef))"
    )
    plain, bursted = both([setup, cell], burst={1})
    assert_same(plain, bursted)
    outs = run_cells([LOAD, setup, "%%burst\nprint({a.ctypes.data % 64 for a in (X, A, frozen, F)})"])
    assert stream(outs[2]).strip() == "{0}", outs[2]


def test_names_that_shadow_ipythons_travel(burst_env):
    cells = [
        "import numpy as np\n"
        "from sklearn.metrics import ConfusionMatrixDisplay\n"
        "display = ConfusionMatrixDisplay(np.array([[1, 2], [3, 4]]))",
        "kind = type(display).__name__\nmatrix = display.confusion_matrix.sum()\nexit = 5",
        "print(kind, matrix, exit)",
        "display = {'mine': 1}",
        "print(display)",
    ]
    plain, bursted = both(cells, burst={1, 3})
    assert stream(plain[2]).split() == ["ConfusionMatrixDisplay", "10", "5"]
    assert_same(plain, bursted)


def test_submodules_the_kernel_loaded_are_there(burst_env):
    cells = [
        "import json.tool\nimport json as j",  # json.tool: loaded here, never by the machine's own imports
        "name = j.tool.__name__",
        "print(name)",
    ]
    plain, bursted = both(cells, burst={1})
    assert_same(plain, bursted)


def test_values_come_back_whatever_frame_unpickles_them_and_one_bad_value_costs_nothing_else(burst_env):
    cells = [
        "import os\n"
        "import numpy as np, pandas as pd\n"
        "import statsmodels.formula.api as smf\n"
        "df = pd.DataFrame({'x': np.arange(1.0, 21.0), 'y': np.arange(20.0) * 2 + np.sin(np.arange(20.0))})\n"
        "KERNEL = os.getpid()\n"
        "class Fragile:\n"
        "    def __setstate__(self, state):\n"
        "        if os.getpid() == KERNEL:\n"
        "            raise RuntimeError('cannot be rebuilt here')\n"
        "        self.__dict__.update(state)",
        "res = smf.ols('y ~ np.log(x)', data=df).fit()\nfragile = Fragile()\nfragile.v = 1\nkept = 2",
        "print(res.params.round(6).to_dict())",
        "print(kept, 'fragile' in dir())",
    ]
    plain, bursted = both(cells, burst={1})
    assert_same(plain[:3], bursted[:3])
    assert "'fragile' could not come back: RuntimeError: cannot be rebuilt here" in stream(bursted[1], "stderr")
    assert stream(bursted[3]).split() == ["2", "False"]  # the others arrived


# -- the parts, without a kernel ------------------------------------------------------------------


def test_every_buffer_of_a_blob_lands_64_byte_aligned_and_writeable():
    for pad in range(9):
        value = {"k" * pad: np.arange(10.0), "f": np.asfortranarray(np.ones((3, 5), dtype=np.int32))}
        back = payload.decode(payload.encode(value).tobytes())
        for arr in back.values():
            assert arr.ctypes.data % payload.ALIGN == 0 and arr.flags.writeable
        assert back["f"].flags.f_contiguous and np.array_equal(back["k" * pad], value["k" * pad])


def test_shared_objects_stay_shared_and_a_value_that_fails_costs_only_itself():
    class Bad:
        def __reduce__(self):
            raise TypeError("no pickling")

    shared = [1]
    writer = transfer.Writer()
    assert writer.add("a", shared) is None
    assert "TypeError: no pickling" in writer.add("bad", Bad())
    assert writer.add("b", {"a": shared}) is None
    assert writer.add("c", (shared, 3)) is None
    loaded = transfer.load_values(writer.finish({"note": 1}).tobytes(), {})
    assert loaded.meta == {"note": 1} and not loaded.failed
    assert loaded.values["c"][0] is loaded.values["b"]["a"]  # shared after the reset, among themselves


class Fragile:
    broken = False

    def __setstate__(self, state: dict) -> None:
        if Fragile.broken:
            raise RuntimeError("cannot be rebuilt here")
        self.__dict__.update(state)


def load_with_fragile_broken(values: dict) -> transfer.Loaded:
    """``values`` written into one blob, then loaded where a :class:`Fragile` cannot be rebuilt."""
    writer = transfer.Writer()
    for name, value in values.items():
        assert writer.add(name, value) is None
    blob = writer.finish({}).tobytes()
    Fragile.broken = True
    try:
        return transfer.load_values(blob, {})
    finally:
        Fragile.broken = False


def test_a_value_that_cannot_come_back_costs_only_itself_and_what_holds_it():
    fragile = Fragile()
    fragile.data = np.arange(3)  # the array after it shares numpy's pickled globals with it
    loaded = load_with_fragile_broken({"fragile": fragile, "arr": np.arange(5), "holder": [fragile], "n": 1})
    assert loaded.failed["fragile"] == "RuntimeError: cannot be rebuilt here"
    assert "holder" in loaded.failed  # it would hold a half-built object
    assert np.array_equal(loaded.values["arr"], np.arange(5)) and loaded.values["n"] == 1


def test_a_value_that_cannot_come_back_after_others_keeps_what_it_shares_with_them():
    shared = np.arange(4)
    fragile = Fragile()
    fragile.data = shared
    loaded = load_with_fragile_broken({"first": [shared], "fragile": fragile, "after": {"s": shared}, "n": 1})
    assert set(loaded.failed) == {"fragile"}
    first, after = loaded.values["first"], loaded.values["after"]
    assert after["s"] is first[0] and np.array_equal(first[0], shared), "the array the first value brought, once"


def test_unchanged_inputs_come_back_as_the_targets_own_and_changed_ones_update_it_in_place():
    kernel = {"big": np.zeros(1000), "lst": [1], "arr": np.zeros(3)}
    alias, arr = kernel["lst"], kernel["arr"]
    machine = {name: payload.decode(payload.encode(v).tobytes()) for name, v in kernel.items()}
    machine["lst"].append(2)
    machine["arr"][1] = 5.0
    refs = {id(machine["big"]): "big"}
    adopt = {id(machine["lst"]): "lst", id(machine["arr"]): "arr"}
    writer = transfer.Writer(refs, adopt)
    for name, value in {"lst": machine["lst"], "arr": machine["arr"], "out": (machine["big"], machine["lst"])}.items():
        assert writer.add(name, value) is None
    blob = writer.finish({})
    assert blob.nbytes < 2000  # the 8 kB array is not in it
    values = transfer.load_values(blob.tobytes(), kernel).values
    assert values["lst"] is alias == [1, 2] and values["arr"] is arr and arr[1] == 5.0
    assert values["out"][0] is kernel["big"] and values["out"][1] is alias


def test_an_input_another_one_holds_is_one_object_on_the_machine():
    lst = [1]
    d = {"inner": lst}
    encoded, failed = transfer.encode_inputs({"box": {"d": d}, "d": d, "lst": lst, "alias": lst})
    ns: dict = {}
    for name, blob in encoded.items():  # in the order the machine loads them
        ns[name] = transfer.load_value(blob.tobytes(), ns)
    assert not failed and ns["box"]["d"] is ns["d"] and ns["d"]["inner"] is ns["lst"] is ns["alias"]


def test_what_a_formula_inside_an_input_mentions_travels_too():
    # statsmodels re-evaluates a model's formula when it is unpickled, in the namespace it lands in
    model = {"formula": "y ~ double_it(x) + np.log(z)"}
    ns = {"model": model, "double_it": lambda v: 2 * v, "np": np, "x": [1], "lock": threading.Lock()}
    encoded, failed = transfer.encode_inputs({"model": model, "lock": ns["lock"]}, {"lock"}, namespace=ns)
    assert list(encoded) == ["double_it", "np", "x", "model"] and list(failed) == ["lock"]  # the model last


def test_notebook_functions_bind_to_the_namespace_they_land_in():
    source: dict = {"__name__": "__main__"}
    exec("k = 1\ndef f():\n    return k + later", source)
    target = {"__name__": "__main__", "k": 10}
    f = transfer.load_value(payload.encode(source["f"]).tobytes(), target)
    target["later"] = 5
    assert f.__globals__ is target and f() == 15
    before = transfer.fingerprint(f)
    target["k"] = 11
    assert f() == 16 and transfer.fingerprint(f) == before  # what a function is does not depend on its globals


def test_a_state_waits_for_its_module_to_be_imported():
    code = (
        "import importlib.util, sys\n"
        "from nbburst.protocol import processstate as state\n"
        "context = lambda: sys.modules['decimal'].getcontext()\n"
        "state.register('decimal.prec', lambda: context().prec, lambda v: setattr(context(), 'prec', v))\n"
        "assert 'decimal' not in sys.modules\n"
        "assert state.restore({'decimal.prec': 7}) == []\n"
        "importlib.util.find_spec('decimal')  # looking for it imports nothing\n"
        "import decimal\n"
        "print(decimal.getcontext().prec)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "7", done.stderr


def test_a_state_waiting_for_its_module_goes_with_the_next_cell():
    code = (
        "import sys\n"
        "from nbburst.protocol import processstate as state\n"
        "context = lambda: sys.modules['decimal'].getcontext()\n"
        "state.register('decimal.prec', lambda: context().prec, lambda v: setattr(context(), 'prec', v))\n"
        "assert 'decimal' not in sys.modules and state.restore({'decimal.prec': 7}) == []\n"
        "import pickle\n"
        "print(pickle.loads(state.capture()['decimal.prec'][1]))  # not imported yet: the waiting state\n"
        "import decimal\n"
        "decimal.getcontext().prec = 9\n"
        "print(pickle.loads(state.capture()['decimal.prec'][1]))  # imported: the module's own"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["7", "9"], done.stderr


@pytest.mark.parametrize("value", [[1, {"a": 2}], {"x": np.arange(4)}])
def test_fingerprints_see_changes_made_in_place(value):
    before = transfer.fingerprint(value)
    assert transfer.fingerprint(value) == before
    if isinstance(value, list):
        value.append(3)
    else:
        value["x"][0] = 9
    assert transfer.fingerprint(value) != before


def _round_trip(kernel: dict, sent: list[str], cell) -> tuple[transfer.Loaded, int]:
    """Send ``sent`` from ``kernel`` to a machine namespace, run ``cell(ns)`` there (it returns its
    outputs), and bring back what the agent brings back; returns what arrived and the blob's size."""
    from nbburst.agent.attempt.inputs import Inputs
    from nbburst.protocol import processstate as state

    inner_sent: dict = {}
    encoded, failed = transfer.encode_inputs({n: kernel[n] for n in sent}, inner=inner_sent)
    assert not failed
    ns: dict = {"__name__": "__main__"}
    inner_arrived: dict = {}
    for name, blob in encoded.items():
        ns[name] = transfer.load_value(blob.tobytes(), ns, inner_arrived.setdefault(name, {}))
    inputs = Inputs({"track": True}, state.Tracker({}))
    inputs.watch(ns, list(encoded), inner_arrived)
    values, refs, adopt = inputs.returns_of(ns, cell(ns))
    writer = transfer.Writer(refs, adopt)
    for name, value in values.items():
        assert writer.add(name, value) is None
    blob = writer.finish({})
    return transfer.load_values(blob.tobytes(), kernel, inner_sent), blob.nbytes


def test_objects_inside_a_changed_input_update_the_kernels_own_and_unchanged_arrays_stay_home():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    scaler, log, big = StandardScaler(), [], np.arange(200_000.0)
    kernel = {"pipe": make_pipeline(scaler), "scaler": scaler, "holder": {"log": log, "data": big}, "log": log}
    X = np.random.default_rng(0).random((20, 3))

    def cell(ns: dict) -> dict:
        ns["pipe"].fit(X)
        ns["holder"]["log"].append("fitted")
        return {}

    loaded, size = _round_trip(kernel, ["pipe", "holder"], cell)
    assert not loaded.failed and set(loaded.values) == {"pipe", "holder"}
    assert loaded.values["pipe"] is kernel["pipe"] and kernel["pipe"].steps[0][1] is scaler
    assert hasattr(scaler, "mean_"), "the step bound to another name was fitted in place"
    assert loaded.values["holder"]["log"] is log == ["fitted"] and loaded.values["holder"]["data"] is big
    assert size < big.nbytes // 10, "an unchanged array inside a changed input travelled back"


def test_an_output_holding_an_object_inside_an_unchanged_input_is_the_kernels_object():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler()
    kernel = {"pipe": make_pipeline(scaler), "scaler": scaler}
    loaded, _ = _round_trip(kernel, ["pipe"], lambda ns: {"first": ns["pipe"].steps[0][1]})
    assert loaded.values == {"first": scaler} and loaded.values["first"] is scaler


def test_files_the_cell_names_in_the_notebooks_folder_are_staged(tmp_path, monkeypatch):
    from nbburst.client.capture import capture
    from nbburst.options import Options

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("a\n1\n")
    (tmp_path / "notes.txt").write_text("n")
    ns: dict = {"__name__": "__main__"}
    exec("def read(path='notes.txt'):\n    return open(path).read()", ns)
    cap = capture("import pandas as pd\ndf = pd.read_csv('data/x.csv')\ntext = read()\nother = 'missing.csv'", ns)
    assert cap.files == ["data/x.csv", "notes.txt"]
    staged = cap.staged(Options.build(files=["notes.txt"]))
    assert staged.files == ["notes.txt", "data/x.csv"]
    written = capture("get_ipython().run_cell_magic('writefile', 'notes.txt', 'hello\\n')", ns)  # %%writefile
    assert written.files == ["notes.txt"]  # sent: %%writefile says Overwriting, and -a appends to it, as here


def test_a_burst_cell_reads_the_files_beside_the_notebook(burst_env, tmp_path):
    (tmp_path / "edges.txt").write_text("1 2\n2 3\n")
    cells = [LOAD, "%%burst\nwith open('edges.txt') as f:\n    print(len(f.read().split()))"]
    out = run_cells(cells, cwd=tmp_path)[1]
    assert error(out) is None, error(out)
    assert stream(out) == "4\n"
