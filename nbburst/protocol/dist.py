"""The exact nbburst of the client, shipped to the machine, and the packages the job needs.

A VM must run the same nbburst as the notebook (the job protocol and the
pickles of nbburst's own objects depend on it), so the client builds a wheel
from the files of the nbburst package it is running (editable installs
included), stores it once, content-addressed, as ``blobs/<sha256>``, and
writes ``jobs/<id>/dist/manifest.json`` naming it. The build is
deterministic (sorted entries, fixed timestamps): unchanged files give the
same bytes, the same digest, and no upload.

The manifest also lists ``requirements``: the distributions the job is
likely to need (those of the modules the notebook has imported and the cell
imports, with their dependencies) at the notebook's versions; the agent
installs the ones that differ on the machine (:mod:`nbburst.agent.envsync`).
The manifest is signed with the job key (HMAC-SHA256), which the startup
script and the agent check before installing anything from it.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import hmac
import io
import json
import re
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..store import Store
from . import payload, signing
from .env import normalise
from .job import BLOBS_PREFIX, JobLayout, blob_key

#: The manifest of a job's machine software, relative to the job folder.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__", "labextension", ".pytest_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")

#: Never installed on the machine to match the notebook: build tools, the kernel and its transport,
#: Jupyter itself, and nbburst (which comes as the wheel).
INFRASTRUCTURE = frozenset(
    {
        "nbburst",
        "pip",
        "setuptools",
        "wheel",
        "distribute",
        "ipykernel",
        "jupyter-client",
        "jupyter-core",
        "jupyter-server",
        "jupyterlab",
        "jupyterlab-server",
        "notebook",
        "nbclient",
        "nbformat",
        "nbconvert",
        "pyzmq",
        "tornado",
        "debugpy",
        "comm",
        "nest-asyncio",
        "appnope",
        "psutil",
        "platformdirs",
        "ipywidgets",
        "widgetsnbextension",
        "jupyterlab-widgets",
        "pytest",
        "pluggy",
        "iniconfig",
        "matplotlib-inline",
        "prompt-toolkit",
        "pexpect",
        "ptyprocess",
        "wcwidth",
        "decorator",
        "jedi",
        "parso",
    }
)


def _package_files(root: Path) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS for part in rel.parts[:-1]) or not path.is_file():
            continue
        if path.name.endswith(_SKIP_SUFFIXES) or path.name.startswith(".") or path.name in _SKIP_DIRS:
            continue
        files.append(path)
    return files


def _fingerprint(files: list[Path]) -> tuple:
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata_text() -> str:
    try:
        text = metadata.distribution("nbburst").read_text("METADATA")
    except metadata.PackageNotFoundError:
        text = None
    if text and f"\nVersion: {__version__}\n" in text:
        return text
    return f"Metadata-Version: 2.1\nName: nbburst\nVersion: {__version__}\n"


#: The nbburst package folder (this module lives in ``nbburst/protocol``).
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=4)
def _build(fingerprint: tuple) -> tuple[str, bytes]:
    root = _PACKAGE_ROOT
    dist_info = f"nbburst-{__version__}.dist-info"
    entries: list[tuple[str, bytes]] = []
    for path in _package_files(root):
        entries.append(("nbburst/" + path.relative_to(root).as_posix(), path.read_bytes()))
    entries.append((f"{dist_info}/METADATA", _metadata_text().encode()))
    entries.append(
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: nbburst.protocol.dist\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    entries.append((f"{dist_info}/entry_points.txt", b"[console_scripts]\nnbburst = nbburst.ui.cli:main\n"))
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return f"nbburst-{__version__}-py3-none-any.whl", buf.getvalue()


def wheel() -> tuple[str, bytes]:
    """``(file name, bytes)`` of a wheel of the running nbburst (rebuilt only when its files change)."""
    return _build(_fingerprint(_package_files(_PACKAGE_ROOT)))


# -- what the job needs -------------------------------------------------------------------------


def imported_modules(code: str) -> set[str]:
    """Top-level modules a cell imports (IPython syntax that does not parse falls back to a regex)."""
    names: set[str] = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        for m in re.finditer(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w., ]+))", code, re.M):
            for part in (m.group(1) or m.group(2) or "").split(","):
                if part.strip():
                    names.add(part.strip().split()[0].split(".")[0])
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _local_install(dist: metadata.Distribution) -> bool:
    """Installed from a local folder or file (editable, ``pip install .``): not on an index."""
    try:
        raw = dist.read_text("direct_url.json")
    except Exception:
        return False
    if not raw:
        return False
    try:
        info = json.loads(raw)
    except ValueError:
        return False
    return str(info.get("url", "")).startswith("file:") and "vcs_info" not in info


def requirements(code: str = "", modules: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """``{distribution: version}`` the job is likely to need: the distributions of the modules this
    process has imported, the cell imports, or the job names, plus their installed dependencies."""
    tops = {m.split(".")[0] for m in list(sys.modules)} | imported_modules(code) | {m.split(".")[0] for m in modules}
    tops = {t for t in tops if t and not t.startswith("_") and t not in sys.stdlib_module_names}
    mapping, installed = _index(_paths_fingerprint())
    todo = [d for t in tops for d in mapping.get(t, [])]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in INFRASTRUCTURE or name not in installed:
            continue
        seen.add(name)
        todo.extend(installed[name][1])
    return {name: installed[name][0] for name in sorted(seen) if not installed[name][2]}


def _paths_fingerprint() -> tuple:
    """Changes when a distribution is installed or removed (its folder's modification time)."""
    out = []
    for path in sys.path:
        try:
            out.append((path, Path(path).stat().st_mtime_ns))
        except OSError:
            continue
    return tuple(out)


@functools.lru_cache(maxsize=2)
def _index(_fingerprint: tuple) -> tuple[dict[str, list[str]], dict[str, tuple[str, list[str], bool]]]:
    """(top-level module -> distributions, distribution -> (version, dependencies, installed locally))."""
    mapping = {top: [normalise(d) for d in dists] for top, dists in metadata.packages_distributions().items()}
    installed: dict[str, tuple[str, list[str], bool]] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if not name or normalise(name) in installed:
            continue
        deps = []
        for req in dist.requires or []:
            m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if m and "extra ==" not in req:
                deps.append(normalise(m.group(1)))
        installed[normalise(name)] = (dist.version, deps, _local_install(dist))
    return mapping, installed


# -- the manifest ---------------------------------------------------------------------------------


def _signed_body(manifest: dict[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_manifest(key: bytes, manifest: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, "signature": signing.sign_text(key, _signed_body(manifest))}


def verify_manifest(key: bytes, manifest: dict[str, Any]) -> bool:
    return hmac.compare_digest(signing.sign_text(key, _signed_body(manifest)), str(manifest.get("signature", "")))


def wheel_info() -> dict[str, Any]:
    """The wheel of the running nbburst: file name, blob key, the SHA-256 a VM checks, size (no upload)."""
    file_name, data = wheel()
    return {
        "file": file_name,
        "blob": blob_key(payload.digest_bytes(data)),
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }


def upload_wheel(store: Store) -> dict[str, Any]:
    """Put the wheel in the Store's blobs (once per Store); returns :func:`wheel_info`."""
    _name, data = wheel()
    store.put_addressed(BLOBS_PREFIX, lambda: [data], lambda: payload.digest_bytes(data))
    return wheel_info()


def publish(
    store: Store,
    layout: JobLayout,
    key: bytes,
    requirements_: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Upload the wheel (once per Store) and write the job's signed ``dist/manifest.json``.

    Keeps an existing manifest (a relaunch must install what the first attempt did)."""
    existing = layout.dist_manifest
    if store.exists(existing):
        return json.loads(store.get(existing))
    manifest = sign_manifest(
        key,
        {
            "version": __version__,
            "python": ".".join(map(str, sys.version_info[:2])),
            "wheel": upload_wheel(store),
            "requirements": dict(requirements_ or {}),
        },
    )
    store.put(existing, json.dumps(manifest, sort_keys=True, indent=1).encode())
    return manifest
