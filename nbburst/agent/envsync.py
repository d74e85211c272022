"""Match the machine's packages to the notebook's before the cell runs.

The client lists, in the job's signed ``dist/manifest.json`` (see
:mod:`nbburst.protocol.dist`), the distributions the job is likely to need at the
notebook's versions. Here the agent installs those that are missing or at
another version, with ``pip install --no-deps`` into the environment it runs
in (on Compute Engine the venv on the boot disk, with a pip cache beside it,
so a restarted VM neither reinstalls nor downloads again), logs what it
installs to the job log, and then starts itself again so that nothing keeps
running with the old versions already imported.

Jobs without a manifest (the local backend: same environment) are left alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import invalidate_caches
from typing import TYPE_CHECKING

from ..protocol.dist import verify_manifest
from ..protocol.env import package_differences
from ..store import NotFound

if TYPE_CHECKING:
    from .main import Agent

#: Set in the environment of the restarted agent, so a package that will not install is tried once.
ENV_SYNCED = "NBBURST_ENV_SYNCED"
PIP_TIMEOUT_S = 1800


def pip_command(packages: dict[str, str]) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--progress-bar",
        "off",
    ]
    home = os.environ.get("NBBURST_HOME")
    if home:
        cmd += ["--cache-dir", os.path.join(home, "pip-cache")]
    return cmd + [f"{name}=={version}" for name, version in sorted(packages.items())]


def sync(agent: Agent) -> None:
    """Install what differs, then restart the agent process (this call then does not return)."""
    t0 = time.time()
    try:
        manifest = json.loads(agent.store.get(agent.layout.dist_manifest))
    except NotFound:
        return  # no manifest: the machine shares the notebook's environment
    if not verify_manifest(agent.ident.key, manifest):
        agent.shipper.event("nbburst: dist/manifest.json failed its signature check; no packages installed")
        return
    wanted = manifest.get("requirements") or {}
    todo = package_differences(wanted)
    _timing(f"checked {len(wanted)} packages, {len(todo)} differ", t0)
    if not todo:
        return
    listed = ", ".join(f"{n}=={v}" for n, v in todo.items())
    if os.environ.get(ENV_SYNCED):
        agent.shipper.event(
            f"nbburst: warning: still different from the notebook after installing: {listed}; "
            "the job's inputs may not load"
        )
        return
    agent.shipper.event(f"nbburst: installing {len(todo)} package(s) to match the notebook: {listed}")
    agent.shipper.flush()
    try:
        proc = subprocess.run(
            pip_command(todo), capture_output=True, text=True, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
        ok = proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        # One at a time, so one package that cannot be had does not block the others.
        failed = []
        for name, version in todo.items():
            one = subprocess.run(
                pip_command({name: version}),
                capture_output=True,
                text=True,
                timeout=PIP_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            if one.returncode:
                failed.append(f"{name}=={version}: {_last_line(one.stderr or one.stdout)}")
        if failed:
            agent.shipper.event(
                "nbburst: warning: could not install " + "; ".join(failed) + " — the job's inputs may not load"
            )
        if len(failed) == len(todo):
            agent.shipper.flush()
            return
    agent.shipper.event(f"nbburst: packages installed in {time.time() - t0:.1f} s")
    agent.shipper.flush()
    _timing("installed; restarting the agent", t0)
    invalidate_caches()
    os.environ[ENV_SYNCED] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "nbburst.agent", *sys.argv[1:]])


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "pip failed"


def _timing(message: str, t0: float) -> None:
    print(f"nbburst-envsync: {message} ({time.time() - t0:.3f} s) t={time.time():.3f}", file=sys.stderr, flush=True)
