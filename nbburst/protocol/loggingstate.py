"""The logging configuration, as process state: what ``basicConfig``, ``setLevel`` and ``disable`` leave behind.

``logging.basicConfig(level=logging.INFO)`` in a notebook's first cell makes every later cell's
``logger.info(...)`` print; a cell on another machine, whose process has logging's defaults, printed nothing
of it (and a ``basicConfig`` there did nothing for the kernel's next cells). So the root logger's level and its
handlers that write to the cell's output, and the levels set on named loggers, travel as any process state does
(:mod:`.processstate`). A handler is described, not pickled: a stream handler writes to *this* process's
``sys.stdout`` or ``sys.stderr`` (the kernel's or the machine's), made again on the other side with its level
and its formatter. Handlers to anything else (a file, a socket) stay where they are.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


def _stream_name(handler: logging.Handler) -> str:
    """ "stdout" or "stderr" for a plain stream handler to this process's current output; "" for any other."""
    if type(handler) is not logging.StreamHandler:
        return ""
    stream = handler.stream
    return "stdout" if stream is sys.stdout else "stderr" if stream is sys.stderr else ""


def _describe(handler: logging.Handler, stream: str) -> dict[str, Any]:
    """A handler as it travels: its stream's name, its level, and its formatter when it is logging's own (which
    pickles as its format, date format and style)."""
    formatter = handler.formatter if type(handler.formatter) is logging.Formatter else None
    return {"stream": stream, "level": handler.level, "formatter": formatter}


def current() -> dict[str, Any]:
    """The root logger's level and output handlers, and the named loggers' levels that were set."""
    root = logging.getLogger()
    handlers = [_describe(h, name) for h in root.handlers if (name := _stream_name(h))]
    levels = {
        name: logger.level
        for name, logger in sorted(logging.Logger.manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET
    }
    return {"level": root.level, "handlers": handlers, "levels": levels, "disable": logging.root.manager.disable}


def apply(state: dict[str, Any]) -> None:
    """Make this process's logging configuration ``state``: the root's output handlers are replaced by ones
    like the other side's, writing to this process's output; its other handlers are left alone."""
    root = logging.getLogger()
    root.setLevel(state["level"])
    for handler in [h for h in root.handlers if _stream_name(h)]:
        root.removeHandler(handler)
    for shown in state["handlers"]:
        handler = logging.StreamHandler(sys.stdout if shown["stream"] == "stdout" else sys.stderr)
        handler.setLevel(shown["level"])
        handler.setFormatter(shown["formatter"])
        root.addHandler(handler)
    for name, level in state["levels"].items():
        logging.getLogger(name).setLevel(level)
    logging.disable(state["disable"])
