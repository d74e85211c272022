"""How nbburst's notebook HTML looks (the job view, the job and config tables), in one place.

Every colour is a JupyterLab theme variable, so the view reads as well in the
dark and high-contrast themes as in the light one; the fallback after each
variable serves frontends without them. The job view's stylesheet is scoped
under one root class (:data:`ROOT`), and the JupyterLab sidebar's under its
own, so neither can restyle the other. The tables stand alone in a cell's
output, with no stylesheet, so they take inline styles from here.
"""

from __future__ import annotations

import html

#: The root class of the job view; every class of the view starts with it and every rule of its
#: stylesheet is scoped under it.
ROOT = "nbburst-view"


def part(name: str) -> str:
    """The class of one part of the view: ``part("tail")`` -> ``nbburst-view-tail``."""
    return f"{ROOT}-{name}"


def _theme(variable: str, fallback: str) -> str:
    return f"var(--jp-{variable}, {fallback})"


TEXT = _theme("content-font-color1", "inherit")
MUTED = _theme("content-font-color2", "#6b7280")
BORDER = _theme("border-color2", "#d1d5db")
CODE_BACKGROUND = _theme("layout-color2", "transparent")
CODE_FONT = _theme("code-font-family", "monospace")
_WARN = _theme("warn-color1", "#b45309")
#: The background of the cell's stderr, as JupyterLab shows stderr outputs.
STDERR_BACKGROUND = _theme("rendermime-error-background", "transparent")

#: The colour of each job state (the view, the job table).
STATE_COLORS = {
    "SUBMITTED": MUTED,
    "PROVISIONING": _WARN,
    "RUNNING": _theme("brand-color1", "#1d4ed8"),
    "PREEMPTED": _WARN,
    "SUCCEEDED": _theme("success-color1", "#15803d"),
    "FAILED": _theme("error-color1", "#b91c1c"),
    "CANCELLED": MUTED,
}
#: The same, for a terminal (rich markup styles: ``nbburst jobs``, text reprs).
RICH_STYLES = {
    "SUBMITTED": "dim",
    "PROVISIONING": "yellow",
    "RUNNING": "bold blue",
    "PREEMPTED": "yellow",
    "SUCCEEDED": "green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
}

# -- the job view ---------------------------------------------------------------------------------

#: Classes the view's HTML uses inside its widgets.
LINE = part("line")  # a line of text with normal spacing (widget HTML is laid out as a 28 px row)
NOTE = part("muted")  # secondary text: messages, hints


def state_class(state: str) -> str:
    """The class that colours a state's name in the view: ``nbburst-view-running``."""
    return part(state.lower())


def state_html(state: str, symbol: str = "") -> str:
    """A state's name, bold in its colour, optionally after a symbol (✔, ✖, ■)."""
    mark = f"{symbol} " if symbol else ""
    return f"{mark}<b class='{state_class(state)}'>{html.escape(state)}</b>"


def state_inline_html(state: str, symbol: str = "") -> str:
    """A state's name as :func:`state_html`, coloured inline (for HTML shown without the view's stylesheet)."""
    mark = f"{symbol} " if symbol else ""
    return f"{mark}<b style='color:{state_color(state)}'>{html.escape(state)}</b>"


def note_html(text: str) -> str:
    """Secondary text (escaped)."""
    return f"<span class='{NOTE}'>{html.escape(text)}</span>"


def _rules() -> list[tuple[str, str]]:
    root = f".{ROOT}"
    code = f"font-family:{CODE_FONT};font-size:85%;color:{TEXT}"
    rules = [
        (root, f"border:1px solid {BORDER};padding:4px 8px;color:{TEXT}"),
        (f"{root} .{LINE}", "line-height:1.4"),
        (f"{root} .{NOTE}", f"color:{MUTED}"),
        (
            f"{root} .{part('tail')} pre",
            f"{code};margin:2px 0;padding:2px 4px;max-height:16em;overflow:auto;line-height:1.25;"
            f"background:{CODE_BACKGROUND}",
        ),
        (f"{root} .{part('console')} pre", f"{code};margin:0"),
        (f"{root} .{part('stderr')}", f"background:{STDERR_BACKGROUND}"),
        (f"{root} .{part('event')}", f"color:{MUTED}"),
        (f"{root} .{part('phase')}", f"color:{MUTED};font-style:italic"),
        (f"{root} a.{part('open')}", f"color:{MUTED};cursor:pointer;text-decoration:underline"),
    ]
    rules += [(f"{root} .{state_class(state)}", f"color:{color}") for state, color in STATE_COLORS.items()]
    return rules


#: The view's stylesheet: every selector starts with the root class.
VIEW_CSS = "\n".join(f"{selector} {{{body}}}" for selector, body in _rules())


def stylesheet() -> str:
    """The view's stylesheet as HTML, for a (hidden) HTML widget inside the view."""
    return f"<style>\n{VIEW_CSS}\n</style>"


# -- the static summary (inline: it must read the same with no stylesheet, after the widget is gone) ---------

#: The class of the static summary shown in the view's place once its widget model is gone (a restarted
#: kernel, a saved notebook): the lab extension's notebook stylesheet shows one or the other.
STATIC = part("static")
STATIC_BOX = f"border:1px solid {BORDER};padding:4px 8px;color:{TEXT};line-height:1.4"
STATIC_PRE = (
    f"font-family:{CODE_FONT};font-size:85%;color:{TEXT};background:{CODE_BACKGROUND};margin:2px 0;"
    "padding:2px 4px;max-height:16em;overflow:auto;line-height:1.25"
)
STATIC_MUTED = f"color:{MUTED}"
STATIC_STDERR = f"background:{STDERR_BACKGROUND}"


# -- the tables (inline: a table stands alone in a cell's output) -----------------------------------

#: Class names of the tables, distinct from every class of the view and of the JupyterLab sidebar.
JOBS_TABLE = "nbburst-jobs-table"
CONFIG_TABLE = "nbburst-config-table"
#: A table cell aligned left (JupyterLab aligns table cells right by default).
CELL = "text-align:left"


def colored_cell(color: str) -> str:
    """The inline style of a left-aligned table cell in ``color``."""
    return f"{CELL};color:{color}"


def state_color(state: str) -> str:
    """A state's colour (CSS value) for inline styles."""
    return STATE_COLORS.get(state, "inherit")
