"""The watcher VM's program: supervise the Store's jobs while no notebook runs, then delete this VM.

``python -m nbburst.client.supervision.watchervm BASE``, run by ``vm/watch.sh`` on the watcher VM that a gce
submission made sure of (:mod:`nbburst.machines.gce.watcher`). It takes its Store and the client's settings
from the instance metadata and runs the supervision loop (:mod:`.loop`: the same loop, the same leases as every
other host) against the gs:// Store, with one step before each round: the key of every unfinished job it does
not hold yet, read from the job's Secret Manager secret as the VM's service account
(:meth:`~nbburst.machines.gce.keysecret.KeySecrets.read`). A job whose key it cannot read is one it can
neither verify nor act on: it is left to its submitter's supervisors.

Once the loop ends (no unfinished job for ``c.NBBurst.watcher_idle``) it says in the Store that it is leaving,
looks at the jobs once more (a job submitted meanwhile keeps it), and deletes its own VM through the Compute
Engine API. Stopped from outside (SIGTERM: the VM stops or is deleted) it just exits.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from ... import config
from ...errors import NotPermitted
from ...machines.gce import watcher
from ...machines.gce.keysecret import KeySecrets
from ...machines.gce.machines import GCEMachines
from ...protocol.durations import parse_duration
from ...protocol.metadata import metadata
from ...store.base import elapsed
from .loop import Loop, stop_on_sigterm

if TYPE_CHECKING:
    from ...store import Store
    from ..burst import Burst

#: Seconds before a job key that could not be read is asked for again (its secret may be made meanwhile).
RETRY_KEY_SECONDS = 60.0


class Keys:
    """Before each round: the keys of the unfinished jobs this watcher does not hold yet, from Secret Manager."""

    def __init__(self, secrets: KeySecrets):
        self.secrets = secrets
        self.refused: dict[str, float] = {}  # job id -> elapsed() after which to ask again
        self.ended: set[str] = set()  # jobs seen ended without their key: never asked for

    def __call__(self, burst: Burst) -> None:
        store = burst.store
        for job in burst.jobs():
            if job.id in self.ended or burst.keyring.has(job.id) or elapsed() < self.refused.get(job.id, 0.0):
                continue
            if store.exists(job.layout.terminal):
                self.ended.add(job.id)  # nothing to relaunch
                continue
            key = self.secrets.read(job.id)
            if key is None:
                self.refused[job.id] = elapsed() + RETRY_KEY_SECONDS
                continue
            burst.keyring.add(job.id, key, store.url)
            print(f"nbburst watch: watching job {job.id}", flush=True)


def configure(base: str) -> str:
    """Point nbburst at the Store and settings the metadata names (as ``NBBURST_*`` variables, which
    :func:`config.load` reads); this VM's name."""
    root = metadata(f"instance/attributes/{watcher.ROOT_KEY}", timeout=10)
    name = metadata("instance/name", timeout=10)
    if not root or not name:
        raise SystemExit("nbburst watch: the instance metadata names no Store: this VM was not made by nbburst")
    settings = json.loads(metadata(f"instance/attributes/{watcher.SETTINGS_KEY}", timeout=10) or "{}")
    os.environ.update({k: str(v) for k, v in settings.items() if k.startswith(config.ENV_PREFIX)})
    os.environ[config.ENV_PREFIX + "ROOT"] = root
    os.environ[config.ENV_PREFIX + "BACKEND"] = "gce"
    os.environ[config.ENV_PREFIX + "STATE_DIR"] = os.path.join(base, "state")
    return name


def key_secrets(settings: config.NBBurst) -> KeySecrets:
    """The job keys, read as this VM's service account (its metadata-server token, also against an emulator)."""
    from google.auth import compute_engine

    project = settings.project or metadata("project/project-id", timeout=10) or ""
    return KeySecrets(settings.secretmanager_endpoint, lambda: project, compute_engine.Credentials, authenticated=True)


def busy(burst: Burst, keys: Keys) -> bool:
    """One more round: whether any unfinished job is there to watch (its lease handed back at once)."""
    keys.refused.clear()  # a key refused a moment ago may be readable now: its job's launch made the secret
    keys(burst)
    loop = Loop(burst)
    loop.round()
    loop.release()
    return bool(loop.supervisors)


class Said:
    """What this watcher says in the Store (:func:`watcher.say_state`): watching or leaving, and, once Compute
    Engine refused it a relaunch (403), that it cannot relaunch, with the refusal and the roles its account
    needs; the client's doctor and job views read it."""

    def __init__(self, store: Store, name: str):
        self.store, self.name = store, name
        self.state, self.refused = "watching", ""

    def __call__(self, state: str) -> None:
        self.state = state
        watcher.say_state(self.store, self.name, state, self.refused)

    def refusal(self, error: NotPermitted) -> str:
        """Record the refusal with the roles to grant; the job's end says the same."""
        account = metadata("instance/service-accounts/default/email", timeout=10) or ""
        self.refused = watcher.cannot_relaunch(str(error), account)
        print(f"nbburst watch: {self.refused}", flush=True)
        self(self.state)
        return self.refused


def main(argv: list[str]) -> int:
    base = argv[0] if argv else os.environ.get("NBBURST_HOME", os.getcwd())
    name = configure(base)
    settings = config.load()
    from ..burst import Burst

    burst = Burst(settings)
    keys = Keys(key_secrets(settings))
    idle = parse_duration(settings.watcher_idle, "watcher_idle")
    stopping = stop_on_sigterm()
    say = Said(burst.store, name)
    say("watching")
    while True:
        Loop(burst, settings.watcher_interval, idle=idle, before_round=keys, refused=say.refusal).serve(stopping)
        if stopping.is_set():
            return 0  # the VM is stopping or being deleted: nothing to add
        say("leaving")
        if not busy(burst, keys):
            break
        say("watching")  # a job came in while it was leaving
    print(f"nbburst watch: no unfinished job for {settings.watcher_idle}: deleting this VM ({name})", flush=True)
    GCEMachines(settings).watchers.delete(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
