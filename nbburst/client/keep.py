"""``--keep 10m``: a plain cell's machine stays warm for later cells of the same shape.

A kept machine is a warm session (client/session/) that no one started by hand: the first ``--keep`` cell
starts it, named after the cell's shape (backend, the machine asked for, the kernel's environment), and
runs on it; a later cell of the same shape runs on it too, whether or not it says ``--keep``. It never
becomes the default session, so a cell of another shape still gets a machine of its own. The machine ends
itself as any session's does: its warm parent after the idle time without a cell (each cell renews it),
and on Compute Engine the VM's own ``maxRunDuration`` with ``instanceTerminationAction=DELETE`` if
nothing else ends it, so a kernel that died leaves no machine behind.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from ..options import Options
from ..protocol.env import manifest_json
from .session.manager import Session, SessionGone, Sessions

if TYPE_CHECKING:
    from .burst import Burst

#: The names of kept machines' sessions begin with this (``nbburst sessions`` shows them as kept).
PREFIX = "kept-"
#: A kept machine's hard limit is at least this long past its start (plus its idle time): a later cell with
#: the default time limit still fits on it for a while.
LIMIT_S = 24 * 3600.0


def is_kept(name: str) -> bool:
    """Whether the session ``name`` is a machine kept by ``--keep``."""
    return name.startswith(PREFIX)


def shape_name(options: Options) -> str:
    """The session name of the kept machine a cell with ``options`` may run on: the same for every cell of
    the same backend, machine (cores, memory, GPU, type, image, zone, spot) and environment."""
    shape = asdict(replace(options.resources, workers=None))
    key = json.dumps({"backend": options.backend, "resources": shape}, sort_keys=True).encode() + manifest_json()
    return PREFIX + hashlib.sha256(key).hexdigest()[:12]


def session_for(burst: Burst, options: Options) -> Session | None:
    """The warm machine a cell runs on, up, with ``options`` fitted to it; None: a machine of its own.

    ``--session`` (or the default session) comes first, except for a cell that asks ``--keep``: that one runs
    on the kept machine of its shape, started for it if there is none. A cell without ``--keep`` runs on a
    kept machine of its shape when one is up and its time limit fits in the machine's."""
    if options.keep_s is None:
        session = burst.sessions.for_cell(options)
        if session is not None:
            return session
    return _kept(burst.sessions, options)


def _kept(sessions: Sessions, options: Options) -> Session | None:
    name = shape_name(options)
    try:
        session: Session | None = sessions.get(name)
    except SessionGone:
        session = None
    if session is not None and not _takes(sessions, session, options):
        if _busy(session):
            return None  # a cell still runs on it (detached): this one gets a machine of its own
        sessions.stop(name)  # ended for idleness, or too near its limit for this cell
        session = None
    if session is None:
        if options.keep_s is None:
            return None
        previous = sessions.default
        try:
            session = sessions.start(
                name,
                options.resources.cores,
                idle=options.keep_s,
                timeout=max(options.timeout_s, LIMIT_S) + options.keep_s,
                backend=options.backend,
                resources=options.resources,
            )
        finally:
            sessions.default = previous  # a kept machine takes only the cells of its shape
    options.resources = replace(options.resources, cores=session.record.cores)
    options.keep_s = session.record.idle_s  # the job says its machine is kept, and how long it idles
    return session


def _takes(sessions: Sessions, session: Session, options: Options) -> bool:
    """Whether the kept machine is up and the cell's time limit fits in what is left of the machine's."""
    if session.record.until - time.time() < options.timeout_s:
        return False
    try:
        return sessions.transport(session.record.backend).up(session)
    except OSError:
        return False


def _busy(session: Session) -> bool:
    try:
        return bool(session.alive() and session.ask({}).get("running"))
    except (OSError, ValueError):
        return False
