"""The README and docs/ hold together: the README's test command is what CI runs, every page of docs/ is listed
in its index, and every link between the pages (and to the repository's files) reaches something, anchors
included. A page renamed or moved, or a section retitled, fails here rather than in a reader's browser."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
NOTEBOOKS = REPO / "notebooks"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def links(page: Path) -> list[str]:
    """The targets of a page's Markdown links, outside code blocks."""
    return LINK.findall(FENCE.sub("", page.read_text()))


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, made as GitHub and MyST make them (lower case, punctuation dropped,
    spaces to hyphens)."""
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    assert "```bash\nscripts/test\n```" in readme and "```bash\nscripts/quickstart\n```" in readme
    ci = (REPO / ".ci" / "run").read_text()
    assert "exec scripts/test" in ci
    assert "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in ci, "the system's PATH only"


def test_the_index_lists_every_page():
    listed = {target.split("#")[0] for target in links(DOCS / "index.md")}
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= listed, f"docs/index.md does not list {sorted(pages - listed)}"


def test_every_link_between_the_pages_and_to_the_repository_reaches_something():
    broken = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"^[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_site_builds_without_a_warning(tmp_path):
    """Sphinx with warnings as errors: a link to a page or a heading that is not there, a docstring autodoc
    cannot read or a page left out of the table of contents fails here."""
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stderr
    reference = (tmp_path / "reference.html").read_text()
    assert ">c.NBBurst.backend<" in reference, "the configuration table"
    assert 'id="nbburst-image-build"' in reference, "the --help of every command, sub-commands included"
    assert 'id="nbburst.checkpoint.save"' in reference and 'id="nbburst.client.job.Job.wait"' in reference
    examples = {p.stem for p in (tmp_path / "examples").glob("*.html")}
    assert examples == {p.stem for p in NOTEBOOKS.glob("*.ipynb")}, "every example notebook has its page"


def test_every_example_notebook_is_in_the_site():
    linked = {p.name for p in (DOCS / "examples").iterdir() if p.resolve().parent == NOTEBOOKS}
    assert linked == {p.name for p in NOTEBOOKS.glob("*.ipynb")}, "docs/examples/ links each of notebooks/"
