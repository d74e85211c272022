"""Reference pages made from the code at build time, so they cannot drift from it: ``nbburst --help`` of every
command (from the CLI's own argparse parser) and the configuration traits (from the ``NBBurst`` class)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from traitlets import Undefined


def commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser and every sub-command's parser, depth first, each with the command line that shows it."""
    found = [(prefix, parser)]
    for action in parser._actions:  # argparse keeps sub-commands only there
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, f"{prefix} {name}")
    return found


class CliHelp(Directive):
    """``nbburst-help``: a section per command with what ``nbburst ... --help`` prints."""

    def run(self) -> list[nodes.Node]:
        from nbburst.ui.cli import parser

        out: list[nodes.Node] = []
        for line, sub in commands(parser(), "nbburst"):
            section = nodes.section(ids=[nodes.make_id(line)])
            title = f"{line} --help"
            section += nodes.title(title, "", nodes.literal(title, title))
            text = sub.format_help()
            section += nodes.literal_block(text, text, language="text")
            out.append(section)
        return out


def default(trait: Any) -> str:
    """A trait's default as it would be written in a config file."""
    value = trait.default()
    return "" if value is Undefined else repr(value)


class ConfigTraits(Directive):
    """``nbburst-config``: a table of ``c.NBBurst.<name>``, its type, its default and its help."""

    def run(self) -> list[nodes.Node]:
        from nbburst.config import NBBurst

        table = nodes.table()
        group = nodes.tgroup(cols=4)
        table += group
        for width in (3, 1, 2, 6):
            group += nodes.colspec(colwidth=width)
        head, body = nodes.thead(), nodes.tbody()
        group += head
        group += body
        for cells, section in ((("Setting", "Type", "Default", "What it does"), head),):
            section += self.row(cells)
        for name, trait in sorted(NBBurst.class_traits(config=True).items()):
            body += self.row((f"c.NBBurst.{name}", type(trait).__name__, default(trait), trait.help))
        return [table]

    @staticmethod
    def row(cells: tuple[str, ...]) -> nodes.row:
        row = nodes.row()
        for i, text in enumerate(cells):
            entry = nodes.entry()
            entry += nodes.paragraph("", "", nodes.literal(text, text) if i in (0, 2) and text else nodes.Text(text))
            row += entry
        return row


class RepositoryFiles(SphinxTransform):
    """A page's link to a Markdown file of the repository outside docs/ (the README, tests/thirdparty/README.md)
    becomes a link to download that file: the pages keep the links that work on GitHub, and the site checks
    that the file exists rather than warning that it is not one of its pages."""

    default_priority = 900

    def apply(self, **kwargs: Any) -> None:
        srcdir = Path(self.env.srcdir)
        here = Path(self.env.doc2path(self.env.docname)).parent
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain") != "doc":
                continue
            target = (srcdir / f"{node['reftarget']}.md").resolve()
            if srcdir in target.parents or not target.is_file():
                continue
            relative = os.path.relpath(target, here)
            link = addnodes.download_reference(reftarget=relative, refexplicit=True)
            rel_filename, _ = self.env.relfn2path(relative, self.env.docname)
            link["filename"] = self.env.dlfiles.add_file(self.env.docname, rel_filename).as_posix()
            link += node.children
            node.replace_self(link)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("nbburst-help", CliHelp)
    app.add_directive("nbburst-config", ConfigTraits)
    app.add_transform(RepositoryFiles)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
