"""``--resume JOB``: a new job whose checkpoints begin as another job's latest.

Checkpoints are sealed to their job (:mod:`nbburst.protocol.sealed`): each
object opens only under its job's key, for its job id and its place. A new
job cannot use another's as they are, and must never accept state it cannot
verify. So the client, which holds both keys in its key ring, opens every
object of the earlier job's ``checkpoints/`` folder under that job's key and
seals it again, at the same place and version, for the new job under the new
job's key, before the new job's spec is written. The new job's agent then
restores them exactly as it would restore its own after a preemption
(``nbburst.checkpoint`` state and versions, ``checkpoint.range`` progress,
``checkpoint.folder()`` files, the joblib task results that let a search skip
finished fits), and a job resumed that way can be resumed in turn.

Anything that does not open refuses the whole resumption, before anything is
launched: an altered or misplaced object may stand for state the earlier job
never had. An object deleted while copying (the earlier job still running and
collecting old versions) is skipped: the newest manifest that opens wins
on the machine, as after a preemption.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import UsageError
from ..protocol import sealed, signing
from ..protocol.folder import JobFolder
from ..protocol.signing import MAGIC
from ..store import NotFound

#: Where the checkpoint objects signed with the job's key live (nbburst.agent.attempt.checkpoints: Keys.state).
STATE = "checkpoints/state/"


class ResumeRefused(UsageError):
    """The job to resume from has no checkpoints, or they cannot be verified; nothing was launched."""


def check_source(source: JobFolder, label: str) -> list[str]:
    """The keys of ``source``'s checkpoints; :class:`ResumeRefused` when there are none. ``label`` names the job
    as the user did (``Job.label``)."""
    keys = source.store.list(source.layout.checkpoints)
    if not keys:
        raise ResumeRefused(
            f"--resume: job {label} has no checkpoints to resume from (a cell keeps state for a later job "
            "with nbburst.checkpoint.save / range / folder(), or runs a joblib-parallel search)"
        )
    return keys


def carry_over(source: JobFolder, target: JobFolder, label: str) -> int:
    """Copy ``source``'s checkpoints into ``target``'s folder, verified and sealed again for ``target``.

    Returns how many objects were copied; :class:`ResumeRefused` when one does not verify."""
    keys = check_source(source, label)
    copied = 0
    with tempfile.TemporaryDirectory(prefix="nbburst-resume-") as tmp:
        scratch = Path(tmp) / "object"
        for key in keys:
            place = source.place(key)
            try:
                _copy(source, target, key, target.layout.key(place), scratch)
            except NotFound:
                continue  # collected by the still running job meanwhile
            except signing.SignatureError as exc:
                raise ResumeRefused(
                    f"--resume: the checkpoints of job {label} do not verify, so nothing of them is used: {exc}"
                ) from None
            copied += 1
    if not copied:
        check_source(source, label)  # every one went while copying: say there are none
    return copied


def _copy(source: JobFolder, target: JobFolder, key: str, new_key: str, scratch: Path) -> None:
    """One object, opened under the source's key and sealed for the target: a record (a checkpoint manifest,
    readable JSON with its seal) or a sealed object, checked as it streams (big framework files too). A state
    object (``nbburst.checkpoint.save``) is signed inside its seal as well, with the job's key: that signature
    is checked and made again with the target's key."""
    raw, inner = scratch.with_name("raw"), scratch.with_name("inner")
    try:
        source.store.get_file(key, raw)
        with open(raw, "rb") as f:
            is_object = f.read(len(MAGIC)) == MAGIC
        if not is_object:
            target.create_record(new_key, source.open_record(key, raw.read_bytes()))
            return
        version = sealed.open_file(source.key, source.job_id, source.place(key), raw, scratch)
        if key.startswith(source.layout.key(STATE)):
            signing.verify_file(source.key, scratch, inner, f"checkpoint {source.place(key)} of job {source.job_id}")
            with open(scratch, "wb") as f:
                for chunk in signing.sign_file(target.key, inner):
                    f.write(chunk)
        target.put_file(new_key, scratch, version)
    finally:
        for path in (raw, inner, scratch):
            path.unlink(missing_ok=True)
