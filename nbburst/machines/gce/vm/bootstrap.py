"""The bootstrap of a job's VM: the notebook's environment and the job's nbburst in a venv on the boot disk.

``python3 bootstrap.py BASE``, run by startup.sh at every boot with the image's own Python (any version,
standard library only: see vmlib.py).

1. reads the job URL from the instance metadata and the job key from the Secret Manager secret version the
   metadata names (``nbburst-key-secret``, readable by the VM's service account only), and leaves them in
   ``BASE/job-url`` and ``BASE/job-key`` (mode 0600) for the startup script and the agent; a refusal (403, 404)
   is waited out for up to 10 minutes, said on the console: the account was granted the secret at launch, and
   IAM takes minutes to propagate (``vmlib.IamWait``; the same for the bucket's first reads);
2. reads the job's ``dist/manifest.json`` from the bucket and checks its HMAC under the job key;
3. the venv at ``BASE/venv``:

   * it exists and is complete (``.nbburst-wheel``): a restart, or an image baked by ``nbburst image
     build``; the agent installs any package that differs;
   * the image's Python is the notebook's minor version and has nbburst's dependencies already (an image
     prepared for it): a venv that sees the image's packages; the agent installs what differs;
   * otherwise (a stock image): uv (fetched if the image lacks it) makes a clean venv of the notebook's
     Python (a standalone one when the image's is another version), unpacks the stored environment the
     manifest names (``envs/<hash>.tar.gz``, checked against its SHA-256), installs the notebook's versions
     of what is still missing, and, when it installed anything, leaves a snapshot of the venv and
     ``BASE/env-pending.json`` for the agent to store in the bucket (see nbburst/agent/machine/envsync.py);

4. installs the job's local packages (wheels built by the client) and nbburst's wheel, all checked against
   their SHA-256.

Exit status 0 = the venv is ready for the agent; otherwise the serial console says why.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from vmlib import (
    Bucket,
    Console,
    Unreadable,
    clean_venv,
    has_distributions,
    has_pip,
    install_groups,
    install_wheels,
    installed,
    md,
    python_minor,
    run,
    save_wheel,
    secret,
    shared_venv,
    split_gs,
    use_package_index,
    uv_binary,
)

console = Console("nbburst-startup")
say, die = console.say, console.die


def read_text(path: str) -> str:
    """The text of a file, "" when there is none."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def keep_key(base: str, key_hex: str) -> None:
    """Leave the job key in ``BASE/job-key``, readable by this user only, for the agent and the shutdown
    script (each boot reads it again: the secret is the key's only home)."""
    path = os.path.join(base, "job-key")
    fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key_hex)
    os.replace(path + ".part", path)


def read_manifest(bucket: Bucket, prefix: str, job_id: str, key_hex: str) -> dict[str, Any]:
    manifest = json.loads(bucket.read(f"{prefix}jobs/{job_id}/dist/manifest.json"))
    signature = manifest.pop("signature", "")
    body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    if not hmac.compare_digest(hmac.new(bytes.fromhex(key_hex), body, hashlib.sha256).hexdigest(), signature):
        die("dist/manifest.json failed its signature check under the job key; refusing to install it")
    return manifest


def unpack(base: str, bucket: Bucket, prefix: str, stored: dict[str, Any]) -> bool:
    """Unpack the stored environment into ``BASE/venv``; False (and nothing left) when it cannot be read."""
    t0 = time.time()
    archive = os.path.join(base, "env-base.tar.gz")
    try:
        size = bucket.download(prefix + stored["archive"], archive, stored["sha256"])
    except Unreadable as exc:
        say(f"warning: {exc}; building the environment instead")
        return False
    t1 = time.time()
    status = run(["tar", "-C", base, "-xzf", archive])
    os.remove(archive)
    if status:
        shutil.rmtree(os.path.join(base, "venv"), ignore_errors=True)
        say(f"warning: tar could not unpack {stored['archive']}; building the environment instead")
        return False
    say(
        f"environment {stored['archive']} unpacked ({size} bytes, downloaded in {t1 - t0:.1f} s, "
        f"unpacked in {time.time() - t1:.1f} s)"
    )
    return True


def build(base: str, bucket: Bucket, prefix: str, env: dict[str, Any], versions: dict[str, str], uv: str) -> None:
    """The clean venv of a stock image: Python, the stored environment, then what is missing (``versions``:
    name -> the version the notebook's environment resolves to)."""
    venv = os.path.join(base, "venv")
    python = os.path.join(venv, "bin", "python")
    stored = env.get("base")
    unpacked = bool(stored) and unpack(base, bucket, prefix, stored)
    try:
        clean_venv(uv, venv, env["python"], say, existing=unpacked)
    except Unreadable as exc:
        die(str(exc))
    wanted = {r["name"]: versions.get(r["name"], "") for g in env["groups"] for r in g["requirements"]}
    have = installed(python)
    missing = [name for name in wanted if have.get(name) != wanted[name]]
    if not missing:
        say(f"environment ready: {len(wanted)} packages, nothing to install")
        return
    t0 = time.time()
    say(f"installing {len(missing)} of {len(wanted)} packages with uv")
    failed = install_groups(uv, python, env["groups"], have, wanted)
    for name, why in sorted(failed.items()):
        say(f"warning: {name} did not install: {why}")
    say(f"{len(missing) - len(failed)} packages installed in {time.time() - t0:.1f} s")
    if env.get("store"):
        snapshot = os.path.join(base, "env-snapshot")
        shutil.rmtree(snapshot, ignore_errors=True)
        os.makedirs(snapshot)
        if run(["cp", "-al", venv, snapshot]) == 0:
            pending = {k: env[k] for k in ("hash", "python", "platform")}
            with open(os.path.join(base, "env-pending.json"), "w") as f:
                json.dump({**pending, "packages": installed(python)}, f)


def fetch_wheel(base: str, bucket: Bucket, prefix: str, wheel: dict[str, Any]) -> str:
    """Download a wheel the manifest names and check its SHA-256; its path."""
    data = bucket.read(prefix + wheel["blob"])
    if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
        die(f"{wheel['blob']} does not match its SHA-256; refusing to install it")
    return save_wheel(base, wheel["file"], data)


def install_job_wheels(base: str, bucket: Bucket, prefix: str, wheels: list[dict[str, Any]], uv: str | None) -> None:
    """Install wheels the manifest names (the job's local packages, nbburst's) and mark each one done."""
    venv = os.path.join(base, "venv")
    paths = [fetch_wheel(base, bucket, prefix, w) for w in wheels]
    if install_wheels(uv, os.path.join(venv, "bin", "python"), paths):
        die("could not install " + ", ".join(w["file"] for w in wheels) + " (see above)")
    with open(os.path.join(venv, ".nbburst-local"), "a") as f:
        f.write("".join(w["sha256"] + "\n" for w in wheels))


def main(base: str) -> None:
    url = md("instance/attributes/nbburst-job-url")
    secret_name = md("instance/attributes/nbburst-key-secret")
    if not url or not secret_name:
        die("instance metadata has no nbburst-job-url/nbburst-key-secret: this VM was not made by nbburst")
    if not url.startswith("gs://") or "/jobs/" not in url:
        die(f"job URL {url!r} is not gs://BUCKET/PREFIX/jobs/ID")
    with open(os.path.join(base, "job-url"), "w") as f:
        f.write(url)
    try:
        key_hex = secret(secret_name, say).decode()
    except Unreadable as exc:
        die(str(exc))
    keep_key(base, key_hex)
    use_package_index(base, say)
    root, _, job_id = url.rstrip("/").rpartition("/jobs/")
    bucket_name, prefix = split_gs(root)
    bucket = Bucket(bucket_name, say)
    say(f"job {url}")
    try:
        manifest = read_manifest(bucket, prefix, job_id, key_hex)
    except Unreadable as exc:
        die(f"{exc} (a wrong job URL, or the job was deleted)" if "does not exist" in str(exc) else str(exc))
    env = manifest.get("env") or {}
    venv = os.path.join(base, "venv")
    python = os.path.join(venv, "bin", "python")
    nbburst = manifest["wheel"]
    have_wheel = read_text(os.path.join(venv, ".nbburst-wheel")).strip()
    ready = bool(have_wheel) and os.path.exists(python)
    if ready and have_wheel == nbburst["sha256"]:
        say(f"nbburst {manifest['version']} already installed")
    uv = None
    try:
        if not ready:
            shutil.rmtree(venv, ignore_errors=True)  # a boot that ended half way
            if python_minor() == manifest["python"] and has_distributions(env.get("machine") or []):
                shared_venv(venv)
                say("venv created (it sees the image's packages)")
            else:
                uv = uv_binary(base, say)
                build(base, bucket, prefix, env, manifest.get("requirements") or {}, uv)
        done = set(read_text(os.path.join(venv, ".nbburst-local")).split())
        local = [w for w in env.get("wheels") or [] if w["sha256"] not in done]
        todo = local + ([] if have_wheel == nbburst["sha256"] and ready else [nbburst])
        if not todo:
            return
        uv = uv or shutil.which("uv")  # the faster installer when there is one, else the venv's pip, else fetch uv
        if uv is None and not has_pip(python):
            uv = uv_binary(base, say)
        install_job_wheels(base, bucket, prefix, todo, uv)
    except Unreadable as exc:
        die(str(exc))
    except subprocess.CalledProcessError as exc:
        die(f"{exc.cmd[0]} failed with exit status {exc.returncode}")
    if local:
        say("local packages installed: " + ", ".join(w["name"] for w in local))
    if nbburst in todo:
        with open(os.path.join(venv, ".nbburst-wheel"), "w") as f:
            f.write(nbburst["sha256"])
        say(f"nbburst {manifest['version']} installed")


if __name__ == "__main__":
    main(sys.argv[1])
