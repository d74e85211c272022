"""Docstrings say why, never how fast: a figure measured on one machine on one day goes stale in the code,
so measured figures live in docs/ with their date and machine (docs/performance.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nbburst"
#: A measured figure: a quantity with its unit set against another, or said to be measured somewhere.
MEASURED = re.compile(
    r"\d+(?:\.\d+)?\s?(?:ms|µs|s|MB|MiB|GB|GiB|kB|%)\s+(?:against|vs\.?|here|on this machine|measured)\b"
    r"|(?:took|measured at|costs? about)\s+\d+(?:\.\d+)?\s?(?:ms|µs|s|MB|MiB|GB|GiB|kB|%)\b",
    re.IGNORECASE,
)


def docstrings(path: Path):
    tree = ast.parse(path.read_text())
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc


def test_no_docstring_carries_a_measured_figure():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {match.group(0)!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, doc in docstrings(path)
        for match in MEASURED.finditer(doc)
    ]
    assert not found, "measured figures belong in docs/performance.md, dated:\n" + "\n".join(found)
