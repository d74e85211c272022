"""The exact nbburst of the client, shipped to the machine, and the environment the job needs there.

A VM must run the same nbburst as the notebook (the job protocol and the
pickles of nbburst's own objects depend on it), so the client builds a wheel
from the files of the nbburst package it is running (editable installs
included), stores it once, content-addressed, as ``blobs/<sha256>``, and
writes ``jobs/<id>/dist/manifest.json`` naming it. The build is
deterministic (sorted entries, fixed timestamps): unchanged files give the
same bytes, the same digest, and no upload. The same builder makes wheels of
the notebook's local packages (installed from a folder, editable or not, or a
local file, and plain modules next to the notebook the cell imports), which
travel the same way.

The manifest also describes the job's environment (:class:`Environment`):
the distributions the job is likely to need (those of the modules the
notebook has imported and the cell imports, with their dependencies, and what
the agent itself imports) at the notebook's versions, resolved by
:func:`nbburst.protocol.env.resolve` into installer runs per package index;
the local wheels; what cannot be had; and a built environment of
``ROOT/envs/`` to start from (:mod:`nbburst.protocol.envcache`). ``requirements``
(name -> version) is what the agent compares the machine with
(:mod:`nbburst.agent.machine.envsync`). The manifest is signed with the job key
(HMAC-SHA256), which the bootstrap and the agent check before installing
anything from it.
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UsageError
from ..store import Store
from . import env, payload, signing, sources
from .env import Local, Pin, Unavailable, normalise
from .job import BLOBS_PREFIX, JobLayout, blob_key

_EPOCH = (1980, 1, 1, 0, 0, 0)
#: A local package bigger than this does not travel (it is data, not code).
MAX_LOCAL_BYTES = sources.MAX_BYTES

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
#: What the agent itself imports on a machine (with their dependencies, whatever INFRASTRUCTURE says).
MACHINE_REQUIRES = ("cloudpickle", "comm", "google-cloud-storage", "ipython", "requests", "tblib", "xxhash")


# -- wheels ---------------------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(entries: list[tuple[str, bytes]], dist_info: str, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """The bytes of a wheel holding ``entries`` (archive name, bytes), ``dist_info``'s METADATA and WHEEL among
    them; its RECORD is added. Deterministic: sorted entries, fixed timestamps. ``compression``: a zipfile
    method (ZIP_STORED for a wheel that never leaves this machine)."""
    entries = sorted(entries)
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    entries.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = (0o755 if "/scripts/" in name else 0o644) << 16
            info.compress_type = compression
            zf.writestr(info, data)
    return buf.getvalue()


def wheel_name(name: str, version: str, tag: str = "py3-none-any") -> str:
    """The file name of a wheel (PEP 491 escaping)."""
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version.replace('-', '_')}-{tag}.whl"


def _wheel_file(tag: str) -> bytes:
    return f"Wheel-Version: 1.0\nGenerator: nbburst.protocol.dist\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()


def _tree_entries(roots: Iterable[Path]) -> list[tuple[str, bytes]]:
    """Archive entries of packages (folders) and modules (files), named from their top-level name down."""
    entries = []
    for root in roots:
        if root.is_dir():
            entries += [
                (f"{root.name}/{p.relative_to(root).as_posix()}", p.read_bytes()) for p in sources.folder_files(root)
            ]
        else:
            entries.append((root.name, root.read_bytes()))
    return entries


def folder_wheel(name: str, version: str, roots: list[Path], metadata_text: str | None = None) -> tuple[str, bytes]:
    """A wheel of the packages and modules at ``roots`` as distribution ``name`` ``version``."""
    dist_info = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    entries = _tree_entries(roots)
    entries.append(
        (
            f"{dist_info}/METADATA",
            (metadata_text or f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").encode(),
        )
    )
    entries.append((f"{dist_info}/WHEEL", _wheel_file("py3-none-any")))
    return wheel_name(name, version), make_wheel(entries, dist_info)


def installed_wheel(name: str, compression: int = zipfile.ZIP_DEFLATED) -> tuple[str, bytes]:
    """A wheel of the installed distribution ``name`` made from the files its RECORD lists (bytecode, and the
    scripts an installer makes from its entry points, left out): what it was built from is not needed.
    Tagged as its WHEEL file says; ``compression`` as :func:`make_wheel` takes it."""
    dist = metadata.distribution(name)
    wheel_text = dist.read_text("WHEEL") or ""
    tags = [tag.split("-") for tag in re.findall(r"^Tag:\s*(\S+)", wheel_text, re.M)] or [["py3", "none", "any"]]
    tag = "-".join(
        ".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3)
    )  # py2-none-any + py3-... -> py2.py3-...
    generated = {e.name for e in dist.entry_points if e.group in ("console_scripts", "gui_scripts")}
    data = f"{re.sub(r'[-_.]+', '_', dist.metadata['Name'])}-{dist.version}.data/scripts/"
    entries, dist_info = [], ""
    for file in dist.files or []:
        parts = file.parts
        if "__pycache__" in parts or file.suffix in (".pyc", ".pyo"):
            continue
        if parts[0] == "..":  # outside site-packages: a script in bin/ is data of the wheel, the rest is not
            path = Path(dist.locate_file(file))
            if len(parts) > 1 and parts[-2] == "bin" and parts[-1] not in generated and path.is_file():
                entries.append((data + parts[-1], path.read_bytes()))
            continue
        if parts[0].endswith(".dist-info"):
            dist_info = parts[0]
            if parts[-1] in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                continue
        path = Path(dist.locate_file(file))
        if path.is_file():
            entries.append((file.as_posix(), path.read_bytes()))
    if not dist_info:
        raise ValueError(f"{name}: its RECORD lists no .dist-info folder")
    return wheel_name(dist.metadata["Name"], dist.version, tag), make_wheel(entries, dist_info, compression)


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


def _nbburst_files() -> list[Path]:
    return [p for p in sources.folder_files(_PACKAGE_ROOT) if "labextension" not in p.relative_to(_PACKAGE_ROOT).parts]


def _fingerprint(files: list[Path]) -> tuple:
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


@functools.lru_cache(maxsize=4)
def _build(fingerprint: tuple) -> tuple[str, bytes]:
    dist_info = f"nbburst-{__version__}.dist-info"
    entries = [("nbburst/" + p.relative_to(_PACKAGE_ROOT).as_posix(), p.read_bytes()) for p in _nbburst_files()]
    entries.append((f"{dist_info}/METADATA", _metadata_text().encode()))
    entries.append((f"{dist_info}/WHEEL", _wheel_file("py3-none-any")))
    entries.append((f"{dist_info}/entry_points.txt", b"[console_scripts]\nnbburst = nbburst.ui.cli:main\n"))
    return wheel_name("nbburst", __version__), make_wheel(entries, dist_info)


def wheel() -> tuple[str, bytes]:
    """``(file name, bytes)`` of a wheel of the running nbburst (rebuilt only when its files change)."""
    return _build(_fingerprint(_nbburst_files()))


# -- what the job needs -------------------------------------------------------------------------


def imported_names(code: str) -> set[str]:
    """Dotted names of the modules a cell imports (IPython syntax that does not parse falls back to a regex)."""
    names: set[str] = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        for m in re.finditer(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w., ]+))", code, re.M):
            for part in (m.group(1) or m.group(2) or "").split(","):
                if part.strip():
                    names.add(part.strip().split()[0])
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@functools.lru_cache(maxsize=256)
def _provides(dist_name: str, version: str) -> frozenset[str]:
    """Dotted names of the modules and packages a distribution's files hold."""
    try:
        files = metadata.distribution(dist_name).files or []
    except metadata.PackageNotFoundError:
        return frozenset()
    out = set()
    for f in files:
        if f.suffix not in (".py", ".so", ".pyd") or f.parts[0] == ".." or f.parts[0].endswith(".dist-info"):
            continue
        parts = list(f.parts)
        parts[-1] = parts[-1].split(".")[0]
        if parts[-1] == "__init__":
            parts.pop()
        out.add(".".join(parts))  # a module, or a package with an __init__ (not a namespace folder)
    return frozenset(out)


def _dists_of(names: set[str], mapping: dict[str, list[str]], installed: dict[str, env.Installed]) -> set[str]:
    """The distributions that hold these dotted module names. A top-level name several distributions share
    (a namespace such as ``google``) counts only for those that hold the submodules named."""
    found: set[str] = set()
    by_top: dict[str, set[str]] = {}
    for name in names:
        by_top.setdefault(name.split(".")[0], set()).add(name)
    for top, full in by_top.items():
        dists = mapping.get(top, [])
        if len(dists) <= 1:
            found.update(dists)
            continue
        for d in dists:
            provided = _provides(d, installed[d].version) if d in installed else frozenset()
            if any(n in provided for n in full if n != top):
                found.add(d)
    return found


def _module_names(code: str, modules: Iterable[str], kernel: bool) -> set[str]:
    names = imported_names(code) | set(modules)
    if kernel:
        names |= set(sys.modules)
    return {n for n in names if n and not n.startswith("_") and n.split(".")[0] not in sys.stdlib_module_names}


def requirements(code: str = "", modules: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """``{distribution: version}`` the job is likely to need: the distributions of the modules this
    process has imported, the cell imports, or the job names, plus their installed dependencies, and
    what the agent imports on the machine."""
    installed = env.distributions()
    mapping = env.module_owners()
    wanted = env.closure(_dists_of(_module_names(code, modules, True), mapping, installed), installed, INFRASTRUCTURE)
    return {**{name: installed[name].version for name in sorted(wanted)}, **machine_requirements()}


def machine_requirements() -> dict[str, str]:
    """``{distribution: version}`` of what the agent imports on a machine, with their dependencies, as installed
    here (whatever :data:`INFRASTRUCTURE` says: a clean environment has none of them)."""
    installed = env.distributions()
    wanted = env.closure(set(MACHINE_REQUIRES), installed, frozenset({"nbburst"}))
    return {name: installed[name].version for name in sorted(wanted)}


def cell_needs(code: str, modules: Iterable[str] = ()) -> set[str]:
    """The distributions the cell's own imports (and the modules the job names) need, with their dependencies."""
    installed = env.distributions()
    mapping = env.module_owners()
    return env.closure(_dists_of(_module_names(code, modules, False), mapping, installed), installed, INFRASTRUCTURE)


def _under(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def local_modules(code: str, modules: Iterable[str] = ()) -> dict[str, Path]:
    """Top-level modules the cell imports that no distribution holds and that live in the notebook's folder
    (the working directory): they travel as a wheel. ``{top-level name: folder or file}``."""
    here = Path.cwd().resolve()
    mapping = env.module_owners()
    out = {}
    for top in sorted({n.split(".")[0] for n in _module_names(code, modules, False)}):
        if top in mapping or top == "nbburst":
            continue
        root = sources.module_root(top)
        if root is not None and _under(root.resolve(), here):
            out[top] = root
    return out


def _editable_roots(name: str) -> list[Path]:
    """Where the packages of an editable distribution live: its top-level names, found without importing."""
    dist = metadata.distribution(name)
    tops = set((dist.read_text("top_level.txt") or "").split())
    tops |= {top for top, dists in env.module_owners().items() if name in dists}
    tops.add(re.sub(r"[-.]+", "_", name))
    roots = []
    for top in sorted(tops):
        root = sources.module_root(top) if top.isidentifier() else None
        if root is not None and not any(part in ("site-packages", "dist-packages") for part in root.parts):
            roots.append(root)
    return roots


def local_wheel(item: Local) -> tuple[str, bytes]:
    """The wheel a local distribution travels as: built from its source folders (editable) or repacked
    from its installed files. ValueError when there is nothing to ship, or too much."""
    if item.origin == "editable":
        roots = _editable_roots(item.name)
        if not roots:
            raise ValueError("its source folder was not found")
        size = sum(p.stat().st_size for r in roots for p in (sources.folder_files(r) if r.is_dir() else [r]))
        if size > MAX_LOCAL_BYTES:
            raise ValueError(f"its folders hold {size >> 20} MiB, more than {MAX_LOCAL_BYTES >> 20} MiB of code")
        return folder_wheel(item.name, item.version, roots, metadata.distribution(item.name).read_text("METADATA"))
    return installed_wheel(item.name)


# -- the environment ------------------------------------------------------------------------------


@dataclass
class Environment:
    """What a machine installs for a job, and what it cannot have."""

    python: str
    platform: str
    pins: list[Pin] = field(default_factory=list)
    local: list[Local] = field(default_factory=list)
    modules: dict[str, Path] = field(default_factory=dict)  # local modules that are not distributions
    unavailable: list[Unavailable] = field(default_factory=list)

    @property
    def groups(self) -> list[dict[str, Any]]:
        return env.install_groups(self.pins)

    @property
    def hash(self) -> str:
        return env.environment_hash(self.python, self.platform, self.groups)

    @property
    def packages(self) -> dict[str, str]:
        """name -> the version the machine ends up with (what the agent compares)."""
        return {p.name: p.version for p in [*self.pins, *self.local]}

    def refusal(self, needed: set[str]) -> str | None:
        """Why a job that needs ``needed`` distributions cannot run, naming each missing one and the fix."""
        missing = [u for u in self.unavailable if u.name in needed]
        if not missing:
            return None
        listed = "; ".join(f"{u.name}=={u.version} ({u.why})" for u in missing)
        return (
            f"the cell needs {listed}, which a Compute Engine VM cannot install. If a package index has the "
            "same code under another name, install that in the notebook (pip install NAME) so the VM gets it; "
            "or bake an image that has it (`nbburst image build --requirements FILE`, then --image-family)"
        )

    def summary(self) -> str:
        """One line: what is installed from where, what travels as wheels, what is left out."""
        parts = [f"{len(self.pins)} packages"]
        others = sorted({p.index for p in self.pins if p.index})
        if others:
            parts.append("from " + ", ".join(["the default index", *others]))
        local = [u.name for u in self.local] + list(self.modules)
        if local:
            parts.append("local, as wheels: " + ", ".join(local))
        if self.unavailable:
            parts.append("left out: " + ", ".join(f"{u.name} ({u.why})" for u in self.unavailable))
        return "; ".join(parts)


def environment(
    wanted: dict[str, str], python: str, platform_: str, code: str = "", modules: Iterable[str] = ()
) -> Environment:
    """Resolve ``wanted`` (name -> the notebook's version) by :func:`nbburst.protocol.env.resolve`, and find the
    local modules the cell imports."""
    installed = env.distributions()
    out = Environment(python, platform_, modules=local_modules(code, modules))
    for name, version in sorted(wanted.items()):
        item = env.resolve(name, version, installed.get(normalise(name)))
        if isinstance(item, Pin):
            out.pins.append(item)
        elif isinstance(item, Local):
            out.local.append(item)
        else:
            out.unavailable.append(item)
    return out


def check(environment_: Environment, code: str, modules: Iterable[str] = ()) -> None:
    """UsageError when the cell needs a distribution the machine cannot have."""
    problem = environment_.refusal(cell_needs(code, modules))
    if problem:
        raise UsageError(problem)


# -- the manifest ---------------------------------------------------------------------------------


def _signed_body(manifest: dict[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_manifest(key: bytes, manifest: dict[str, Any]) -> dict[str, Any]:
    """A JSON record with its ``signature`` (HMAC under ``key`` of its canonical form)."""
    return {**manifest, "signature": signing.sign_text(key, _signed_body(manifest))}


def verify_manifest(key: bytes, manifest: dict[str, Any]) -> bool:
    return hmac.compare_digest(signing.sign_text(key, _signed_body(manifest)), str(manifest.get("signature", "")))


def _put_wheel(store: Store, data: bytes) -> dict[str, Any]:
    """Put a wheel in the Store's blobs (once per content); its blob key, SHA-256 and size."""
    store.put_addressed(BLOBS_PREFIX, lambda: [data], lambda: payload.digest_bytes(data))
    return {"blob": blob_key(payload.digest_bytes(data)), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


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
    _put_wheel(store, wheel()[1])
    return wheel_info()


def upload_local(store: Store, environment_: Environment) -> list[dict[str, Any]]:
    """Build and store the wheels of the local packages; their entries of the manifest. A package whose wheel
    cannot be built moves to ``environment_.unavailable``."""
    out = []
    for item in list(environment_.local):
        try:
            file_name, data = local_wheel(item)
        except (ValueError, OSError, metadata.PackageNotFoundError) as exc:
            environment_.local.remove(item)
            environment_.unavailable.append(Unavailable(item.name, item.version, f"installed from a folder: {exc}"))
            continue
        out.append({"name": item.name, "file": file_name, **_put_wheel(store, data)})
    for top, root in environment_.modules.items():
        name = f"nbburst-local-{top.replace('_', '-').lower()}"
        file_name, data = folder_wheel(name, "0", [root])
        out.append({"name": normalise(name), "file": file_name, **_put_wheel(store, data)})
    return out


def publish(
    store: Store,
    layout: JobLayout,
    key: bytes,
    requirements_: dict[str, str] | None = None,
    environment_: Environment | None = None,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Upload the wheels (once per Store) and write the job's signed ``dist/manifest.json``.

    ``environment_`` (default: ``requirements_`` resolved, for an unknown platform) is what the machine
    installs; ``base`` the built environment of ``ROOT/envs/`` it starts from (see :mod:`.envcache`); a
    machine that builds anything more stores the result when the platform is known.
    Keeps an existing manifest (a relaunch must install what the first attempt did)."""
    existing = layout.dist_manifest
    if store.exists(existing):
        return json.loads(store.get(existing))
    python = ".".join(map(str, sys.version_info[:2]))
    environment_ = environment_ or environment(dict(requirements_ or {}), python, "")
    wheels = upload_local(store, environment_)
    manifest = sign_manifest(
        key,
        {
            "version": __version__,
            "python": python,
            "wheel": upload_wheel(store),
            "requirements": environment_.packages,
            "env": {
                "hash": environment_.hash,
                "python": environment_.python,
                "platform": environment_.platform,
                "groups": environment_.groups,
                "wheels": wheels,
                "unavailable": {u.name: u.why for u in environment_.unavailable},
                "machine": list(MACHINE_REQUIRES),
                "base": base,
                "store": bool(environment_.platform) and not (base or {}).get("complete"),
            },
        },
    )
    store.put(existing, json.dumps(manifest, sort_keys=True, indent=1).encode())
    return manifest
