"""The notebook's own modules, sent with a cell as files.

A notebook imports modules that no package installs: ``my_helpers.py`` beside
it, a package of the project's ``src/`` put on ``sys.path``. A machine has
neither the notebook's folder nor its ``sys.path`` (a Compute Engine VM has no
access to the laptop at all), so the files of every such module a cell may use
travel with it, in one content-addressed blob like its other inputs (unchanged
files are not uploaded again), and the machine puts them first on its
``sys.path`` before it loads anything. Functions and classes of these modules
travel by reference, as those of installed packages do: on the machine,
``my_helpers.Thing`` is the class of the objects that arrived, as in the
kernel.

A module counts when the cell imports it, when a notebook function it uses
imports it, when a value it reads is or holds something of it (a function, a
class, an instance, the module itself), and when one of those modules imports
it; whether the kernel imported it already or not. The ones the kernel had
imported are imported on the machine before the cell, quietly: the kernel
printed what their import prints when it imported them, in an earlier cell.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import io
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from . import imports, payload

#: More than this in one module's files is data, not code: the cell is refused, saying so.
MAX_BYTES = 64 << 20
#: Where, under the cell's working folder, the machine puts the files (nbburst's folder: never the cell's results).
FOLDER = os.path.join(".nbburst", "sources")


_SKIP_DIRS = {"__pycache__", "labextension", ".pytest_cache", ".git", ".ipynb_checkpoints"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def folder_files(root: Path) -> list[Path]:
    """The files of a package's folder that travel with it: no caches, compiled files or hidden folders."""
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]) or not path.is_file():
            continue
        if path.name.endswith(_SKIP_SUFFIXES) or path.name.startswith(".") or path.name in _SKIP_DIRS:
            continue
        files.append(path)
    return files


def module_root(top: str) -> Path | None:
    """The folder (package) or file (module) the top-level module ``top`` is found at, without importing it."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locations = list(spec.submodule_search_locations)
        return Path(locations[0]) if locations else None
    return Path(spec.origin) if spec.origin and os.path.isfile(spec.origin) else None


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def own_root(top: str) -> Path | None:
    """The file (module) or folder (package) of top-level module ``top`` if it is the notebook's own: found
    by the kernel, held by no installed distribution, outside the standard library and site-packages."""
    from . import env  # the kernel's side only: the machine never asks

    if not top.isidentifier() or top in sys.stdlib_module_names or top == "nbburst" or top in env.module_owners():
        return None
    module = sys.modules.get(top)
    if module is not None:  # where the kernel imported it from, whatever sys.path says now
        places = list(getattr(module, "__path__", None) or [])
        origin = places[0] if places else getattr(module, "__file__", None)
        root = Path(origin) if origin and os.path.exists(origin) else None
    else:
        root = module_root(top)
    if root is None or os.path.join(os.path.realpath(root), "").startswith(_installed_roots()):
        return None
    return root


def _files(top: str, root: Path) -> dict[str, Path]:
    """The files of a module as they sit on ``sys.path``: ``my_helpers.py``, ``pkg/__init__.py``..."""
    if root.is_file():
        return {root.name: root}
    return {f"{top}/{path.relative_to(root).as_posix()}": path for path in folder_files(root)}


def _imported_by(path: Path) -> frozenset[str]:
    """Top-level names of the absolute imports of a source file (anywhere in it: in functions too), parsed again
    only once the file changed: a cell's capture and its submission both ask, at every cell."""
    try:
        stamp = path.stat()
    except OSError:
        return frozenset()
    return _imports_in(str(path), stamp.st_mtime_ns, stamp.st_size)


@functools.lru_cache(maxsize=1024)
def _imports_in(path: str, _mtime_ns: int, _size: int) -> frozenset[str]:
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (SyntaxError, ValueError, OSError):
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.partition(".")[0])
    return frozenset(names)


def collect(modules: Iterable[str]) -> dict[str, Path]:
    """The files of the notebook's own modules among ``modules`` (dotted names) and of those they import,
    by their path on ``sys.path``. UsageError when one holds more than :data:`MAX_BYTES`."""
    found: dict[str, Path] = {}
    seen: set[str] = set()
    pending = sorted({name.partition(".")[0] for name in modules if name})
    while pending:
        top = pending.pop()
        if top in seen:
            continue
        seen.add(top)
        root = own_root(top)
        if root is None:
            continue
        files = _files(top, root)
        size = sum(path.stat().st_size for path in files.values())
        if size > MAX_BYTES:
            raise UsageError(
                f"the cell uses the module {top!r} ({root}), which holds {size >> 20} MiB of files: more than "
                f"{MAX_BYTES >> 20} MiB travels with a cell only as data. Move its data out of the package (and "
                "send it with --files), or install the package in the notebook's environment. Nothing was launched."
            )
        found.update(files)
        pending += sorted(n for path in files.values() if path.suffix == ".py" for n in _imported_by(path))
    return found


def _imported(files: Iterable[str]) -> list[str]:
    """The modules of ``files`` (see :func:`collect`) that the kernel has imported, in the order it did."""
    tops = {rel.partition("/")[0].partition(".")[0] for rel in files}
    return [name for name in list(sys.modules) if name.partition(".")[0] in tops]


def own_modules(modules: Iterable[str]) -> list[str]:
    """The notebook's own modules that ``modules`` (dotted names) use, as :func:`collect` finds them, that the
    kernel has imported."""
    return _imported(collect(modules))


def encode(files: dict[str, Path]) -> payload.Encoded:
    """The blob of the files (see :func:`collect`), with the names of their modules the kernel has imported,
    in the order it imported them."""
    return payload.encode(
        {"files": {rel: path.read_bytes() for rel, path in files.items()}, "imported": _imported(files)}
    )


def place(shipped: dict[str, Any], workdir: str | os.PathLike[str]) -> list[str]:
    """On the machine: write the files under ``workdir``, put them first on ``sys.path``, and import quietly
    the modules the kernel had imported; returns those that failed to import (the cell meets them)."""
    folder = Path(workdir) / FOLDER
    for rel, data in shipped["files"].items():
        path = folder / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"a module's file {rel!r} would land outside its folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return imports.import_all(shipped["imported"])
