"""The bake of an image builder VM: the notebook's Python, packages and nbburst's wheel in a venv on the disk.

``python3 bake.py BASE PYTHON``, run by build.sh with the image's own Python (standard library only: see
vmlib.py). The build's spec is the ``nbburst-image-spec`` metadata (see nbburst/machines/gce/image.py),
resolved by the client with the rules a job's environment follows (nbburst/protocol/env.py). This makes
the venv as a job's bootstrap does on a stock image (uv; a standalone Python when the image's is another
minor version), installs the requirement lines (with their dependencies), then the pinned packages at the
notebook's versions without theirs, the notebook's local packages and nbburst's wheel; checks that the
agent imports from the venv; and writes what was baked to ``BASE/image.json``.

Exit status 0 = the disk is ready to become an image; otherwise the serial console says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any

from vmlib import (
    Bucket,
    Console,
    Unreadable,
    clean_venv,
    install_groups,
    install_wheels,
    installed,
    md,
    save_wheel,
    split_gs,
    uv_binary,
    uv_install,
)

console = Console("nbburst-image-build")
say, die = console.say, console.die


def install_packages(base: str, uv: str, python: str, spec: dict[str, Any]) -> None:
    """The requirement lines, then the pinned packages the venv lacks at those versions."""
    t0 = time.time()
    lines = spec.get("requirements") or []
    if lines:
        req = os.path.join(base, "image-requirements.txt")
        with open(req, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        if uv_install(uv, python, ["-r", req])[0]:
            die("uv could not install the requirement lines " + ", ".join(lines) + " (its messages are above)")
    pins = spec.get("packages") or {}
    have = installed(python)
    todo = [n for n, v in pins.items() if have.get(n) != v]
    say(f"{len(pins)} pinned packages: {len(pins) - len(todo)} already here, {len(todo)} to install")
    failed = install_groups(uv, python, spec.get("groups") or [], have, pins)
    if failed:
        die("could not install " + "; ".join(f"{name}: {why}" for name, why in sorted(failed.items())))
    say(f"packages installed in {time.time() - t0:.1f} s")


def fetch(url: str, sha256: str) -> bytes:
    """The object at ``gs://BUCKET/KEY``, checked against its SHA-256."""
    if not url.startswith("gs://"):
        die(f"{url!r} is not gs://BUCKET/KEY")
    bucket, _, key = url[len("gs://") :].partition("/")
    try:
        data = Bucket(bucket).read(key)
    except Unreadable as exc:
        die(str(exc))
    if hashlib.sha256(data).hexdigest() != sha256:
        die(f"{url} does not match its SHA-256; refusing to install it")
    return data


def install_wheels_of(base: str, uv: str, python: str, spec: dict[str, Any]) -> None:
    """The notebook's local packages and nbburst's wheel."""
    bucket, prefix = split_gs(spec["store"])
    wheels = [*(spec.get("wheels") or []), spec["wheel"]]
    paths = []
    for w in wheels:
        url = w.get("url") or f"gs://{bucket}/{prefix}{w['blob']}"
        paths.append(save_wheel(base, w["file"], fetch(url, w["sha256"])))
    if install_wheels(uv, python, paths):
        die("could not install " + ", ".join(w["file"] for w in wheels) + " (see above)")
    with open(os.path.join(os.path.dirname(os.path.dirname(python)), ".nbburst-wheel"), "w") as f:
        f.write(spec["wheel"]["sha256"])
    for path in paths:
        os.remove(path)


def agent_check(python: str, venv: str) -> str:
    """The nbburst version the venv's agent imports; dies when it does not import, or not from the venv."""
    check = subprocess.run(
        [
            python,
            "-c",
            "import json, sys, nbburst, nbburst.agent.attempt.controller, google.cloud.storage; "
            "print(json.dumps([nbburst.__version__, nbburst.__file__]))",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if check.returncode:
        die("the nbburst agent does not import in the venv:\n" + (check.stderr or check.stdout)[-2000:])
    version, where = json.loads(check.stdout.strip().splitlines()[-1])
    if not os.path.realpath(where).startswith(os.path.realpath(venv) + os.sep):
        die(f"python finds nbburst at {where}, not in the venv {venv}")
    return version


def main(base: str, want: str) -> None:
    raw = md("instance/attributes/nbburst-image-spec")
    if not raw:
        die("instance metadata has no nbburst-image-spec: this VM was not made by nbburst image build")
    spec = json.loads(raw)
    venv = os.path.join(base, "venv")
    python = os.path.join(venv, "bin", "python")
    try:
        uv = uv_binary(base, say)
        if os.path.exists(python):
            say("updating the venv the base image has")
        else:
            clean_venv(uv, venv, want or spec["python"], say)
            say("venv created")
    except Unreadable as exc:
        die(str(exc))
    install_packages(base, uv, python, spec)
    install_wheels_of(base, uv, python, spec)
    say(f"nbburst {spec.get('nbburst')} installed")
    version = agent_check(python, venv)
    have = installed(python)
    pins = spec.get("packages") or {}
    version_info = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
    )
    info = {
        "family": spec.get("family"),
        "image": spec.get("image"),
        "nbburst": version,
        "wheel_sha256": spec["wheel"]["sha256"],
        "python": version_info.stdout.strip(),
        "venv": venv,
        "built": time.time(),
        "packages": {n: have.get(n) for n in sorted(pins)},
        "requirements": spec.get("requirements") or [],
    }
    with open(os.path.join(base, "image.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
    count = len(pins) + len(info["requirements"])
    say(f"baked: Python {info['python']}, nbburst {version}, {count} packages, in {venv}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
