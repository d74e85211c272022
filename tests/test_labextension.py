"""The JupyterLab extension's unit tests (labextension/test/: node's own test runner on the compiled pure
modules: the formatting helpers, the log follower, the polling rule), run by the suite so that CI, which runs
pytest only, runs them too. The panel as a whole is tested in a real browser (test_lab_browser.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

EXTENSION = Path(__file__).resolve().parent.parent / "labextension"


def test_the_extension_unit_tests_pass():
    # Installed with the extension's dev dependencies (`npm install`, which the package build runs).
    assert (EXTENSION / "node_modules" / ".bin" / "tsc").exists(), "run `npm install` in labextension/"
    npm = shutil.which("npm")
    assert npm, "npm is missing: the extension's unit tests run on node (20 or later)"
    proc = subprocess.run([npm, "test"], cwd=EXTENSION, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr
    assert "# fail 0" in proc.stdout and "# pass 0\n" not in proc.stdout, proc.stdout[-3000:]
