"""What the programs a VM runs before nbburst is installed there share (bootstrap.py, bake.py).

They run with the image's own ``python3``, whatever its version, and need nothing but its standard library
and the image's standard tools (tar, gzip, cp): objects of the bucket are read through Cloud Storage's JSON
API with the VM's access token from the metadata server, and packages are installed with uv, which is
fetched from the package index when the image lacks it (uv also installs a standalone Python when the
image's is not the notebook's minor version). The startup script writes this file beside them, so each
finds it with ``import vmlib``; prelude.sh's ``vm_env`` puts uv, its cache and its Pythons under the VM's
nbburst folder.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import platform
import random
import re
import shutil
import site
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from typing import Any, NoReturn

#: The Python program that prints a venv's distributions as JSON (name -> version).
_LIST = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))"
)


class Console:
    """Lines ``<tag>: <message> t=<epoch>`` on the serial console (the client and bench/launch.py read them)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def say(self, message: str) -> None:
        print(f"{self.tag}: {message} t={time.time():.3f}", flush=True)

    def die(self, message: str) -> NoReturn:
        self.say("ERROR: " + message)
        sys.exit(1)


#: How long a read of the bucket is retried (429, 5xx, a dropped connection), with exponential backoff and
#: jitter up to RETRY_MAX_DELAY: Cloud Storage's advice, and google-api-core's default deadline.
RETRY_SECONDS = 120.0
RETRY_MAX_DELAY = 32.0
#: How long a refusal that may be access still propagating is retried. The client grants the VM's account the
#: job key's secret right before it makes the VM (and `nbburst setup` the bucket, maybe minutes before): IAM
#: changes "typically propagate in 2 minutes, but could potentially take 7 minutes or longer"
#: (https://cloud.google.com/iam/docs/access-change-propagation), Cloud Storage's likewise
#: (https://cloud.google.com/storage/docs/consistency).
IAM_WAIT_SECONDS = 600.0
#: The environment variable that shortens that wait on an emulated VM (a test of a VM that never gets access).
IAM_WAIT_ENV = "NBBURST_IAM_WAIT_SECONDS"
#: What the console line of a VM that waits for access starts with (the client reads it: machines.py).
IAM_WAIT = "waiting for IAM"


class IamWait:
    """Retries of requests refused while access granted moments ago may still be propagating: exponential
    backoff with jitter up to RETRY_MAX_DELAY, for ``seconds`` from the first refusal, each retry said on the
    console (so that the client, and whoever reads the console, know the VM waits rather than failed)."""

    def __init__(self, what: str, say: Any, seconds: float | None = None) -> None:
        """``seconds``: how long to wait; by default ``$NBBURST_IAM_WAIT_SECONDS``, else IAM_WAIT_SECONDS."""
        if seconds is None:
            seconds = float(os.environ.get(IAM_WAIT_ENV) or IAM_WAIT_SECONDS)
        self.what, self.say, self.seconds = what, say, seconds
        self.started: float | None = None
        self.delay = 1.0

    def again(self, problem: str) -> bool:
        """After a refusal (``problem``): sleep and True while the wait lasts, else False."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        if now + self.delay > self.started + self.seconds:
            return False
        self.say(
            f"{IAM_WAIT}: {self.what} was refused ({problem}); access granted at launch can take minutes to reach "
            f"this VM: retrying for up to {self.seconds / 60:g} min ({now - self.started:.0f} s so far)"
        )
        time.sleep(self.delay * random.uniform(0.5, 1.0))
        self.delay = min(self.delay * 2, RETRY_MAX_DELAY)
        return True

    def waited(self) -> str:
        """What an error message adds once this has waited: how long."""
        return "" if self.started is None else f" (waited {time.monotonic() - self.started:.0f} s for IAM)"


class Unreadable(Exception):
    """An object of the bucket (or of the package index) could not be read; the message says why."""


def md(path: str, default: str | None = None) -> str | None:
    """The metadata server's value at ``path``, ``default`` when it has none. Retried for about 30 s: the
    server may not answer in the first seconds of a boot."""
    host = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    req = urllib.request.Request(f"http://{host}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"})
    for _ in range(30):
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return default
        except OSError:
            pass
        time.sleep(1)
    return default


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(cmd: list[str], **kwargs: Any) -> int:
    """Run ``cmd`` with its output on the serial console; its exit status."""
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, **kwargs).returncode


# -- Google's APIs, as the VM's service account -----------------------------------------------------------


def access_token() -> tuple[str, float]:
    """(the VM's service-account access token from the metadata server, when to ask for a new one)."""
    raw = md("instance/service-accounts/default/token")
    if raw is None:
        raise Unreadable("the metadata server gave no access token for the VM's service account")
    token = json.loads(raw)
    return token["access_token"], time.time() + int(token.get("expires_in", 300)) - 60


def secret(name: str, say: Any, wait_s: float | None = None) -> bytes:
    """The Secret Manager secret version ``name`` (``projects/P/secrets/ID/versions/N``; of a secret,
    ``projects/P/secrets/ID``, its latest version), read through the REST API (``$NBBURST_SECRETMANAGER_ENDPOINT``
    names an emulator) with the VM's token.

    By number, because a version read by number right after it was added is strongly consistent and ``latest``
    is not ("this doesn't apply when you access a secret version using aliases or latest",
    https://cloud.google.com/secret-manager/docs/reference/consistency). 403 and 404 are retried for ``wait_s``
    seconds (:class:`IamWait`'s default when None): the VM's account was granted the secret a moment ago."""
    endpoint = (os.environ.get("NBBURST_SECRETMANAGER_ENDPOINT") or "https://secretmanager.googleapis.com").rstrip("/")
    version = name if "/versions/" in name else name + "/versions/latest"
    url = f"{endpoint}/v1/{urllib.parse.quote(version)}:access"
    what = f"reading the job key from Secret Manager ({version})"
    waiting, attempt = IamWait(what, say, wait_s), 0
    while True:
        request = urllib.request.Request(url, headers={"Authorization": "Bearer " + access_token()[0]})
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return base64.b64decode(json.loads(resp.read())["payload"]["data"])
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 404) and waiting.again(f"HTTP {exc.code}"):
                continue
            if exc.code in (401, 403, 404):
                raise Unreadable(
                    f"cannot read the job key from Secret Manager ({version}): HTTP {exc.code}{waiting.waited()}; "
                    "the VM's service account needs roles/secretmanager.secretAccessor on it (the client grants it "
                    "at launch), and the secret is deleted once the job has ended"
                ) from None
            if exc.code < 500 and exc.code != 429 or attempt == 3:
                raise Unreadable(f"cannot read the job key from Secret Manager ({version}): HTTP {exc.code}") from None
        except (OSError, ValueError, KeyError) as exc:
            if attempt == 3:
                raise Unreadable(f"cannot read the job key from Secret Manager ({version}): {exc}") from None
        time.sleep(1 + 2 * attempt)
        attempt += 1


# -- the bucket -----------------------------------------------------------------------------------------


class Bucket:
    """Objects of one bucket through Cloud Storage's JSON API, as the VM's service account (anonymous
    against an emulator: ``$STORAGE_EMULATOR_HOST``)."""

    def __init__(self, name: str, say: Any = print) -> None:
        """``say``: where a wait for access to the bucket is said (the console)."""
        self.name = name
        self.say = say
        host = os.environ.get("STORAGE_EMULATOR_HOST", "")
        if host and "://" not in host:
            host = "http://" + host
        self.endpoint = host.rstrip("/") or "https://storage.googleapis.com"
        self._token: tuple[str, float] | None = None

    def _headers(self) -> dict[str, str]:
        if self._token is None or self._token[1] < time.time():
            self._token = access_token()
        return {"Authorization": "Bearer " + self._token[0]}

    def _open(self, name: str) -> Any:
        quoted = urllib.parse.quote(name, safe="")
        url = f"{self.endpoint}/storage/v1/b/{urllib.parse.quote(self.name, safe='')}/o/{quoted}?alt=media"
        where = f"gs://{self.name}/{name}"
        deadline, delay = time.monotonic() + RETRY_SECONDS, 1.0
        waiting = IamWait(f"reading {where}", self.say)  # `nbburst setup` may have granted the bucket just now
        while True:
            try:
                return urllib.request.urlopen(urllib.request.Request(url, headers=self._headers()), timeout=120)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise Unreadable(f"cannot read {where}: it does not exist") from None
                if exc.code == 403 and waiting.again("HTTP 403"):
                    continue
                if exc.code in (401, 403):
                    raise Unreadable(
                        f"cannot read {where}: permission denied ({exc.code}){waiting.waited()}; the VM's service "
                        f"account needs read/write access to gs://{self.name}"
                    ) from None
                if exc.code < 500 and exc.code != 429:
                    raise Unreadable(f"cannot read {where}: HTTP {exc.code}") from None
                problem = f"HTTP {exc.code}"
            except OSError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + delay > deadline:
                raise Unreadable(f"cannot read {where}: {problem} (retried for {RETRY_SECONDS:g} s)")
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, RETRY_MAX_DELAY)

    def read(self, name: str) -> bytes:
        with self._open(name) as resp:
            return resp.read()

    def download(self, name: str, path: str, sha256: str) -> int:
        """Write the object ``name`` to ``path`` and check its SHA-256; its size."""
        digest, size = hashlib.sha256(), 0
        with self._open(name) as resp, open(path + ".part", "wb") as out:
            while True:
                chunk = resp.read(8 << 20)
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        if digest.hexdigest() != sha256:
            os.remove(path + ".part")
            raise Unreadable(f"gs://{self.name}/{name} does not match its SHA-256; refusing to use it")
        os.replace(path + ".part", path)
        return size


def split_gs(url: str) -> tuple[str, str]:
    """``gs://BUCKET/PREFIX`` -> (BUCKET, ``PREFIX/``, or "" at the bucket's top)."""
    bucket, _, prefix = url[len("gs://") :].partition("/")
    prefix = prefix.strip("/")
    return bucket, prefix + "/" if prefix else ""


# -- uv -------------------------------------------------------------------------------------------------


def package_index() -> str:
    """The package index uv uses (``$UV_DEFAULT_INDEX``, else PyPI)."""
    return (os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or "https://pypi.org/simple").rstrip(
        "/"
    )


def use_package_index(base: str, say: Any) -> str:
    """The package index the instance metadata names (c.NBBurst.package_index: a VM without an external IP
    reaches PyPI only through Cloud NAT, or a mirror), made uv's and pip's for this program and what it runs,
    and left in ``BASE/package-index`` for the agent startup.sh starts; "" when it names none."""
    index = (md("instance/attributes/nbburst-package-index", "") or "").strip()
    if index:
        os.environ["UV_DEFAULT_INDEX"] = os.environ["PIP_INDEX_URL"] = index
        where = urllib.parse.urlsplit(index)
        say(f"packages from the index at {where.hostname}{where.path}")  # a mirror's URL may carry credentials
    with open(os.path.join(base, "package-index"), "w") as f:
        f.write(index)
    return index


def uv_binary(base: str, say: Any) -> str:
    """The uv to use: the image's, or one fetched before (``BASE/bin/uv``), else the newest uv wheel for this
    machine from the package index, checked against the index's SHA-256."""
    found = shutil.which("uv")
    if found:
        return found
    index = package_index()
    t0 = time.time()
    req = urllib.request.Request(f"{index}/uv/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            files = json.loads(resp.read()).get("files", [])
    except (OSError, ValueError) as exc:
        raise Unreadable(f"cannot list uv on {index}: {exc}") from None
    arch, best = platform.machine(), None
    for entry in files:
        m = re.match(r"^uv-(\d+(?:\.\d+)*)-py3-none-(.+)\.whl$", entry.get("filename", ""))
        if not m or entry.get("yanked"):
            continue
        if not any(t.startswith("manylinux") and t.endswith("_" + arch) for t in m.group(2).split(".")):
            continue
        version = tuple(int(x) for x in m.group(1).split("."))
        if best is None or version > best[0]:
            best = (version, entry)
    if best is None:
        raise Unreadable(f"{index} has no uv wheel for Linux {arch}")
    url = urllib.parse.urljoin(f"{index}/uv/", best[1]["url"])
    try:
        with urllib.request.urlopen(url, timeout=300) as resp:
            data = resp.read()
    except OSError as exc:
        raise Unreadable(f"cannot download {url}: {exc}") from None
    want = (best[1].get("hashes") or {}).get("sha256")
    if want and hashlib.sha256(data).hexdigest() != want:
        raise Unreadable(f"{url} does not match the index's SHA-256")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        member = next((n for n in zf.namelist() if re.search(r"\.data/scripts/uv$", n)), None)
        if member is None:
            raise Unreadable(f"{url} holds no uv program")
        os.makedirs(os.path.join(base, "bin"), exist_ok=True)
        path = os.path.join(base, "bin", "uv")
        with open(path + ".part", "wb") as out:
            out.write(zf.read(member))
    os.chmod(path + ".part", 0o755)
    os.replace(path + ".part", path)
    say(f"uv {'.'.join(map(str, best[0]))} fetched from {index} in {time.time() - t0:.1f} s")
    return path


def python_minor() -> str:
    """The minor version of the Python running this (the image's)."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def clean_venv(uv: str, venv: str, python: str, say: Any, existing: bool = False) -> None:
    """A venv of Python ``python`` (``3.11``) at ``venv`` that sees no other packages: made from the image's
    Python when it is that version, else from a standalone Python uv installs. ``existing``: keep the
    packages of a venv unpacked there (it is pointed at this machine's Python)."""
    cmd = [uv, "venv", "--no-config", "--quiet"] + (["--allow-existing"] if existing else [])
    if python_minor() == python:
        cmd += ["--python", sys.executable, venv]
    else:
        say(f"this image's Python is {python_minor()}; asking uv for Python {python}")
        if run([uv, "python", "install", "--no-config", "--no-bin", python]):
            raise Unreadable(f"uv could not install Python {python} (its messages are above)")
        cmd += ["--managed-python", "--python", python, venv]
    if run(cmd):
        raise Unreadable(f"uv could not make a venv of Python {python} at {venv}")


def shared_venv(venv: str) -> None:
    """A venv without pip at ``venv`` that also sees this Python's site-packages (an image that has the
    packages already)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    purelib = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(purelib, "_nbburst_image_site.pth"), "w") as f:
        f.write("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")


def has_distributions(names: list[str]) -> bool:
    """Whether this Python (the image's) has every one of these distributions (read, not imported)."""
    from importlib import metadata

    for name in names:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return False
    return True


def installed(python: str) -> dict[str, str]:
    """Normalised name -> version of every distribution ``python``'s environment has."""
    out = subprocess.run([python, "-c", _LIST], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode:
        return {}
    return {normalise(n): v for n, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def has_pip(python: str) -> bool:
    return subprocess.run([python, "-c", "import pip"], capture_output=True, stdin=subprocess.DEVNULL).returncode == 0


def uv_install(uv: str, python: str, args: list[str], index: str | None = None, quiet: bool = False) -> tuple[int, str]:
    """``uv pip install ARGS`` into ``python``'s environment (from ``index`` instead of the default one);
    (exit status, the last line it printed when ``quiet``)."""
    cmd = [uv, "pip", "install", "--no-config", "--python", python] + (["--index-url", index] if index else []) + args
    if not quiet:
        return run(cmd), ""
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    return proc.returncode, (lines[-1].strip()[:300] if lines else "")


def install_groups(uv: str, python: str, groups: list[dict[str, Any]], have: dict[str, str], wanted: dict[str, str]):
    """Install, without their dependencies, the requirements of ``groups`` (one uv run per package index) that
    ``have`` lacks at the ``wanted`` version; a run that fails is retried one package at a time so one package
    that cannot be had never blocks the others. Compiled to bytecode, so that neither this VM nor those that
    unpack the environment later compile at import. ``{name: why}`` of those that did not install."""
    failed: dict[str, str] = {}
    for group in groups:
        todo = [r for r in group["requirements"] if have.get(r["name"]) != wanted.get(r["name"])]
        if not todo:
            continue
        args = ["--no-deps", "--compile-bytecode"]
        status, _ = uv_install(uv, python, args + [r["requirement"] for r in todo], group.get("index"))
        if not status:
            continue
        for req in todo:
            status, last = uv_install(uv, python, args + [req["requirement"]], group.get("index"), quiet=True)
            if status:
                failed[req["name"]] = last or f"uv exit status {status}"
    return failed


def install_wheels(uv: str | None, python: str, paths: list[str]) -> int:
    """Install wheel files without their dependencies and without an index (with pip when ``uv`` is None);
    the installer's exit status."""
    if uv is None:
        pip = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet"]
        return run(pip + ["--disable-pip-version-check", "--no-warn-script-location"] + paths)
    return uv_install(uv, python, ["--no-deps", "--no-index", "--reinstall", "--compile-bytecode"] + paths)[0]


def save_wheel(base: str, name: str, data: bytes) -> str:
    """Write the wheel ``name`` to ``BASE/wheels``; its path."""
    os.makedirs(os.path.join(base, "wheels"), exist_ok=True)
    path = os.path.join(base, "wheels", name)
    with open(path, "wb") as f:
        f.write(data)
    return path
