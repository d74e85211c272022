"""What the warm parent does once, after it imported the notebook's modules, so that no cell's process must.

A process's first matplotlib figure costs several times its next ones (docs/performance.md): drawing
it loads the fonts, encoding it imports the image writers. Every cell's process is a fork of the warm
parent: unless the parent drew a figure, each plotting cell pays the first figure's price, where a kernel
pays it once.
"""

from __future__ import annotations

import functools
import sys


def after_imports() -> None:
    """Warm what the modules imported so far leave cold; each thing once (cheap once done)."""
    if "matplotlib.pyplot" in sys.modules:
        _draw_a_figure()


@functools.cache
def _draw_a_figure() -> None:
    """Draw a figure as a cell's first one is drawn: pyplot loads its backend (``%matplotlib inline``'s, whose
    hooks go into the parent's shell, the one each cell's process takes over), and the figure is encoded as
    the inline backend encodes it. Closed, it leaves the figure numbers as they were: a cell's first is 1."""
    try:
        import matplotlib.pyplot as plt
        from IPython.core.pylabtools import print_figure

        fig, ax = plt.subplots()
        try:
            ax.plot([0, 1], [0, 1], "o-", label="a line")
            ax.set(title="a title", xlabel="x", ylabel="y")
            ax.legend(loc="best")
            print_figure(fig, "png", bbox_inches="tight")
        finally:
            plt.close(fig)
    except Exception:  # only a warm-up: a cell's own figure meets the same problem and shows it
        pass
