"""The programs a Compute Engine VM runs (nbburst/machines/gce/vm/) are real, checked files: the Python
ones pass ruff and need only what a stock image has (the standard library), the shell ones pass
shellcheck, and the scripts assembled from them parse, carry the programs byte for byte and ship in the
wheel a job sends to its VM (hatchling's wheel of the package takes every file of the package as well)."""

from __future__ import annotations

import ast
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nbburst.machines.gce import vm
from nbburst.machines.gce.image import build_script
from nbburst.protocol import dist
from nbburst.testing.metadata import MetadataServer

VM = Path(vm.__file__).parent
PYTHON_PROGRAMS = sorted(p for p in VM.glob("*.py") if p.name != "__init__.py")
SHELL_PARTS = sorted(VM.glob("*.sh"))


def run(*cmd: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kwargs)


def shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        message = "shellcheck is missing: install the Debian package shellcheck"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def assembled() -> dict[str, str]:
    return {
        "startup": vm.startup_script(),
        "session": vm.session_startup_script(),
        "shutdown": vm.shutdown_script(),
        "build": build_script("3.11"),
        "watch": vm.watcher_script(),
    }


def test_the_folder_holds_the_programs():
    assert {p.name for p in PYTHON_PROGRAMS} == {"bootstrap.py", "bake.py", "vmlib.py", "watchboot.py"}
    assert {p.name for p in SHELL_PARTS} == {"prelude.sh", "startup.sh", "shutdown.sh", "build.sh", "watch.sh"}


def test_python_programs_pass_ruff():
    files = [str(p) for p in VM.glob("*.py")]
    lint = run(sys.executable, "-m", "ruff", "check", "--no-cache", *files)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    style = run(sys.executable, "-m", "ruff", "format", "--check", "--no-cache", *files)
    assert style.returncode == 0, style.stdout + style.stderr


def test_python_programs_need_only_the_standard_library():
    """A stock image's python3 has nothing else: not even google-cloud-storage to read the bucket."""
    stdlib = set(sys.stdlib_module_names) | {"__future__", "vmlib"}
    for path in PYTHON_PROGRAMS:
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level: runs before anything could be missing
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert all(n.split(".")[0] in stdlib for n in names), f"{path.name} imports {names} at module level"
        later = {
            (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom)) and n not in tree.body
        }
        assert later <= stdlib, f"{path.name} imports {later - stdlib}"


def test_shell_parts_pass_shellcheck():
    proc = run(shellcheck(), *SHELL_PARTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["startup", "shutdown", "build", "watch"])
def test_assembled_scripts_parse_and_pass_shellcheck(name, tmp_path):
    path = tmp_path / f"{name}.sh"
    path.write_text(assembled()[name])
    assert path.read_text().startswith("#!/bin/bash\n")
    syntax = run("bash", "-n", path)
    assert syntax.returncode == 0 and not syntax.stderr, syntax.stderr
    proc = run(shellcheck(), path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_written_programs_are_the_files(tmp_path):
    names = [p.name for p in PYTHON_PROGRAMS]
    proc = run("bash", "-c", vm.programs_writer(*names) + 'write_programs "$1"', "bash", tmp_path / "vm")
    assert proc.returncode == 0, proc.stderr
    for path in PYTHON_PROGRAMS:
        assert (tmp_path / "vm" / path.name).read_text() == path.read_text()


def test_a_program_runs_from_the_written_folder(tmp_path):
    """bootstrap.py imports vmlib beside it, reads the metadata server, and says why it stops."""
    proc = run("bash", "-c", vm.programs_writer("vmlib.py", "bootstrap.py") + 'write_programs "$1"', "bash", tmp_path)
    assert proc.returncode == 0, proc.stderr
    with MetadataServer({"instance/attributes": {"nbburst-job-url": "gs://bucket/not-a-job"}}) as md:
        env = {**os.environ, "GCE_METADATA_HOST": md.host}
        proc = run(sys.executable, tmp_path / "bootstrap.py", tmp_path, env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.startswith("nbburst-startup: ERROR: instance metadata has no nbburst-job-url/nbburst-key")


def test_the_job_wheel_ships_the_programs():
    _, data = dist.wheel()
    names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    wanted = {f"nbburst/machines/gce/vm/{p.name}" for p in [*PYTHON_PROGRAMS, *SHELL_PARTS]}
    assert wanted <= names, wanted - names
