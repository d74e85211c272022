"""A matplotlib backend for the machine: figures become PNG display outputs.

It plays the part of the notebook's inline backend: ``plt.show()`` and the end
of the cell send every open figure back to the notebook.
"""

from __future__ import annotations

from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

from . import channel

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def show(*args, **kwargs) -> None:
    flush_figures()


def flush_figures() -> None:
    for manager in Gcf.get_all_fig_managers():
        if channel.current is not None:
            channel.current.display(channel.figure_png(manager.canvas.figure))
    Gcf.destroy_all()
