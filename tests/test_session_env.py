"""A session VM stores the environment its bootstrap built, as a job VM does: the next session of that environment
unpacks it instead of installing (against the emulators, from the default stock image and a local package index)."""

from __future__ import annotations

import json
import os
import time

import pytest

from nbburst.client import gc
from nbburst.client.burst import Burst
from nbburst.protocol import dist, envcache
from nbburst.protocol.job import JobLayout
from nbburst.testing.compute.resources import ComputeError


@pytest.fixture
def stock_burst(gce_env, compute_emulator, package_index, monkeypatch):
    monkeypatch.delenv("NBBURST_IMAGE_FAMILY", raising=False)
    monkeypatch.delenv("NBBURST_IMAGE_PROJECT", raising=False)
    monkeypatch.setenv("NBBURST_WATCHER", "0")
    compute_emulator.instance_env.update(package_index.env())
    b = Burst()
    yield b
    for session in b.sessions.all():
        b.sessions.stop(session.name)


def console_until_gone(emu, machine: str, timeout: float = 120.0) -> str:
    """The VM's serial console, read until the VM is gone (it deletes itself after storing its environment)."""
    console, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            console = emu.serial_output(machine)
        except ComputeError:
            return console
        time.sleep(0.2)
    raise AssertionError(f"{machine} is still there after {timeout} s:\n{console[-3000:]}")


@pytest.mark.compute_emulator(operation_delay=0.02)
@pytest.mark.timeout(2 * 360)
def test_the_second_session_of_an_environment_unpacks_what_the_first_built(stock_burst, compute_emulator):
    burst, store = stock_burst, stock_burst.store_for("gce")
    t0 = time.monotonic()
    first = burst.sessions.start("first", cores=2, idle="2s", timeout="10m", preload=["joblib"])
    first_start = time.monotonic() - t0
    manifest = json.loads(store.get(JobLayout(first.record.session_id).dist_manifest))
    env_hash = manifest["env"]["hash"]
    assert manifest["env"]["base"] is None and manifest["env"]["store"]
    console = console_until_gone(compute_emulator, first.machine)  # idle for 2 s: it settles, then goes
    assert "packages with uv" in console, console[-3000:]
    assert f"environment stored as {envcache.archive_key(env_hash)}" in console, console[-3000:]
    record = json.loads(store.get(envcache.record_key(env_hash)))
    assert record["job"] == first.record.session_id
    assert dist.verify_manifest(burst.keyring.get(first.record.session_id), record)
    assert first.record.session_id not in {k.job_id for k in gc.orphan_keys(burst.keyring, [store], grace_s=0)}

    t0 = time.monotonic()
    second = burst.sessions.start("second", cores=2, idle="2s", timeout="10m", preload=["joblib"])
    second_start = time.monotonic() - t0
    manifest = json.loads(store.get(JobLayout(second.record.session_id).dist_manifest))
    assert manifest["env"]["base"]["hash"] == env_hash and manifest["env"]["base"]["complete"]
    assert not manifest["env"]["store"], "nothing new to store"
    console = console_until_gone(compute_emulator, second.machine)
    assert f"environment {envcache.archive_key(env_hash)} unpacked" in console, console[-3000:]
    assert "nothing to install" in console and "packages with uv" not in console, console[-3000:]
    load = os.getloadavg()[0]
    print(f"session start: built {first_start:.1f} s, restored {second_start:.1f} s (load {load:.1f})")
