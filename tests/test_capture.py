"""Which names a cell reads and assigns."""

import threading
import types

import numpy as np
import pytest

from nbburst.client.capture import analyse, capture
from nbburst.errors import CaptureError


def test_reads_before_assignment_and_assigned_names():
    a = analyse("x = x + 1\ny += z\nprint(m)\nnew = 1\nuse = new")
    assert a.reads == ["x", "y", "z", "print", "m"]
    assert a.assigns == ["x", "y", "new", "use"]
    assert a.last_expr is False


@pytest.mark.parametrize(
    "code, assigned",
    [
        ("for i, (j, k) in pairs: pass", {"i", "j", "k"}),
        ("with open(p) as fh, ctx() as (a, b): pass", {"fh", "a", "b"}),
        ("import numpy as np, os.path\nfrom sklearn import svm as s, tree", {"np", "os", "s", "tree"}),
        ("total += 1", {"total"}),
        ("if (w := f()): pass", {"w"}),
        ("vals = [(y := v) for v in data]", {"vals", "y"}),
        ("def fn(): pass\nclass C: pass\nasync def co(): pass", {"fn", "C", "co"}),
        ("def setter():\n    global g\n    g = 1", {"setter", "g"}),
    ],
)
def test_every_way_of_binding_a_name_is_an_output(code, assigned):
    assert assigned <= set(analyse(code).assigns)


def test_except_as_name_is_not_an_output():
    # Python deletes it when the handler ends, so it never exists after the cell.
    assert "err" not in analyse("try:\n    pass\nexcept E as err:\n    pass").assigns


def test_names_local_to_nested_scopes_are_not_inputs():
    a = analyse("sq = [q * k for q in items]\nf = lambda v: v + offset\ndef g(a):\n    b = a\n    return b + G")
    assert set(a.reads) == {"items", "k", "offset", "G"}


def test_loop_and_branch_bindings_are_not_definite():
    # `acc` may be read before the loop assigns it, so it must travel if it exists.
    a = analyse("for i in range(3):\n    acc = acc + i\nif c:\n    v = 1\nprint(v)")
    assert {"acc", "v", "c"} <= set(a.reads) and "i" not in a.reads


def test_deleted_names_and_last_expression():
    a = analyse("del old\nx = 1\nx")
    assert a.deletes == ["old"] and a.last_expr


def test_capture_sorts_modules_values_and_hidden_names():
    ns = {"np": types.ModuleType("numpy"), "X": [1], "unused": 2, "In": [], "_": 3, "_i4": "", "display": print}
    injected = {"In": ns["In"], "display": ns["display"]}  # what IPython put there (shell.user_ns_hidden)
    cap = capture("y = np.sum(X) + _ + len(In)\ndisplay(y)", ns, hidden=injected)
    assert cap.modules == {"np": "numpy"}
    assert cap.values == {"X": [1], "_": 3, "In": []}  # the kernel's history, read by the cell, is the cell's
    assert cap.history == ["_", "In"] and {"_", "In"} <= cap.optional
    assert cap.outputs == ["y"]


def test_names_like_ipythons_travel_when_they_hold_the_users_values():
    # Decided by identity with what IPython injected, not by name.
    injected = {"display": print, "exit": object(), "In": []}
    ns = {"display": {"a confusion": "matrix"}, "exit": 3, "In": injected["In"], "X": 1}
    cap = capture("r = (display, exit, In, X)\ndisplay = 2", ns, hidden=injected)
    assert cap.values == {"display": {"a confusion": "matrix"}, "exit": 3, "X": 1, "In": []}
    assert cap.history == ["In"] and cap.outputs == ["r", "display"]


def test_submodules_loaded_here_under_the_packages_the_cell_uses():
    import email.mime.text  # noqa: F401  (a submodule an earlier cell loaded)
    import json

    cap = capture("import email\nout = json.dumps(1)", {"json": json})
    assert "email.mime.text" in cap.submodules
    assert all(name.partition(".")[0] in ("email", "json") for name in cap.submodules)


def test_out_restricts_outputs():
    assert capture("a = 1\nb = 2", {}, out=["b"]).outputs == ["b"]


def test_syntax_error_is_a_capture_error_with_the_line():
    with pytest.raises(CaptureError, match="line 2"):
        analyse("x = 1\ny = (")


def test_unpicklable_value_passes_capture_and_fails_at_encoding():
    # capture() only selects; the client refuses at encoding time, naming the variable.
    from nbburst.client.submission import encode_all

    with pytest.raises(CaptureError, match=r"variable 'lk' \(_thread.lock\).*Fix: create the lock inside the cell"):
        encode_all(capture("lk.acquire()", {"lk": threading.Lock()}).values)


def test_names_written_in_strings_travel_when_they_can():
    # Formula and query strings are evaluated in the notebook's namespace.
    from nbburst.client.submission import encode_all

    ns = {"np": np, "df": [1], "lim": 3, "lk": threading.Lock()}
    cap = capture("res = ols('y ~ np.log(x)', data=df)\nq = query('a > @lim')\nprint('lk held')", ns)
    assert cap.modules == {"np": "numpy"} and cap.values["lim"] == 3
    assert set(encode_all(cap.values, cap.optional)) == {"df", "lim"}  # the lock only named in a string stays
