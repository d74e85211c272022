"""A name a ``%%burst`` cell binds to a value that cannot be pickled never keeps a stale value in the kernel.

A top-level ``def`` or ``class`` whose value cannot travel (a decorator returning an object that holds a weak
reference, as formulaic's ``@stateful_transform`` does) is run again in the kernel, so the kernel holds the
notebook's own object as a plain run leaves it: compared three ways (plainly; ``%%burst``, a new machine per
cell; one warm session), as tests/test_fidelity_patterns.py does. Any other such name is unbound in the kernel
with a message, so that a later cell fails naming it instead of running the kernel's earlier value.
"""

from __future__ import annotations

import ast

import pytest
from support.threeways import assert_identical, observed

from nbburst.client.replay import definitions, settle

#: A decorator the cell defines: what it returns holds a weak reference, which pickle refuses.
REGISTERED = (
    "import weakref\n"
    "class Registered:\n"
    "    def __init__(self, fn):\n"
    "        self.ref = weakref.ref(fn)\n"
    "        self.fn = fn\n"
    "        self.kinds = {}\n"
    "    def register(self, kind):\n"
    "        return lambda fn: self.kinds.setdefault(kind, fn)\n"
    "    def __call__(self, *args):\n"
    "        return self.kinds.get(type(args[0]) if args else None, self.fn)(*args)\n"
)


@pytest.mark.timeout(900)
def test_a_definition_that_cannot_travel_is_the_notebooks_own_in_the_kernel(burst_env, tmp_path):
    """The decorated function (bound in the kernel before, as formulaic's ``center`` was) and a decorated
    class are the cell's own afterwards, called in the next cell, and so is one a later def of the cell
    registers on (``@shape.register(str)``, as formulaic's ``center`` is); a class whose instances cannot be
    pickled comes back as any class does."""
    cells = [
        "def center(x):\n    return 'the earlier one'\nSHIFT = 1",
        REGISTERED + "@Registered\ndef center(x, by=SHIFT):\n    return x - by\n"
        "@Registered\nclass Box:\n    size = SHIFT + 1\n"
        "@Registered\ndef shape(x):\n    return 'any'\n@shape.register(str)\ndef _(x):\n    return 'str'\n"
        "import threading\nclass Locked:\n    def __init__(self):\n        self.lock = threading.Lock()",
        "print(center(5), type(center).__name__, center.ref() is center.fn, Box().size)",
        "print(type(Locked()).__name__, Locked().lock.locked())",
        "print(shape(1), shape('a'))",
    ]
    plain = assert_identical(cells, {1}, tmp_path)
    assert plain[2]["stdout"] == "4 Registered True 2\n", plain[2]
    assert plain[3]["stdout"] == "Locked False\n", plain[3]
    assert plain[4]["stdout"] == "any str\n", plain[4]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["burst", "session"])
def test_any_other_value_that_cannot_travel_unbinds_the_kernels_earlier_one(burst_env, tmp_path, mode):
    """A lambda holding a lock in its closure, bound in the kernel before; a ``def`` whose statement raises
    when run again in the kernel: both unbound with a message, the next cell's use a NameError naming them.
    A name the cell only read stays, so does one it only changed in place."""
    cells = [
        "import os, threading\nKERNEL = os.getpid()\nf = lambda: 'stale'\ng = 'stale'\nkept = 'read only'\nitems = []",
        REGISTERED + "def mine(fn):\n    if os.getpid() == KERNEL:\n        raise RuntimeError('not here')\n"
        "    return Registered(fn)\nitems.append(threading.Lock())\n"
        "f = (lambda lock: lambda: lock.locked())(threading.Lock())\n@mine\ndef g():\n    return kept",
        "f()",
        "g()",
        "print(kept)",
    ]
    seen, space = observed(cells, {1}, mode, tmp_path)
    stderr = seen[1]["stderr"]
    assert "'f' (function) was not brought back: it cannot be pickled" in stderr, stderr
    assert "It stays on the machine; the kernel's earlier value of 'f' was unbound" in stderr, stderr
    assert "'g' (Registered) was not brought back" in stderr, stderr
    assert "running its statement again in the kernel raised RuntimeError: not here" in stderr, stderr
    assert "the kernel's earlier value of 'g' was unbound" in stderr, stderr
    assert seen[2]["error"] == {"ename": "NameError", "evalue": "name 'f' is not defined"}, seen[2]
    assert seen[3]["error"] == {"ename": "NameError", "evalue": "name 'g' is not defined"}, seen[3]
    assert seen[4]["stdout"] == "read only\n" and "f" not in space and "g" not in space and "kept" in space
    assert "'items' (list) was not brought back" in stderr and "'items' was unbound" not in stderr and "items" in space


def test_only_a_top_level_definition_that_alone_binds_its_name_is_run_again():
    """A def rebound later, one inside an ``if``, names bound twice, and a def the cell then hands on (an
    argument, a default) are not replayed: running the statement again would not give what the cell left
    bound. One the cell only calls is; one a later def's decorator registers on is, with that def."""
    tree = ast.parse(
        "@deco\ndef a(): pass\nasync def b(): pass\nclass C(Base): pass\n"
        "def d(): pass\nd = wrap(d)\nif True:\n    def e(): pass\n"
        "def h(): pass\nfor h in []: pass\ndef k(): pass\nimport k\n"
        "def m():\n    global n\n    n = 1\ndef n(): pass\n"
        "def p(): pass\np()\nprint(p())\ndef q(): pass\n@q.register(int)\ndef _(x): pass\ndef r(): pass\nuse(r)\n"
        "def s(): pass\n@s.register(int)\ndef t(x=s): pass\n"
    )
    found = definitions(tree)
    assert sorted(found) == ["C", "_", "a", "b", "m", "p", "q", "t"]
    assert [type(n).__name__ for n in found["q"]] == ["FunctionDef", "FunctionDef"] and found["q"][1].name == "_"


def test_settling_replays_or_unbinds_and_says_why():
    """Run without a kernel: the replayed name is the cell's, with nothing said; the other is unbound, and a
    name never bound before is only said to stay on the machine."""
    tree = ast.parse("def a(x=base):\n    return x\n")
    namespace = {"a": "earlier", "b": "earlier", "base": 3}
    said = settle(namespace, {"a": "'a' why", "b": "'b' why", "c": "'c' why"}, definitions(tree))
    assert namespace["a"]() == 3 and "b" not in namespace and "c" not in namespace
    assert said == {
        "b": "'b' why. It stays on the machine; the kernel's earlier value of 'b' was unbound so that no later "
        "cell uses a stale one",
        "c": "'c' why. It stays on the machine",
    }
