"""Match the machine's packages to the notebook's before the cell runs; store an environment built at boot.

The client lists, in the job's signed ``dist/manifest.json`` (see
:mod:`nbburst.protocol.dist`), the distributions the job is likely to need at the
notebook's versions, each with its requirement and package index. Here the agent
installs those that are missing or at another version, without their
dependencies, into the environment it runs in (on Compute Engine the venv on the
boot disk; with pip when that environment has it, an image prepared with the
packages, else with uv: the environment's own, or the one the bootstrap put on
the PATH, see :mod:`nbburst.protocol.uvprogram`), logs what it installs to the job
log, and then starts itself again so that nothing keeps running with the old
versions already imported. On a stock image the bootstrap
has installed them already, and there is nothing to do.

When the bootstrap built the environment (it leaves ``BASE/env-pending.json``
and a snapshot of the venv), a thread (:func:`store_built`; a warm session's
relay starts it too) packs the snapshot and stores it,
create-only, as ``envs/<hash>.tar.gz`` with its record signed by the job key
(:mod:`nbburst.protocol.envcache`), while the cell runs; :func:`settle` waits
for it before the VM is deleted, so that the next VM unpacks it instead of
installing.

Jobs without a manifest (the local backend: same environment) are left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from importlib import invalidate_caches
from typing import Any, Protocol

from ...protocol import envcache
from ...protocol.dist import verify_manifest
from ...protocol.env import package_differences
from ...protocol.job import ENV_ATTEMPT, JobLayout
from ...protocol.uvprogram import uv_program
from ...store import AlreadyExists, NotFound, Store

#: Set in the environment of the restarted agent, so a package that will not install is tried once.
ENV_SYNCED = "NBBURST_ENV_SYNCED"
INSTALL_TIMEOUT_S = 1800
#: The longest the end of a job waits for the environment to be stored.
SETTLE_S = 900.0
#: In ``$NBBURST_HOME`` while an environment is being stored: the pid of the process storing it.
STORING = "env-storing"

_storing: threading.Thread | None = None


class JobLog(Protocol):
    """Where the sync reports to the job's log (the agent's Shipper)."""

    def event(self, text: str) -> None: ...

    def flush(self) -> None: ...


def install_command(requirements: list[str], index: str | None = None) -> list[str]:
    """The command that installs ``requirements`` without their dependencies into this environment: pip when
    it has pip, else uv."""
    source = ["--index-url", index] if index else []
    uv = uv_program() if importlib.util.find_spec("pip") is None else None
    if uv is not None:
        return [uv, "pip", "install", "--no-config", "--python", sys.executable, "--no-deps"] + source + requirements
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check"]
    cmd += ["--no-warn-script-location", "--progress-bar", "off"]
    home = os.environ.get("NBBURST_HOME")
    if home:
        cmd += ["--cache-dir", os.path.join(home, "pip-cache")]
    return cmd + source + requirements


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _runs(todo: dict[str, str], manifest: dict[str, Any]) -> list[tuple[str | None, dict[str, str]]]:
    """The differing packages as installer runs: (package index, {name: requirement}), per the manifest's groups."""
    env = manifest.get("env") or {}
    how = {r["name"]: (r["requirement"], g.get("index")) for g in env.get("groups") or [] for r in g["requirements"]}
    local = {w["name"] for w in env.get("wheels") or []}
    runs: dict[str | None, dict[str, str]] = {}
    for name, version in todo.items():
        if name in local:
            continue  # a wheel of the notebook's files: the bootstrap installs it, no index has it
        requirement, index = how.get(name, (f"{name}=={version}", None))
        runs.setdefault(index, {})[name] = requirement
    return list(runs.items())


def _install(store: Store, layout: JobLayout, key: bytes, log: JobLog) -> None:
    """Install what differs, then restart the agent process (this call then does not return)."""
    t0 = time.time()
    try:
        manifest = json.loads(store.get(layout.dist_manifest))
    except NotFound:
        return  # no manifest: the machine shares the notebook's environment
    if not verify_manifest(key, manifest):
        log.event("nbburst: dist/manifest.json failed its signature check; no packages installed")
        return
    wanted = manifest.get("requirements") or {}
    todo = package_differences(wanted)
    _timing(f"checked {len(wanted)} packages, {len(todo)} differ", t0)
    if not todo:
        return
    listed = ", ".join(f"{n}=={v}" for n, v in todo.items())
    if os.environ.get(ENV_SYNCED):
        log.event(
            f"nbburst: warning: still different from the notebook after installing: {listed}; "
            "the job's inputs may not load"
        )
        return
    log.event(f"nbburst: installing {len(todo)} package(s) to match the notebook: {listed}")
    log.flush()
    failed, tried = [], 0
    for index, requirements in _runs(todo, manifest):
        tried += len(requirements)
        proc = _run(install_command(list(requirements.values()), index))
        if proc is not None and proc.returncode == 0:
            continue
        for requirement in requirements.values():  # one at a time: one that cannot be had blocks no other
            one = _run(install_command([requirement], index))
            if one is None or one.returncode:
                failed.append(f"{requirement}: {_last_line(one.stderr or one.stdout) if one else 'timed out'}")
    if failed:
        log.event("nbburst: warning: could not install " + "; ".join(failed) + " — the job's inputs may not load")
    if len(failed) == tried:
        log.flush()
        return
    log.event(f"nbburst: packages installed in {time.time() - t0:.1f} s")
    log.flush()
    _timing("installed; restarting the agent", t0)
    invalidate_caches()
    os.environ[ENV_SYNCED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "nbburst.agent", *sys.argv[1:]])


def sync(store: Store, layout: JobLayout, key: bytes, log: JobLog) -> None:
    """Install what differs from the job's signed manifest (checked with ``key``), reporting to ``log``, and
    restart the agent when anything was installed (this call then does not return); then start storing an
    environment the bootstrap built."""
    _install(store, layout, key, log)
    store_built(store, layout.job_id, key)


def store_built(store: Store, job_id: str, key: bytes) -> None:
    """Start storing, in a thread, an environment the bootstrap built at boot (it left ``env-pending.json``),
    its record signed with ``key`` under ``job_id``: a job VM's agent and a session VM's relay both do, so that
    the next VM of that environment, a job's or a session's, unpacks it instead of installing."""
    global _storing
    home = os.environ.get("NBBURST_HOME", "")
    if home and os.path.exists(os.path.join(home, "env-pending.json")) and _storing is None:
        with open(os.path.join(home, STORING), "w") as f:  # another process of the VM may end it: it waits
            f.write(str(os.getpid()))
        _storing = threading.Thread(target=_store_marked, args=(store, job_id, key, home), name="nbburst-envstore")
        _storing.daemon = True
        _storing.start()


def _store_marked(store: Store, job_id: str, key: bytes, home: str) -> None:
    try:
        store_environment(store, job_id, key, home)
    finally:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(home, STORING))


def store_environment(store: Store, job_id: str, key: bytes, home: str) -> None:
    """Pack the venv snapshot the bootstrap left in ``home`` and store it with its signed record."""
    t0 = time.time()
    snapshot, archive = os.path.join(home, "env-snapshot"), os.path.join(home, "env-upload.tar.gz")
    with open(os.path.join(home, "env-pending.json")) as f:
        pending = json.load(f)
    packed = subprocess.run(
        ["tar", "-C", snapshot, "--use-compress-program", "gzip -1", "-cf", archive, "venv"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != ENV_ATTEMPT},  # not the attempt's: its end must not end it
    )
    if packed.returncode:
        _timing(f"could not pack the environment (tar exit status {packed.returncode}): {packed.stderr[-300:]}", t0)
        return
    digest, size = hashlib.sha256(), 0
    with open(archive, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
            size += len(chunk)
    try:
        store.put_file(envcache.archive_key(pending["hash"]), archive, create=True)
        record = envcache.record(key, job_id, pending, pending["packages"], digest.hexdigest(), size)
        store.create(envcache.record_key(pending["hash"]), json.dumps(record, sort_keys=True, indent=1).encode())
        _timing(f"environment stored as {envcache.archive_key(pending['hash'])} ({size} bytes)", t0)
    except AlreadyExists:
        _timing(f"environment {pending['hash']} was stored by another machine", t0)
    except Exception as exc:  # storing is an optimisation: the job goes on without it
        _timing(f"could not store the environment: {type(exc).__name__}: {exc}", t0)
    finally:
        os.remove(archive)
    shutil.rmtree(snapshot, ignore_errors=True)
    os.remove(os.path.join(home, "env-pending.json"))


def settle(timeout_s: float = SETTLE_S) -> None:
    """Wait (at most ``timeout_s``) until an environment being stored is stored: the VM is deleted next. The
    storing may be another process's (a session VM's relay stores, its warm parent ends the VM): its marker
    file says which, and the wait ends when it is gone or that process is."""
    if _storing is not None and _storing.is_alive():
        _timing("waiting for the environment to be stored", time.time())
        _storing.join(timeout_s)
        return
    marker = os.path.join(os.environ.get("NBBURST_HOME") or "", STORING)
    try:
        with open(marker) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return
    t0 = time.time()
    _timing(f"waiting for process {pid} to store the environment", t0)
    while os.path.exists(marker) and _alive(pid) and time.time() - t0 < timeout_s:
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return pid > 0


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "the installer failed"


def _timing(message: str, t0: float) -> None:
    print(f"nbburst-envsync: {message} ({time.time() - t0:.3f} s) t={time.time():.3f}", file=sys.stderr, flush=True)
