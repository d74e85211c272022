"""How a session's requests reach its warm parent: the one interface of the socket and the mailbox transports.

The manager (:mod:`.manager`) starts, revives and ends sessions the same way on every backend; only the way
between the notebook and the session's machine differs, chosen by the backend's
:attr:`~nbburst.machines.base.Machines.session_transport`: a Unix socket to a machine on this computer
(:mod:`.socket`), or sealed objects in the Store that a relay on the machine carries (:mod:`.mailbox`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...protocol.job import JobLayout
    from ...store import Store
    from ..burst import Burst
    from ..job import Job
    from .manager import Session, SessionRecord


class Transport(abc.ABC):
    """The way between the notebook and the warm parent of one backend's sessions."""

    def __init__(self, burst: Burst):
        self.burst = burst

    @abc.abstractmethod
    def boot(self, record: SessionRecord, save: Callable[[SessionRecord], None]) -> None:
        """Start the record's machine (``save`` records it once its places are known) and return once it takes
        cells; UsageError when it does not."""

    def warm(self, session: Session) -> None:
        """Wait, within reason, until a just-started session has warmed up (imported what it preloads), so that
        its first cell pays nothing. The default: :meth:`boot` has waited for that already."""
        return None

    @abc.abstractmethod
    def ask(self, session: Session, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """A request the warm parent answers (its state; ``stop``); OSError when it cannot be reached."""

    @abc.abstractmethod
    def launch(self, session: Session, job: Job, attempt: int) -> None:
        """Hand the claimed ``attempt`` of ``job`` to the warm parent."""

    def cell_store(self, session: Session, store: Store, layout: JobLayout) -> Store:
        """Where the cell about to be launched on ``session`` writes and reads its job (``layout``). The default:
        the Store itself, which the warm parent reads as quickly as the notebook does."""
        return store

    @abc.abstractmethod
    def up(self, session: Session) -> bool:
        """Whether the session's machine of its current boot takes cells (a local one: OSError when it does
        not)."""

    def release(self, session: Session) -> None:
        """Let go of what :meth:`up` made for a cell that is not launched after all (its inputs could not be
        sent, a check refused it, the user interrupted it): a local warm parent waits on that connection for the
        cell's request and would take no other cell meanwhile."""
        pending, session.pending = session.pending, None
        if pending is not None:
            pending.close()

    @abc.abstractmethod
    def end(self, record: SessionRecord) -> None:
        """Remove what is left of the record's machine (and of its places)."""
