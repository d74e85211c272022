"""The kernel's installed distributions are read once, and again only when one is installed or removed.

A kernel has the notebook's folder on ``sys.path``: every file a cell writes there (a figure saved, a CSV)
moves that folder's modification time. Reading every distribution's metadata again then cost the next
``%%burst`` cell's submission a scan of all installed packages (a third of a second and more).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nbburst.protocol import env


def _install(folder: Path, name: str, version: str) -> Path:
    """A distribution as an installer leaves it: its metadata folder beside its package."""
    meta = folder / f"{name}-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (meta / "RECORD").write_text(f"{name}/__init__.py,,\n{meta.name}/METADATA,,\n")
    (folder / name).mkdir(exist_ok=True)
    (folder / name / "__init__.py").write_text("")
    return meta


#: The times :func:`_moved` gives, each a second after the one before.
_clock = [time.time_ns()]


def _moved(folder: Path) -> None:
    """The folder's time moved past any it had, as it does between two installs, seconds apart: a test's steps
    come faster than the file system's clock moves, and two of them may leave a folder the same time."""
    _clock[0] += 10**9
    os.utime(folder, ns=(_clock[0], _clock[0]))


def _in_a_kernel_like_process(tmp_path: Path, scenario: str) -> None:
    """Run ``scenario`` (a function of this module) in a new Python process, in a notebook folder that is on its
    ``sys.path`` and its working folder, as a kernel's is: the test suite's own process has imported, changed and
    cached much that a kernel's has not."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    code = f"import test_env_cache\ntest_env_cache.{scenario}(__import__('pathlib').Path({str(folder)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _files_written(site: Path) -> None:
    sys.path.insert(0, str(site))  # beside "", where `python -c` put the working folder
    reads = [0]
    real = env.metadata.packages_distributions

    def counted() -> dict[str, list[str]]:
        reads[0] += 1
        return real()

    env.metadata.packages_distributions = counted
    env.module_owners()
    first = reads[0]
    for i in range(3):
        (site / f"plot{i}.png").write_bytes(b"\x89PNG")
        _moved(site)
        (site / "data").mkdir(exist_ok=True)
        assert "numpy" in env.module_owners()
    assert reads[0] == first, reads


def _installed_upgraded_removed(site: Path) -> None:
    sys.path[0] = str(site)  # where `python -c` put "", `python -m ipykernel_launcher` puts the folder itself
    assert "nbburst_probe" not in env.module_owners()
    meta = _install(site, "nbburst_probe", "1.0")
    _moved(site)
    importlib.invalidate_caches()
    assert env.module_owners()["nbburst_probe"] == ["nbburst-probe"]
    assert env.distributions()["nbburst-probe"].version == "1.0"

    meta.rename(site / "nbburst_probe-2.0.dist-info")
    (site / "nbburst_probe-2.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nbburst_probe\nVersion: 2.0\n"
    )
    _moved(site)
    importlib.invalidate_caches()
    assert env.distributions()["nbburst-probe"].version == "2.0"

    shutil.rmtree(site / "nbburst_probe-2.0.dist-info")
    _moved(site)
    importlib.invalidate_caches()
    assert "nbburst_probe" not in env.module_owners()
    assert "nbburst-probe" not in env.distributions()


def _reinstalled(site: Path) -> None:
    """pip's --force-reinstall removes the metadata folder and writes it anew under the same name."""
    sys.path[0] = str(site)
    _install(site, "nbburst_probe", "1.0")
    _moved(site)
    importlib.invalidate_caches()
    assert env.module_owners()["nbburst_probe"] == ["nbburst-probe"]
    shutil.rmtree(site / "nbburst_probe-1.0.dist-info")
    meta = _install(site, "nbburst_probe", "1.0")
    (meta / "RECORD").write_text(f"nbburst_probe_two/__init__.py,,\n{meta.name}/METADATA,,\n")
    _moved(meta)
    _moved(site)
    importlib.invalidate_caches()
    owners = env.module_owners()
    assert "nbburst_probe_two" in owners and "nbburst_probe" not in owners, owners


def test_files_written_in_a_folder_on_sys_path_do_not_read_the_distributions_again(tmp_path: Path) -> None:
    _in_a_kernel_like_process(tmp_path, "_files_written")


def test_a_distribution_installed_upgraded_or_removed_is_seen_at_once(tmp_path: Path) -> None:
    _in_a_kernel_like_process(tmp_path, "_installed_upgraded_removed")


def test_a_distribution_reinstalled_at_the_same_version_is_read_again(tmp_path: Path) -> None:
    _in_a_kernel_like_process(tmp_path, "_reinstalled")
