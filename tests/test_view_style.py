"""The job view and the tables follow the JupyterLab theme, and the view and the sidebar cannot restyle each other.

The view's colours must all be theme variables (a hard-coded light background
made the log unreadable in the dark theme), every rule of its stylesheet must
be scoped under its root class, and the sidebar's stylesheet must be scoped
under the sidebar's (its global rules once turned the view's progress bar into
a 60 px stub). Checked on the real HTML a view renders and on the real CSS.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.view import FakeJob

REPO = Path(__file__).resolve().parents[1]
SIDEBAR_CSS = REPO / "labextension" / "style" / "base.css"
# The sidebar's sources; notebook.ts is not one: it bridges clicks on the view's buttons, so it names their classes.
SIDEBAR_SOURCES = sorted(p for p in (REPO / "labextension" / "src").glob("*.ts") if p.name != "notebook.ts")

COLOUR_PROPERTIES = re.compile(r"^(color|background(-color)?|border(-\w+)?|outline(-color)?|fill|stroke|box-shadow)$")
# What may remain of a colour declaration once its theme variables are taken out: widths, styles, keywords.
NOT_A_COLOUR = re.compile(r"^(inherit|transparent|currentcolor|none|solid|dashed|dotted|0|\d+(\.\d+)?(px|em|rem|%))$")


def css_rules(css: str) -> list[tuple[str, str]]:
    """``(selector, declarations)`` of every style rule, inside @media too; @keyframes steps are not rules."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules, stack, prelude, start = [], [], "", 0
    for n, char in enumerate(css):
        if char == "{":
            stack.append(prelude.strip())
            prelude, start = "", n + 1
        elif char == "}":
            selector = stack.pop()
            body = css[start:n]
            if not selector.startswith("@") and "{" not in body and not any(p.startswith("@keyframes") for p in stack):
                rules.append((selector, body))
            prelude, start = "", n + 1
        elif char == ";":  # the end of a declaration or of an @import: not part of the next selector
            prelude = ""
        else:
            prelude += char
    return rules


def declarations(body: str) -> list[tuple[str, str]]:
    pairs = (d.split(":", 1) for d in body.split(";") if ":" in d)
    return [(name.strip().lower(), value.strip()) for name, value in pairs]


def without_theme_variables(value: str) -> str:
    """``value`` with each ``var(--jp-..., fallback)`` removed (fallbacks are where literals belong)."""
    while True:
        stripped = re.sub(r"var\(--jp-[\w-]+(,[^()]*(\([^()]*\))?[^()]*)?\)", " ", value)
        if stripped == value:
            return value
        value = stripped


def assert_theme_colours(where: str, body: str) -> int:
    """Every colour in ``body`` is a theme variable; returns how many colour declarations it has."""
    count = 0
    for name, value in declarations(body):
        if not COLOUR_PROPERTIES.match(name):
            continue
        count += 1
        if value.lower() in ("inherit", "transparent", "currentcolor", "none"):
            continue
        assert "var(--jp-" in value, f"{where}: {name}: {value} is not a JupyterLab theme variable"
        left = without_theme_variables(value).split()
        assert all(NOT_A_COLOUR.match(token.lower()) for token in left), f"{where}: {name}: {value} hard-codes {left}"
    return count


def rendered_view() -> tuple[object, list[str], set[str]]:
    """A view that went through every state it renders: its HTML values and its widgets' classes."""
    from nbburst.ui.view import JobView

    job = FakeJob(message="waiting for a spot machine")
    view = JobView(job)
    view.feed({"s": "stdout", "x": "epoch 1\n"})
    view.feed({"s": "event", "x": "--- attempt 2 ---\n"})
    view.refresh()
    html_values = [view.header.value, view.status.value, view.tail_html.value]
    job.data.update(state="FAILED", ended=job.data["created"] + 30, message="the cell raised ValueError")
    view.finish()
    html_values += [view.summary.value, view.note.value, view.stylesheet.value]

    classes: set[str] = set()
    todo = [view.widget]
    while todo:
        widget = todo.pop()
        classes.update(widget._dom_classes)
        todo.extend(getattr(widget, "children", ()))
        if hasattr(widget, "layout"):  # ipywidgets layouts take CSS too: borders must be themed as well
            layout_css = ";".join(f"{k.replace('_', '-')}:{v}" for k, v in widget.layout.get_state().items() if v)
            assert_theme_colours(f"layout of {widget._dom_classes}", layout_css)
    for value in html_values:
        classes.update(c for attr in re.findall(r"class='([^']*)'", value) for c in attr.split())
    return view, html_values, classes


def test_the_view_takes_every_colour_from_the_theme():
    from nbburst.ui import style

    view, html_values, _ = rendered_view()
    for value in html_values:
        assert "style=" not in value.replace("<style>", ""), f"inline style in the view: {value}"
    rules = css_rules(style.VIEW_CSS)
    assert len(rules) >= 5
    colours = sum(assert_theme_colours(selector, body) for selector, body in rules)
    assert colours >= len(style.STATE_COLORS) + 3  # state names, muted text, border, log background
    tail_rule = next(body for selector, body in rules if selector.endswith("-tail pre"))
    assert "background:var(--jp-layout-color" in tail_rule.replace(" ", "")  # the log tail follows dark themes
    assert "FAILED" in view.summary.value and style.state_class("FAILED") in view.summary.value


def test_the_tables_take_every_colour_from_the_theme():
    import time

    from nbburst.ui.tables import ConfigTable, JobsTable

    infos = [FakeJob(state=s).info() | {"created": time.time()} for s in ("RUNNING", "FAILED", "SUCCEEDED")]
    tables = [
        JobsTable(infos)._repr_html_(),
        ConfigTable(
            {"zone": {"value": "auto", "source": "default"}, "bucket": {"value": "b", "source": "env"}}
        )._repr_html_(),
    ]
    colours = 0
    for table in tables:
        for body in re.findall(r"style='([^']*)'", table):
            colours += assert_theme_colours("table", body)
    assert colours >= 4  # three states and a default setting


def test_no_colour_literal_outside_the_style_module():
    import nbburst.ui.tables
    import nbburst.ui.view
    import nbburst.ui.viewmodel

    for module in (nbburst.ui.view, nbburst.ui.viewmodel, nbburst.ui.tables):
        source = Path(module.__file__).read_text()
        found = re.findall(r"#[0-9a-fA-F]{3,8}\b|\brgba?\(|\bhsla?\(", source)
        assert not found, f"{module.__name__} hard-codes colours {found}: they belong in nbburst.ui.style"


def test_every_view_rule_and_class_is_under_the_root_class():
    from nbburst.ui import style

    _, _, classes = rendered_view()
    assert style.ROOT in classes and len(classes) > 10
    assert all(c == style.ROOT or c.startswith(style.ROOT + "-") for c in classes), sorted(classes)
    for selector, _ in css_rules(style.VIEW_CSS):
        for one in selector.split(","):
            one = one.strip()
            assert one == f".{style.ROOT}" or one.startswith(f".{style.ROOT} "), f"unscoped view rule: {one}"


def test_the_sidebar_css_is_scoped_and_shares_no_class_with_the_view():
    from nbburst.ui import style

    rules = css_rules(SIDEBAR_CSS.read_text())
    assert len(rules) > 40
    roots = (".nbburst-sidebar", ".nbburst-statusbar")  # the panel, and its status bar item
    for selector, _ in rules:
        for one in selector.split(","):
            one = one.strip()
            assert re.match(r"^(\.nbburst-sidebar|\.nbburst-statusbar)([ .:\[]|$)", one), f"unscoped rule: {one}"
    assert any(s.startswith(roots[0] + " ") for s, _ in rules)

    sidebar_classes = {c for s, _ in rules for c in re.findall(r"\.(nbburst-[\w-]+)", s)}
    for source in SIDEBAR_SOURCES:
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", source.read_text(), flags=re.S)
        sidebar_classes.update(re.findall(r"nbburst-[\w-]+", code))
    _, _, view_classes = rendered_view()
    view_classes.update(c for s, _ in css_rules(style.VIEW_CSS) for c in re.findall(r"\.(nbburst-[\w-]+)", s))
    view_classes.update({style.JOBS_TABLE, style.CONFIG_TABLE})
    assert "nbburst-progress" in sidebar_classes and "nbburst-view-progress" in view_classes
    # A sidebar class ending in "-" is a prefix the TypeScript completes (`nbburst-state-${state}`).
    shared = {c for c in view_classes if any(c == s or (s.endswith("-") and c.startswith(s)) for s in sidebar_classes)}
    assert not shared, f"classes of both the view and the sidebar: {sorted(shared)}"


def test_the_static_summary_takes_every_colour_from_the_theme():
    """The summary shown once the widget is gone has no stylesheet: its inline styles follow the theme too."""
    from nbburst.ui.view import JobView

    job = FakeJob()
    view = JobView(job)
    view.feed({"s": "stdout", "x": "epoch 1\n"})
    view.feed({"s": "stderr", "x": "a warning\n"})
    view.refresh()
    running = view.static_html()
    job.data.update(state="FAILED", ended=job.data["created"] + 30, message="the cell raised ValueError")
    view.finish()
    for static in (running, view.static_html()):
        bodies = re.findall(r"style='([^']*)'", static)
        assert sum(assert_theme_colours("static summary", body) for body in bodies) >= 4


def test_the_notebook_css_only_swaps_the_view_and_its_static_summary():
    rules = css_rules((REPO / "labextension" / "style" / "notebook.css").read_text())
    assert len(rules) == 2
    for selector, body in rules:
        assert selector.startswith(".jp-OutputArea-child") and "nbburst-view-static" in selector
        assert declarations(body) == [("display", "none")]
