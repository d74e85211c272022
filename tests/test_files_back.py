"""Files a cell writes in its working folder come back as from a plain cell, and can be fetched again later."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import machines_gone

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job
from nbburst.protocol import workfiles
from nbburst.protocol.job import State

BIG = 100 * 1024 * 1024

CELL = f"""
import os, pathlib
pathlib.Path("results/runs/a").mkdir(parents=True)
pathlib.Path("results/runs/a/metrics.json").write_text('{{"acc": 0.9}}')
pathlib.Path("results/summary.txt").write_text("machine summary")
pathlib.Path("notes.txt").write_text("from the machine")
pathlib.Path("input.csv").write_text("a,b\\n1,2\\n")  # unchanged: it was sent with --files
with open("model.bin", "wb") as f:
    block = bytes(range(256)) * 4096
    for _ in range({BIG} // len(block)):
        f.write(block)
os.makedirs(".ipython", exist_ok=True)
x = 1
"""


def submit(burst: Burst, code: str, **options) -> Job:
    return burst.submit_cell(code, capture(code, {}, None, set()), burst.options(**options))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_big() -> str:
    block = bytes(range(256)) * 4096
    h = hashlib.sha256()
    for _ in range(BIG // len(block)):
        h.update(block)
    return h.hexdigest()


def test_files_written_by_a_cell_arrive_and_download_later(burst_env, tmp_path, monkeypatch):
    here = tmp_path / "notebook"
    here.mkdir()
    monkeypatch.chdir(here)
    (here / "input.csv").write_text("a,b\n1,2\n")
    old = here / "results" / "summary.txt"  # here before the cell started, not changed since: replaced
    old.parent.mkdir()
    old.write_text("an older summary")
    os.utime(old, (time.time() - 3600, time.time() - 3600))

    burst = Burst()
    job = submit(burst, CELL, files=["input.csv"])
    (here / "notes.txt").write_text("my own notes, written while the job ran")  # changed here since it started
    assert job.wait(timeout=120) == State.SUCCEEDED, job.logs()
    machines_gone(job.machines, job.id)

    kept = job.files()
    assert set(kept) == {"results/runs/a/metrics.json", "results/summary.txt", "notes.txt", "model.bin"}
    assert kept["model.bin"] == BIG

    lines = job.bring_back(here)  # what the magic does when the cell ends
    assert (here / "results/runs/a/metrics.json").read_text() == '{"acc": 0.9}'
    assert old.read_text() == "machine summary"
    assert (here / "notes.txt").read_text() == "my own notes, written while the job ran"  # never overwritten
    assert (here / f"notes.{job.id}.txt").read_text() == "from the machine"  # both kept
    assert any("notes.txt changed here since the cell started" in line for line in lines), lines
    assert sha(here / "model.bin") == expected_big()
    assert not [p for p in here.rglob("*") if p.name.startswith((".nbburst-dl-", ".tmp-"))]
    assert not (here / ".ipython").exists()  # nbburst's own folders stay on the machine

    # later, from a fresh process (after a kernel restart, or on another computer with the key ring)
    dest = tmp_path / "elsewhere"
    out = subprocess.run(
        [sys.executable, "-m", "nbburst", "download", job.id, str(dest)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "model.bin" in out.stdout
    assert sha(dest / "model.bin") == expected_big()
    assert (dest / "notes.txt").read_text() == "from the machine"
    assert (dest / "results/runs/a/metrics.json").exists()


def test_over_the_limit_files_stay_in_the_store(burst_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NBBURST_FILES_LIMIT_GB", "0.000001")  # about a kilobyte
    burst = Burst()
    job = submit(burst, "open('big.txt', 'w').write('x' * 5000)\nopen('small.txt', 'w').write('y')")
    assert job.wait(timeout=60) == State.SUCCEEDED, job.logs()
    machines_gone(job.machines, job.id)
    lines = job.bring_back(tmp_path)
    assert not (tmp_path / "big.txt").exists() and not (tmp_path / "small.txt").exists()
    assert any(f"%burst download {job.name}" in line for line in lines), lines
    job.download(tmp_path / "later")
    assert (tmp_path / "later" / "big.txt").read_text() == "x" * 5000


def test_a_partial_download_leaves_no_half_file_and_a_forged_file_is_refused(burst_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    burst = Burst()
    job = submit(burst, "open('out.txt', 'w').write('genuine')")
    assert job.wait(timeout=60) == State.SUCCEEDED
    machines_gone(job.machines, job.id)
    store = burst.store
    key = workfiles.file_key(job.layout, "out.txt")
    genuine = store.get(key)
    store.put(key, genuine[: len(genuine) // 2])  # cut short in the Store (an interrupted upload or download)
    with pytest.raises(Exception, match="signature|seal"):
        job.download(tmp_path / "dest")
    assert not any((tmp_path / "dest").rglob("*.txt")) and not any((tmp_path / "dest").rglob(".*"))
    store.put(key, genuine)
    job.download(tmp_path / "dest")
    assert (tmp_path / "dest" / "out.txt").read_text() == "genuine"
    with pytest.raises(ValueError):
        workfiles.check_rel("../outside.txt")


def test_the_magic_brings_files_back_and_downloads_them(burst_env, tmp_path):
    from support.nbrun import error, run_cells, stream

    outputs = run_cells(
        [
            "%load_ext nbburst",
            "open('notes.txt', 'w').write('mine, before')",
            "%%burst --detach --name writer\nimport os, time\ntime.sleep(1)\nos.makedirs('out')\n"
            "open('out/a.txt', 'w').write('a')\nopen('notes.txt', 'w').write('machine')",
            "open('notes.txt', 'w').write('mine, changed while it ran')",
            "%burst attach writer",
            "%burst download writer elsewhere",
        ],
        cwd=tmp_path,
    )
    for out in outputs:
        assert error(out) is None, error(out)
    assert "notes.txt changed here since the cell started" in stream(outputs[4], "stderr")
    assert (tmp_path / "out/a.txt").read_text() == "a"
    assert (tmp_path / "notes.txt").read_text() == "mine, changed while it ran"
    (kept,) = tmp_path.glob("notes.*.txt")
    assert kept.read_text() == "machine"
    assert "files the cell wrote, now in" in stream(outputs[5])
    assert (tmp_path / "elsewhere/notes.txt").read_text() == "machine"
