"""How the shell shows a matplotlib Figure, as process state: the kernel's choice holds on the machine.

A Figure is shown as an image only once the inline backend has told the shell's display
formatter how to draw it, which its module does when it is imported with a shell running
(``configure_inline_support``). In the kernel that happened when an earlier cell imported
pyplot; a machine that only unpickles a Figure (``ax.legend(); fig``) never imports the
backend, and would show the Figure's text alone. And ``%config InlineBackend.figure_formats``
(svg, retina) and ``print_figure_kwargs`` are the kernel's settings, which the machine's shell
would not know. So the kernel's settings travel with the cell as any process state does
(:mod:`.state`), and the shell where they land draws Figures as the other one did; a cell that
changes them changes them in the kernel too.
"""

from __future__ import annotations

from typing import Any


def _shell() -> Any:
    from IPython.core.getipython import get_ipython

    return get_ipython()


def current() -> dict[str, Any] | None:
    """The shell's settings of the inline backend, and whether it shows Figures as images already;
    None where no shell runs or matplotlib_inline is not installed."""
    shell = _shell()
    if shell is None:
        return None
    try:
        from matplotlib_inline.config import InlineBackend
    except ImportError:
        return None
    from matplotlib.figure import Figure

    # Not made yet: the shell's config (what `%config` set before pyplot's import) is what it will start from.
    settings = InlineBackend.instance() if InlineBackend.initialized() else InlineBackend(parent=shell)
    return {
        "formats": sorted(settings.figure_formats),
        "kwargs": dict(settings.print_figure_kwargs),
        "close": bool(settings.close_figures),
        "shown": any(Figure in f.type_printers for f in shell.display_formatter.formatters.values()),
    }


def apply(value: dict[str, Any] | None) -> None:
    """Take the other side's settings; if its shell showed Figures as images, so does this one from now on."""
    shell = _shell()
    if shell is None or value is None:
        return
    from IPython.core.pylabtools import select_figure_formats
    from matplotlib_inline.config import InlineBackend

    settings = InlineBackend.instance(parent=shell)
    settings.close_figures = value["close"]
    settings.print_figure_kwargs = value["kwargs"]
    settings.figure_formats = set(value["formats"])
    if value["shown"]:
        # As configure_inline_support does: a later `%config InlineBackend...` applies at once.
        settings.shell = shell
        if settings not in shell.configurables:
            shell.configurables.append(settings)
        select_figure_formats(shell, settings.figure_formats, **settings.print_figure_kwargs)
