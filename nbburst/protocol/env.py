"""The notebook's environment, recorded so the machine can match it or refuse.

Pickles only load where the same classes exist, so the machine must run the
same Python minor version and the same versions of the packages the job uses.

How a machine gets each distribution the notebook has (:func:`resolve`), the
rules ``%%burst`` on a stock image and ``nbburst image build`` share:

* from the package index at the notebook's version (``name==version``);
* a local version that names a PyTorch build (``2.3.1+cu121``, ``+cpu``,
  ``+rocm6.0``) from PyTorch's own index for that build; any other local
  version (``1.2+local``) without its local part, which is all PyPI has;
* installed from a version-control or archive URL: from that URL;
* installed from a folder or local file (editable or not): it travels as a
  wheel built from its files (:class:`Local`, see :mod:`nbburst.protocol.dist`);
* a distribution no package index has (conda's own, Colab's): :class:`Unavailable`,
  listed, and refused before launch only when the cell needs it;
* installed by conda (Workbench's ``/opt/conda``, Anaconda, Miniforge): as from the
  package index, whatever its ``direct_url.json`` says: conda-forge builds record the
  build machine's folder (``file:///home/conda/feedstock_root/...``) there.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any


def installed() -> dict[str, str]:
    """Normalised name -> version of every distribution installed now (read afresh each call)."""
    packages: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            packages.setdefault(normalise(name), dist.version)
    return packages


@functools.lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    """Python version, platform and every installed distribution (computed once per process)."""
    packages = installed()
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": sys.platform,
        "machine": platform.machine(),
        "packages": dict(sorted(packages.items())),
    }


@functools.lru_cache(maxsize=1)
def manifest_json() -> bytes:
    """:func:`manifest` as every job's ``env.json`` holds it (encoded once per process: a session's cells each
    write it)."""
    return json.dumps(manifest(), indent=1).encode()


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_mismatch(wanted: dict[str, Any]) -> str | None:
    """Why this interpreter cannot load the job's pickles, or None."""
    have = platform.python_version().split(".")[:2]
    want = str(wanted.get("python", "")).split(".")[:2]
    if want and have != want:
        return (
            f"the notebook runs Python {'.'.join(want)} but this machine has Python {'.'.join(have)}; "
            "pickles cannot move between Python minor versions. Boot a stock image (the default) so that the "
            f"machine installs Python {'.'.join(want)}, or an image with Python {'.'.join(want)} "
            "(--image / --image-family, e.g. one built by `nbburst image build`)."
        )
    if wanted.get("implementation", sys.implementation.name) != sys.implementation.name:
        return f"the notebook runs {wanted['implementation']} but this machine runs {sys.implementation.name}"
    return None


def package_differences(wanted: dict[str, str], have: dict[str, str] | None = None) -> dict[str, str]:
    """Distributions whose version differs here or that are missing: name -> wanted version."""
    have = installed() if have is None else have
    return {name: version for name, version in sorted(wanted.items()) if have.get(normalise(name)) != version}


# -- what each distribution is, and how a machine gets it -------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """A distribution of this Python, as the rules below need it."""

    name: str  # normalised
    version: str
    requires: tuple[str, ...]  # normalised names of its dependencies (extras left out)
    origin: str  # "index", "editable", "folder" (pip install DIR), "file" (a local archive), "vcs" or "url"
    url: str = ""  # the direct URL it was installed from (PEP 610), for vcs and url
    installer: str = ""  # the INSTALLER record: pip, uv, conda...


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _origin(dist: metadata.Distribution) -> tuple[str, str]:
    """(origin, URL) from the distribution's ``direct_url.json`` (PEP 610)."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except (ValueError, OSError):
        return "url", ""
    if not isinstance(info, dict):
        return "index", ""
    url = str(info.get("url", ""))
    if "vcs_info" in info:
        vcs = info["vcs_info"]
        return "vcs", f"{vcs.get('vcs', 'git')}+{url}@{vcs.get('commit_id') or vcs.get('requested_revision', '')}"
    if url.startswith("file:"):
        if "dir_info" in info:
            return ("editable" if info["dir_info"].get("editable") else "folder"), url
        return "file", url
    return "url", url


#: The machines run Linux: a dependency marked for another system is not needed there.
_LINUX = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}


def _on_linux(requirement: str) -> bool:
    """Whether a dependency (a line of ``Requires-Dist``) applies on a Linux machine, outside any extra."""
    _, _, marker = requirement.partition(";")
    if not marker.strip():
        return True
    if "extra" in marker:
        return False
    try:
        from packaging.markers import Marker
    except ImportError:  # no way to read it: keep the dependency
        return True
    try:
        return Marker(marker).evaluate(_LINUX)
    except Exception:
        return True


#: The names importlib.metadata finds a distribution's metadata under, in a folder on ``sys.path``.
_METADATA = (".dist-info", ".egg-info")
#: Folder -> (its modification time, its metadata entries then): listed again only when the time moves.
_listed: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {}


def _paths_fingerprint() -> tuple:
    """Changes when a distribution is installed or removed: the metadata entries of each folder on ``sys.path``
    and their modification times. A kernel's ``sys.path`` holds the notebook's own folder, whose time moves
    with every file a cell writes there; such a file changes no distribution, and reading them all again
    would cost the next cell's submission a scan of every installed package."""
    out = []
    for path in sys.path:
        folder = os.path.abspath(path)  # "" is the working folder, wherever it is now
        try:
            moved = os.stat(folder).st_mtime_ns
        except OSError:
            continue
        listed = _listed.get(folder)
        if listed is None or listed[0] != moved:
            listed = _listed[folder] = (moved, _metadata_entries(folder))
        out.append((path, listed[1]))
    return tuple(out)


def _metadata_entries(folder: str) -> tuple[tuple[str, int], ...]:
    """The distributions' metadata in ``folder`` (an egg or zip on ``sys.path``: the file itself), with times."""
    try:
        with os.scandir(folder) as entries:
            found = [(e.name, e.stat().st_mtime_ns) for e in entries if e.name.lower().endswith(_METADATA)]
    except NotADirectoryError:
        return ((folder, os.stat(folder).st_mtime_ns),)
    except OSError:
        return ()
    return tuple(sorted(found))


@functools.lru_cache(maxsize=2)
def _distributions(_fingerprint: tuple) -> dict[str, Installed]:
    out: dict[str, Installed] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if not name or normalise(name) in out:
            continue
        deps = [normalise(m.group(1)) for req in dist.requires or [] if (m := _REQ_NAME.match(req)) and _on_linux(req)]
        origin, url = _origin(dist)
        installer = (dist.read_text("INSTALLER") or "").strip()
        out[normalise(name)] = Installed(normalise(name), dist.version, tuple(deps), origin, url, installer)
    return out


def distributions() -> dict[str, Installed]:
    """Every distribution of this Python by normalised name (read again when one is installed or removed)."""
    return _distributions(_paths_fingerprint())


@functools.lru_cache(maxsize=2)
def _module_owners(_fingerprint: tuple) -> dict[str, list[str]]:
    return {top: [normalise(d) for d in dists] for top, dists in metadata.packages_distributions().items()}


def module_owners() -> dict[str, list[str]]:
    """Top-level module name -> the normalised names of the distributions that hold it."""
    return _module_owners(_paths_fingerprint())


def closure(
    names: set[str] | list[str], installed: dict[str, Installed], skip: frozenset[str] = frozenset()
) -> set[str]:
    """``names`` and their dependencies, as far as they are installed here, leaving out ``skip``."""
    seen: set[str] = set()
    todo = [normalise(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen or name in skip or name not in installed:
            continue
        seen.add(name)
        todo.extend(installed[name].requires)
    return seen


#: Distributions no package index has: conda's own tools and Colab's runtime.
NOT_ON_PYPI: dict[str, str] = {
    **{
        name: "a conda package: no package index has it"
        for name in (
            "conda",
            "conda-build",
            "conda-content-trust",
            "conda-libmamba-solver",
            "conda-package-handling",
            "conda-package-streaming",
            "conda-index",
            "conda-token",
            "libmambapy",
            "menuinst",
            "anaconda-navigator",
            "navigator-updater",
        )
    },
    "google-colab": "Colab's own runtime: it exists only on Colab",
}
#: Where PyTorch publishes the builds its local versions name (``+cu121`` -> ``.../whl/cu121``).
PYTORCH_INDEX = "https://download.pytorch.org/whl/"
_PYTORCH_BUILD = re.compile(r"^(?:cu\d+|cpu|rocm\d+(?:\.\d+)*|xpu)$")


@dataclass(frozen=True)
class Pin:
    """A distribution the machine installs: ``requirement`` (from ``index`` when it is not the default one),
    ending up at ``version``; ``note`` says how that differs from the notebook's."""

    name: str
    version: str
    requirement: str
    index: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Local:
    """A distribution installed here from a folder or a local file: it travels as a wheel of its files."""

    name: str
    version: str
    origin: str


@dataclass(frozen=True)
class Unavailable:
    """A distribution the machine cannot have, and why."""

    name: str
    version: str
    why: str


def resolve(name: str, version: str, info: Installed | None = None) -> Pin | Local | Unavailable:
    """How a machine gets ``name`` at ``version`` (``info``: what this Python says about it, if it has it)."""
    name = normalise(name)
    if name in NOT_ON_PYPI:
        return Unavailable(name, version, NOT_ON_PYPI[name])
    if info is not None and info.installer == "conda" and info.origin != "editable":
        info = None  # conda built it from the project's release (its record names conda's build folder)
    if info is not None and info.origin in ("editable", "folder", "file"):
        return Local(name, version, info.origin)
    if info is not None and info.origin in ("vcs", "url") and info.url:
        return Pin(name, version, f"{name} @ {info.url}")
    public, _, local = version.partition("+")
    if local and _PYTORCH_BUILD.match(local):
        index = PYTORCH_INDEX + local
        return Pin(name, version, f"{name}=={version}", index, f"from {index}")
    if local:
        return Pin(name, public, f"{name}=={public}", None, f"{public} from the package index (it has no +{local})")
    return Pin(name, version, f"{name}=={version}")


def install_groups(pins: list[Pin]) -> list[dict[str, Any]]:
    """The pins as installer runs: one per package index (the default one first), each with its
    ``requirements`` (``name``, ``requirement``), in a stable order."""
    groups: dict[str | None, list[dict[str, str]]] = {}
    for pin in sorted(pins, key=lambda p: p.name):
        groups.setdefault(pin.index, []).append({"name": pin.name, "requirement": pin.requirement})
    return [
        {"index": index, "requirements": groups[index]} for index in sorted(groups, key=lambda i: (i is not None, i))
    ]


def environment_hash(python: str, platform_: str, groups: list[dict[str, Any]]) -> str:
    """The key of a built environment: Python minor version, platform and what was installed, from where."""
    body = json.dumps({"format": 1, "python": python, "platform": platform_, "groups": groups}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:32]
