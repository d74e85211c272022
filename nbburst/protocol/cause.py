"""Why an attempt cannot do its job, said where the supervisor finds it even when the Store would not take it.

A machine that vanishes without a verdict is taken for preempted and relaunched. That is right when it was
stopped, and wrong when its agent knew it could not do the job: a spec or object refused, a Store that stays
full or read-only. Every attempt would meet the same cause again. So the agent ends the job FAILED with the
cause as its message and, first, prints the cause to the machine's console as one line (:func:`console_line`):
its console file on the local backend, the serial port on Compute Engine. When even the job's end cannot be
written, the supervisor reads that line (:func:`console_cause`) before it would relaunch, and ends the job on
its word instead (client/supervision/supervisor.py).
"""

from __future__ import annotations

from ..store import NotFound, StoreError
from .signing import SignatureError

#: What starts the agent's console line; the job, the attempt and the cause follow.
MARK = "nbburst: cannot run job"
#: Said of an object the job needs that failed its signature check: what to do about it.
REFUSED_ADVICE = "no attempt would run it; submit the cell again, and see who else can write to the Store"
#: Said of an object the job needs that is missing.
REMOVED_ADVICE = "the job's objects were removed from the Store (by `nbburst gc`, or by hand); submit the cell again"


def console_line(job_id: str, attempt: int, cause: str) -> str:
    """The console line that says ``attempt`` of ``job_id`` cannot run, and why (on one line, whatever the
    cause holds)."""
    return f"{MARK} {job_id} attempt {attempt}: {' '.join(cause.split())}"


def console_cause(console: str, job_id: str, attempt: int) -> str:
    """The cause the agent of ``attempt`` of ``job_id`` printed to its machine's ``console`` (the last one), ""
    if none.

    Found anywhere in a line: a serial port prefixes the agent's lines with the time and the unit that wrote
    them. Another attempt's line (an earlier boot of the same machine), or another job's (a session's machine
    runs many), is not this one's."""
    prefix = f"{MARK} {job_id} attempt {attempt}: "
    found = ""
    for line in console.splitlines():
        at = line.find(prefix)
        if at >= 0:
            found = line[at + len(prefix) :].strip()
    return found


def cause_of(error: BaseException) -> str:
    """The job's end message for ``error``, which no relaunch would clear: what failed, the error, what to do.

    A Store's errors say all three already (:class:`~..store.base.StoreIOError`, the Cloud Storage adapter's
    messages); a refused or missing object gets the advice; anything else is the agent's own failure, named by
    type."""
    if isinstance(error, SignatureError):
        return f"{error}; {REFUSED_ADVICE}"
    if isinstance(error, NotFound):
        return f"{error}; {REMOVED_ADVICE}"
    if isinstance(error, StoreError):
        return f"the Store failed: {error}"
    return f"the agent failed: {type(error).__name__}: {error}"
