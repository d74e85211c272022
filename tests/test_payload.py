"""Blobs: zero-copy pickling, SHA-256 tree addresses, fingerprints."""

import hashlib

import numpy as np
import pytest

from nbburst.protocol import payload


def test_round_trip_keeps_arrays_writable_and_equal():
    value = {"a": np.arange(1000.0), "nested": [np.ones((3, 4), dtype=np.int32)], "s": "text"}
    enc = payload.encode(value)
    back = payload.decode(bytearray(enc.tobytes()))
    assert np.array_equal(back["a"], value["a"]) and back["a"].flags.writeable
    assert back["nested"][0].dtype == np.int32 and back["s"] == "text"


def test_large_arrays_travel_out_of_band_without_copies():
    arr = np.zeros(1 << 20)
    enc = payload.encode(arr)
    assert any(p.obj is arr or getattr(p, "obj", None) is not None and p.nbytes == arr.nbytes for p in enc.parts)
    assert enc.nbytes >= arr.nbytes


def test_digest_is_a_sha256_tree_independent_of_how_bytes_are_split(monkeypatch):
    monkeypatch.setattr(payload, "TREE_CHUNK", 1000)
    data = bytes(range(256)) * 20  # 5120 bytes = 6 chunks
    whole = payload.digest([memoryview(data)])
    split = payload.digest([memoryview(data[:7]), memoryview(data[7:3333]), memoryview(data[3333:])])
    leaves = b"".join(hashlib.sha256(data[i : i + 1000]).digest() for i in range(0, len(data), 1000))
    assert whole == split == hashlib.sha256(leaves).hexdigest()


def test_fingerprint_changes_with_one_byte():
    arr = np.zeros(100_000)
    before = payload.fingerprint(payload.encode(arr).parts)
    arr[5000] = 1e-300
    assert payload.fingerprint(payload.encode(arr).parts) != before


def test_truncated_blob_is_refused():
    data = payload.encode(np.arange(10)).tobytes()
    with pytest.raises(payload.BlobError):
        payload.decode(bytearray(data[:-3]))
    with pytest.raises(payload.BlobError):
        payload.decode(b"not a blob at all")


def test_a_function_shipped_by_value_keeps_its_file_and_lines(tmp_path, monkeypatch):
    """A function written beside the notebook travels by value; raising on the other side, its traceback names
    its file and line (cloudpickle 3.1.3 alone names every such function's file ``<dynamic-code>``)."""
    import importlib
    import sys
    import traceback

    import cloudpickle

    (tmp_path / "helpers_beside.py").write_text("def fail():\n    raise ValueError('no good')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("helpers_beside")
    cloudpickle.register_pickle_by_value(module)
    try:
        encoded = payload.encode(module.fail)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    (tmp_path / "helpers_beside.py").unlink()  # the other side has no such module: it came by value
    monkeypatch.delitem(sys.modules, "helpers_beside")
    shipped = payload.decode(bytearray(encoded.tobytes()))
    assert shipped.__code__.co_filename == str(tmp_path / "helpers_beside.py")
    with pytest.raises(ValueError) as raised:
        shipped()
    assert 'helpers_beside.py", line 2, in fail' in "".join(traceback.format_tb(raised.tb))


# -- what a cell changed, judged on the machine, and what of it comes back ----------------------------------------


def _burst(kernel: dict, sent: list[str], cell, draw: str | None = None) -> tuple[dict, dict, dict, dict, int]:
    """``sent`` from ``kernel`` to a machine namespace as a job's inputs travel, ``cell(ns)`` run there (it returns
    its outputs; ``draw``: the name of a Figure drawn afterwards, as a cell's Out is), and what the machine sends
    back loaded into ``kernel``. Returns (the machine's namespace, what came back, the machine's unchanged and
    changed objects by address, the result's size)."""
    from nbburst.agent.attempt.inputs import Inputs
    from nbburst.protocol import processstate, transfer

    inner_sent: dict = {}
    encoded, failed = transfer.encode_inputs({n: kernel[n] for n in sent}, inner=inner_sent)
    assert not failed
    ns: dict = {"__name__": "__main__"}
    inner_arrived: dict = {}
    for name, blob in encoded.items():  # in the order the machine loads them
        ns[name] = transfer.load_value(blob.tobytes(), ns, inner_arrived.setdefault(name, {}), inner_arrived)
    inputs = Inputs({"track": True}, processstate.Tracker({}))
    inputs.watch(ns, list(encoded), inner_arrived)
    outputs = cell(ns)
    if draw is not None:
        import io

        ns[draw].savefig(io.BytesIO(), format="png")
    values, refs, adopt = inputs.returns_of(ns, outputs)
    writer = transfer.Writer(refs, adopt)
    for name, value in values.items():
        assert writer.add(name, value) is None
    blob = writer.finish({})
    loaded = transfer.load_values(blob.tobytes(), kernel, inner_sent)
    assert not loaded.failed
    return ns, loaded.values, refs, adopt, blob.nbytes


@pytest.fixture
def figure() -> dict:
    """A kernel's namespace after a cell drew a line plot and its Figure was shown (drawn once)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2])
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    return {"fig": fig, "ax": ax, "line": ax.lines[0]}


def test_a_figure_and_its_axes_are_one_object_graph_on_the_machine_sent_once(figure):
    from nbburst.protocol import transfer

    encoded, _ = transfer.encode_inputs({"fig": figure["fig"], "ax": figure["ax"]})
    assert min(blob.nbytes for blob in encoded.values()) < 200  # one of them is a reference into the other's graph
    ns, back, *_ = _burst(figure, ["fig", "ax"], lambda ns: {"same": ns["ax"].figure is ns["fig"]})
    assert ns["ax"].figure is ns["fig"] and ns["fig"].axes == [ns["ax"]] and back["same"] is True


def test_a_cell_that_changes_nothing_brings_nothing_back(figure):
    _, back, refs, adopt, size = _burst(figure, ["fig", "ax"], lambda ns: {"again": ns["fig"]})
    assert back == {"again": figure["fig"]} and back["again"] is figure["fig"] and size < 1000  # a reference
    assert {"fig", "ax"} <= set(refs.values()) and not any(isinstance(a, str) for a in adopt.values())


def test_a_method_call_on_the_figure_alone_comes_back_into_the_kernels_figure(figure):
    fig, ax = figure["fig"], figure["ax"]

    def cell(ns: dict) -> dict:
        ns["fig"].suptitle("changed through a method")
        return {}

    _, back, refs, adopt, _ = _burst(figure, ["fig", "ax"], cell, draw="fig")
    assert back["fig"] is fig and fig._suptitle.get_text() == "changed through a method"
    assert ax.figure is fig and fig.axes == [ax]


def test_an_artist_reached_only_through_the_figure_comes_back_in_place(figure):
    fig, line = figure["fig"], figure["line"]

    def cell(ns: dict) -> dict:
        ns["fig"].axes[0].lines[0].set_color("red")  # neither the Axes nor the line is an input
        return {}

    _, back, *_ = _burst(figure, ["fig"], cell)
    assert back["fig"] is fig and fig.axes[0].lines[0] is line and line.get_color() == "red"


def test_a_legend_added_to_the_axes_and_the_figure_shown_come_back(figure):
    fig, ax = figure["fig"], figure["ax"]

    def cell(ns: dict) -> dict:
        ns["ax"].legend(["a"])
        return {}

    _, back, *_ = _burst(figure, ["ax", "fig"], cell, draw="fig")
    assert back["ax"] is ax and ax.get_legend() is not None and ax.figure is fig and fig.axes[0] is ax
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a"]


def test_inputs_that_reach_each_other_are_each_judged_by_their_own_part():
    a: dict = {"name": "a"}
    b: dict = {"name": "b", "a": a, "deep": [0]}
    a["b"] = b
    deep = b["deep"]
    kernel = {"a": a, "b": b}

    def cell(ns: dict) -> dict:
        ns["a"]["b"]["deep"].append(1)  # inside b's own part, reached through a
        return {}

    _, back, refs, adopt, _ = _burst(kernel, ["a", "b"], cell)
    assert set(back) == {"b"} and back["b"] is b and b["deep"] is deep == [0, 1] and a["b"] is b
    assert "a" in refs.values() and "b" in adopt.values()


def test_objects_swapped_for_lookalikes_are_a_change():
    p, q = [1], [2]
    kernel = {"pair": [p, q], "p_elsewhere": p}  # the kernel holds p under a name the cell never reads

    def cell(ns: dict) -> dict:
        first, second = ns["pair"]
        first[0], second[0] = 2, 1
        ns["pair"].reverse()  # [[1], [2]] as before, each list now the other one
        return {}

    _, back, *_ = _burst(kernel, ["pair"], cell)
    assert back["pair"] is kernel["pair"] and kernel["pair"][0] is q and kernel["pair"][1] is p
    assert kernel["p_elsewhere"] == [2] and q == [1]


def test_inside_a_changed_input_a_big_unchanged_array_stays_home_and_a_small_one_is_the_kernels_own():
    small, big, log = np.arange(3.0), np.arange(100_000.0), []
    kernel = {"holder": {"small": small, "big": big, "log": log}}

    def cell(ns: dict) -> dict:
        ns["holder"]["log"].append("changed")
        return {}

    _, back, *_, size = _burst(kernel, ["holder"], cell)
    holder = back["holder"]
    assert holder is kernel["holder"] and holder["log"] is log == ["changed"]
    assert holder["small"] is small and list(small) == [0.0, 1.0, 2.0] and holder["big"] is big
    assert size < big.nbytes // 10, "the big array travelled back"


def test_an_input_the_cell_rebinds_after_changing_it_comes_back_inside_the_inputs_that_hold_it():
    inner: dict = {"x": [0]}
    kernel = {"outer": {"inner": inner}, "inner": inner}

    def cell(ns: dict) -> dict:
        ns["outer"]["inner"]["x"].append(1)  # the old object changes...
        ns["inner"] = None  # ...and its name no longer holds it
        return {"inner": None}

    _, back, *_ = _burst(kernel, ["outer", "inner"], cell)
    assert back["inner"] is None and kernel["outer"]["inner"]["x"] == [0, 1]


def test_a_pickler_looks_at_what_a_type_is_once_not_at_each_of_its_objects(monkeypatch):
    """A drawn Figure holds thousands of objects of a few dozen types: whether each is a handle, a class or an
    array that may be a view is asked once per type, and what is said of the type holds for all its objects."""
    from nbburst.protocol import handles, transfer, views

    asked: list[type] = []
    moves = handles.moves
    monkeypatch.setattr(handles, "moves", lambda kind: asked.append(kind) or moves(kind))

    class Point:
        pass

    points, arrays = [Point() for _ in range(500)], [np.arange(3.0) for _ in range(500)]
    base = np.arange(10.0)
    assert transfer.fingerprint([points, arrays]) is not None
    writer = transfer.Writer({id(base): "base"}, regions=views.Regions([base]))
    assert writer.add("values", [points, arrays, base[2:5]]) is None
    assert asked.count(Point) == asked.count(np.ndarray) == 2  # once in each pickler
    loaded = transfer.load_values(writer.finish({}).tobytes(), {"base": base}, {})
    view = loaded.values["values"][2]
    assert view.base is not None and np.shares_memory(view, base)  # an array still travels as a view of a region


def test_a_figure_drawn_on_the_machine_at_every_cell_holds_no_more_at_each_cell(figure):
    """matplotlib's transforms hold their parents by weak reference, but unpickled they keep every parent they
    had when pickled: a Figure crossing at each cell, drawn there, would hold the transforms of every draw."""
    import io
    import pickle

    def objects(fig) -> int:
        pickler = pickle.Pickler(io.BytesIO(), 5, buffer_callback=lambda _: True)
        pickler.dump(fig)
        return len(pickler.memo.copy())

    def cell(ns: dict) -> dict:
        ns["ax"].set_title("again")
        return {}

    fig = figure["fig"]
    held = []
    for _ in range(3):
        _burst(figure, ["fig", "ax"], cell, draw="fig")
        fig.savefig(io.BytesIO(), format="png")  # shown in the kernel too
        assert figure["fig"] is fig and fig.axes[0].get_title() == "again"
        held.append(objects(fig))
    assert held[0] == held[1] == held[2], held
    ax = figure["ax"]
    right = ax.transData.transform((3, 0))[0]
    ax.set_xlim(0, 6)
    assert ax.transData.transform((3, 0))[0] < right  # a transform still tells its parents it changed


def test_where_each_of_many_views_of_one_array_lies_is_read_once_not_once_per_view_asked(monkeypatch):
    """A drawn 3-D surface holds thousands of arrays over one array's memory: each one's bytes are read once,
    not once for every view asked about (which made asking about each of them take seconds)."""
    from nbburst.protocol import views

    base = np.arange(400.0)
    pieces = [base[i : i + 4] for i in range(0, 400, 4)]  # none holds another
    read: list = []
    bounds = views._bounds
    monkeypatch.setattr(views, "_bounds", lambda array: read.append(array) or bounds(array))
    with_base, alone = views.Regions([base, *pieces]), views.Regions(pieces)
    assert all(with_base.region_of(p) is base for p in pieces) and with_base.region_of(base[2:6]) is base
    assert not any(alone.region_of(p) is not None for p in pieces) and alone.region_of(base[2:3]) is pieces[0]
    asked = 2 * len(pieces) + 2
    assert len(read) <= (len(pieces) + 1) + len(pieces) + asked  # each array of a group once, each view asked once
