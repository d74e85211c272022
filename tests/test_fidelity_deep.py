"""A value whose objects reach each other in long chains, deeper than the interpreter's default recursion limit,
travels both ways under ``%%burst`` (docs/fidelity.md, cause 30).

pickle goes into a value depth first, a level of recursion per object: nested lists a thousand deep, a linked list,
or mesa's grid of cells, each holding the cells around it (the held-out mesa ``2_collecting_data`` notebook), raised
``RecursionError`` in the pickler where the kernel holds them without pickling: made on a machine, such a value
stayed there and the next cell raised ``NameError``; made in the kernel, a ``%%burst`` cell reading it stopped before
it was launched. Compared three ways (plainly; a new machine per cell; one warm session), as
tests/test_fidelity_patterns.py does.
"""

from __future__ import annotations

import pytest
from support.threeways import assert_identical

#: Made on the machine (cell 1), read back in the kernel and on the next machine (cells 2, 3); made in the kernel
#: (cell 4), read on a machine (cell 5).
CELLS = [
    "class Link:\n    def __init__(self, after):\n        self.after = after\n",
    "chain = None\nfor _ in range(1500):\n    chain = Link(chain)\n"
    "nested = []\nfor _ in range(1000):\n    nested = [nested]",
    "def depth(x, down):\n    n = 0\n    while x:\n        x, n = down(x), n + 1\n    return n\n"
    "print(depth(chain, lambda x: x.after), depth(nested, lambda x: x[0]))",
    "print(depth(chain, lambda x: x.after))",
    "made_here = []\nfor _ in range(1000):\n    made_here = [made_here]",
    "print(depth(made_here, lambda x: x[0]))",
]


@pytest.mark.timeout(900)
def test_a_value_deeper_than_the_recursion_limit_travels_both_ways(burst_env, tmp_path):
    plain = assert_identical(CELLS, {1, 3, 5}, tmp_path)
    assert plain[2]["stdout"] == "1500 1000\n", plain[2]
