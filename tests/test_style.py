"""One style, checked by the test command: ruff (lint and format) for Python, prettier (layout) and eslint
(rules, labextension/eslint.config.mjs) for the JupyterLab extension. Nobody argues about style; a run that
would change a file, or that finds a problem, fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXTENSION = REPO / "labextension"
PRETTIER = EXTENSION / "node_modules" / ".bin" / "prettier"
ESLINT = EXTENSION / "node_modules" / ".bin" / "eslint"


def run(*cmd: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ruff_lint_is_clean():
    proc = run(sys.executable, "-m", "ruff", "check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_changes_nothing():
    proc = run(sys.executable, "-m", "ruff", "format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_prettier_changes_nothing_in_the_extension():
    # Installed with the extension's dev dependencies (`npm install`, which the package build runs).
    assert PRETTIER.exists(), "prettier is missing: run `npm install` in labextension/"
    proc = run(PRETTIER, "--check", ".", cwd=EXTENSION)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_eslint_finds_nothing_in_the_extension():
    assert ESLINT.exists(), "eslint is missing: run `npm install` in labextension/"
    proc = run(ESLINT, "--max-warnings", "0", ".", cwd=EXTENSION)
    assert proc.returncode == 0, proc.stdout + proc.stderr
