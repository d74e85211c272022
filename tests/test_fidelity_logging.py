"""The logging configuration a cell leaves is in force in the next, under ``%%burst`` as plainly: a notebook's
``logging.basicConfig(level=logging.INFO)`` in one cell and ``logger.info(...)`` in the next (docs/fidelity.md,
cause 17). Each cell runs plainly in one kernel and under %%burst in another (a new machine per cell, or a warm
session), then cells that log run plainly in both kernels."""

from __future__ import annotations

import pytest
from support.apart import same_apart

#: Each test on a new machine per cell, and on one warm session.
pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.parametrize("session", [False, True], ids=["own-machine", "session"]),
]

CELLS = [
    "import logging\nlogging.basicConfig(level=logging.INFO, format='%(levelname)s|%(name)s|%(message)s')",
    "logging.getLogger('train').info('epoch 1')",
    "logging.getLogger('quiet').setLevel(logging.ERROR)",
    "logging.getLogger('quiet').warning('not shown')\nlogging.getLogger('quiet').error('shown')",
    "logging.basicConfig(level=logging.WARNING, format='{levelname}: {message}', style='{', force=True)",
    "logging.getLogger('train').info('hidden now')\nlogging.warning('warned')",
    "logging.disable(logging.WARNING)",
    "logging.warning('disabled')\nlogging.error('still shown')",
]


def test_the_logging_a_cell_configures_is_in_force_in_the_next_wherever_each_ran(burst_env, tmp_path, session):
    then = ("logging.error('in the kernel')\nlogging.getLogger('quiet').warning('not shown')",)
    pairs = same_apart(CELLS, tmp_path, then, session)
    assert pairs[1][0]["outputs"] == [("stream", "stderr", "INFO|train|epoch 1\n")]
    assert pairs[3][0]["outputs"] == [("stream", "stderr", "ERROR|quiet|shown\n")]
    assert pairs[5][0]["outputs"] == [("stream", "stderr", "WARNING: warned\n")]
    assert pairs[7][0]["outputs"] == [("stream", "stderr", "ERROR: still shown\n")]
    assert pairs[8][1]["outputs"] == [("stream", "stderr", "ERROR: in the kernel\n")]
