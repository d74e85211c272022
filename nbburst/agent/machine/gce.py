"""The machine side of Compute Engine: end this VM when the job is over, mark a shutdown.

:func:`end_machine` is called by the agent once the job has a terminal state.
On a job VM it deletes the VM through the Compute Engine API (name, zone and
project from the metadata server, the VM's service-account token from the
metadata server; ``$NBBURST_COMPUTE_ENDPOINT`` names an emulator, reached
without credentials). If it cannot (no compute scope or permission), it powers
the VM off instead, and the client deletes the stopped VM when it sees the
terminal state. Under the local backend (the key comes in the environment)
there is nothing to do: the process ends.

Plain REST with the standard library: importing google-cloud-compute would
cost seconds of VM time for one request.

``python -m nbburst.agent.machine.gce shutdown`` (the VM's shutdown script) marks the
current attempt PREEMPTED when the job has no terminal state and the agent is
no longer there to say so.

The job key never sits in the instance's metadata (any project viewer can read that): the bootstrap reads it
from Secret Manager and leaves it in ``$NBBURST_HOME/job-key`` (:func:`vm_key`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

from ...protocol.job import ENV_JOB_KEY, QUICK_STALE_SECONDS, JobLayout, State, split_job_url
from ...protocol.metadata import metadata, on_gce

DEFAULT_ENDPOINT = "https://compute.googleapis.com"
COMPUTE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/compute")


def _metadata(path: str, timeout: float = 5.0) -> str | None:
    return metadata(path, timeout=timeout)


def on_job_vm() -> bool:
    """True on a VM started by the gce backend (identity from instance metadata, not the environment)."""
    if os.environ.get(ENV_JOB_KEY):
        return False
    if not on_gce():
        return False
    return _metadata("instance/attributes/nbburst-job-url", timeout=2.0) is not None


def vm_key() -> str | None:
    """The job key (hex) on a job VM: ``$NBBURST_HOME/job-key``, which the bootstrap wrote from the job's
    Secret Manager secret at this boot; None elsewhere."""
    home = os.environ.get("NBBURST_HOME")
    if not home:
        return None
    try:
        with open(os.path.join(home, "job-key")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _log(message: str) -> None:
    print(f"nbburst agent: {message} t={time.time():.3f}", file=sys.stderr, flush=True)


def end_machine() -> str:
    """Delete this VM (or power it off); returns what was done ("", "deleted", "powered off")."""
    if not on_job_vm():
        return ""
    from .envsync import settle

    settle()  # an environment being stored (by this process or another of the VM) is stored before it goes
    name = _metadata("instance/name")
    zone = (_metadata("instance/zone") or "").rsplit("/", 1)[-1]
    project = _metadata("project/project-id")
    if name and zone and project:
        problem = delete_instance(project, zone, name)
        if problem is None:
            _log(f"job over: deleting this VM ({name} in {zone})")
            return "deleted"
        _log(f"cannot delete this VM ({problem}); powering it off instead, the client deletes it")
    poweroff()
    return "powered off"


def delete_instance(project: str, zone: str, name: str) -> str | None:
    """Ask Compute Engine to delete the instance; None on success, else why not."""
    endpoint = os.environ.get("NBBURST_COMPUTE_ENDPOINT") or DEFAULT_ENDPOINT
    headers = {"Content-Type": "application/json"}
    if endpoint == DEFAULT_ENDPOINT or "googleapis.com" in endpoint:
        scopes = _metadata("instance/service-accounts/default/scopes") or ""
        if not any(s in scopes.split() for s in COMPUTE_SCOPES):
            return "the VM's service account has no compute scope"
        token = _metadata("instance/service-accounts/default/token")
        if not token:
            return "no service-account token from the metadata server"
        headers["Authorization"] = "Bearer " + json.loads(token)["access_token"]
    else:
        scopes = _metadata("instance/service-accounts/default/scopes")
        if scopes is not None and not any(s in scopes.split() for s in COMPUTE_SCOPES):
            return "the VM's service account has no compute scope"
    url = f"{endpoint.rstrip('/')}/compute/v1/projects/{project}/zones/{zone}/instances/{name}?requestId={uuid.uuid4()}"
    request = urllib.request.Request(url, method="DELETE", headers=headers)
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                resp.read()
            return None
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None  # already gone
            if exc.code in (401, 403):
                return f"permission denied ({exc.code}): the VM's service account needs compute.instances.delete"
            if exc.code < 500 or attempt == 2:
                return f"HTTP {exc.code}"
        except OSError as exc:
            if attempt == 2:
                return f"{type(exc).__name__}: {exc}"
        time.sleep(1 + attempt)
    return "gave up"


def poweroff() -> None:
    for cmd in (["poweroff"], ["sudo", "-n", "poweroff"], ["shutdown", "-h", "now"]):
        try:
            if subprocess.run(cmd, stdin=subprocess.DEVNULL, timeout=60).returncode == 0:
                return
        except (OSError, subprocess.TimeoutExpired):
            continue


# -- shutdown script ---------------------------------------------------------------------------


def mark_shutdown(wait_s: float = 10.0) -> str:
    """Mark the current attempt PREEMPTED if the job has no verdict and its agent, once running, is silent.

    An attempt whose agent never started stays PROVISIONING: the client reads that as a boot failure."""
    from ...protocol.folder import JobFolder
    from ...store import NotFound, open_store

    url = _metadata("instance/attributes/nbburst-job-url")
    key_hex = vm_key()
    if not url or not key_hex:
        return "not a job VM"
    attempt = int(_metadata("instance/attributes/nbburst-attempt") or 1)
    preempted = (_metadata("instance/preempted") or "").strip().upper() == "TRUE"
    root, job_id = split_job_url(url)
    store, layout = open_store(root), JobLayout(job_id)
    folder = JobFolder(store, layout, bytes.fromhex(key_hex))
    deadline = time.monotonic() + wait_s
    while True:
        if store.exists(layout.terminal):
            return "the job has ended"
        try:
            status = folder.status(attempt)
        except NotFound:
            return "no status for this attempt"
        if status.state != State.RUNNING:
            return f"the attempt is {status.state.value}"
        if time.time() - status.heartbeat > QUICK_STALE_SECONDS or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if time.time() - status.heartbeat <= QUICK_STALE_SECONDS:
        return "the agent is still reporting"
    status.state = State.PREEMPTED
    status.message = "the VM was preempted" if preempted else "the VM shut down"
    status.heartbeat = time.time()
    folder.put_status(status)
    return f"marked attempt {attempt} PREEMPTED"


def main(argv: list[str]) -> int:
    if argv[:1] == ["shutdown"]:
        try:
            print(f"nbburst-shutdown: {mark_shutdown()}", flush=True)
        except Exception as exc:  # best effort: never hold the shutdown up
            print(f"nbburst-shutdown: {type(exc).__name__}: {exc}", flush=True)
        return 0
    if argv[:1] == ["end"]:
        print(end_machine() or "not a job VM")
        return 0
    print("usage: python -m nbburst.agent.machine.gce shutdown|end", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
