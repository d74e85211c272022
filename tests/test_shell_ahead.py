"""The shell a session's warm parent makes ahead: what a first cell sets up is done there, once, for every fork."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_warm_parents_shell_runs_nothing_as_a_cell_is_run_transformed_and_out_of_the_history():
    """The parent's silent run is transformed as a cell is (so the tokenizer's patterns are compiled in the parent,
    not in each cell's process): a magic in it runs, and it leaves no history and no ``Out``."""
    script = textwrap.dedent(
        """
        from nbburst.agent.attempt import shell
        ns = {}
        shell.make_ahead(ns)
        ahead = shell.ZMQInteractiveShell.instance()
        ahead.execute_silently("here = %pwd")
        import os
        assert ns["here"] == os.getcwd(), ns.get("here")
        assert ahead.execution_count == 1 and not ns["Out"] and ns["In"] == [""], (ns["In"], ns["Out"])
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
