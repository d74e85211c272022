"""A VM's startup script as Compute Engine's guest agent runs it, and nbburst's programs under it.

google-startup-scripts.service runs the script with systemd's environment (no HOME, in /), reads its output line
by line through a pipe (64 KiB at most a line), and at the soft-off stops only the script runner
(KillMode=process): the emulator does the same (nbburst/testing/compute/guest.py)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1
from support import held_call, wait_until
from support.gce import Compute, instance, submit

from nbburst.client.burst import Burst
from nbburst.machines.base import machine_name
from nbburst.protocol.job import State

pytestmark = pytest.mark.timeout(300)


def with_script(name: str, startup: str, shutdown: str | None = None, **options) -> compute_v1.Instance:
    """An instance whose scripts are exactly these (no ``cd`` into the disk first)."""
    inst = instance(name, startup="", shutdown="" if shutdown is not None else None, **options)
    for item in inst.metadata.items:
        item.value = startup if item.key == "startup-script" else shutdown
    return inst


def test_a_startup_script_has_no_home_runs_in_root_and_its_output_is_read_line_by_line(compute_emulator):
    gce = Compute(compute_emulator)
    script = (
        'echo "home=${HOME:-none} user=${USER:-none} cwd=$PWD"\n'
        "python3 -c 'print(\"x\" * 70000)'\n"
        "echo after the long line\n"
        "exec sleep 300\n"
    )
    gce.create(with_script("vm-env", script))
    wait_until(lambda: "token too long" in compute_emulator.serial_output("vm-env"), what="the runner to give up")
    console = compute_emulator.serial_output("vm-env")
    assert "home=none user=none cwd=/\n" in console
    assert "x" * 1000 not in console and "after the long line" not in console  # the runner reads no more


@pytest.mark.compute_emulator(preemption_grace=5.0)
def test_at_the_soft_off_only_the_runner_stops_and_its_pipe_breaks(compute_emulator):
    """KillMode=process: the script's processes get no SIGTERM at the soft-off, their stdout breaks; systemd's
    last stage sends SIGTERM once the shutdown script is done."""
    gce = Compute(compute_emulator)
    child = (
        'cd "$NBBURST_EMULATOR_DISK" || exit 1\n'
        "python3 -c '\n"
        "import signal, sys, time\n"
        'log = open("child.txt", "a", buffering=1)\n'
        'signal.signal(signal.SIGTERM, lambda *a: (log.write(f"SIGTERM {time.time()}\\n"), sys.exit(0)))\n'
        "try:\n"
        "    while True:\n"
        '        print("tick", flush=True)\n'
        "        time.sleep(0.05)\n"
        "except BrokenPipeError:\n"
        '    log.write(f"pipe broke {time.time()}\\n")\n'
        "    while True:\n"
        "        time.sleep(0.05)\n"
        "'\n"
    )
    shutdown = (
        'cd "$NBBURST_EMULATOR_DISK" || exit 1\nsleep 1\npython3 -c "import time; print(time.time())" > done.txt\n'
    )
    gce.create(with_script("vm-soft", child, shutdown))
    wait_until(lambda: "tick" in compute_emulator.serial_output("vm-soft"), what="the child to print")
    compute_emulator.preempt("vm-soft", wait=True)
    disk = compute_emulator.disk_path("vm-soft")
    lines = [line.rsplit(" ", 1) for line in (disk / "child.txt").read_text().splitlines()]
    # the first SIGTERM is systemd's last stage; a busy machine may see the child take another (the hard-off's)
    # while it is still exiting from the first
    assert [what for what, _ in lines[:2]] == ["pipe broke", "SIGTERM"], lines
    assert all(what == "SIGTERM" for what, _ in lines[2:]), lines
    broke, term = lines[0], lines[1]
    assert float(broke[1]) < float((disk / "done.txt").read_text()) <= float(term[1])


def test_max_run_duration_under_30_s_is_refused_as_compute_engine_does(compute_emulator):
    gce = Compute(compute_emulator)
    with pytest.raises(exceptions.BadRequest, match="maxRunDuration"):
        gce.insert(instance("vm-brief", startup="exec sleep 300", max_run=10, action="DELETE"))
    assert compute_emulator.time_scale == 1.0  # tests shorten VM time with the emulator's time_scale instead


def test_the_emulators_proxy_settings_are_the_vms_egress(compute_emulator, monkeypatch):
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    gce = Compute(compute_emulator)
    gce.create(instance("vm-proxy", startup='echo "$https_proxy $no_proxy" > proxy.txt; exec sleep 300'))
    said = compute_emulator.disk_path("vm-proxy") / "proxy.txt"
    wait_until(lambda: said.exists() and said.read_text().endswith("\n"), what="the VM to say")
    assert said.read_text() == "http://127.0.0.1:9 127.0.0.1,localhost\n"


def test_a_cell_sees_home_set_to_a_writable_folder(gce_env, compute_emulator):
    probe = 'test -d "$HOME" && test -w "$HOME" && touch "$HOME/.probe" && echo "$HOME|$USER|$LANG"'
    job = submit(Burst(), subprocess.getoutput, probe, cores=2)
    assert job.wait(timeout=240) == State.SUCCEEDED
    home, user, lang = job.result().strip().split("|")
    assert home.endswith("/nbburst/home") and user and lang == "C.UTF-8"


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=30.0)
def test_a_preempted_agent_records_preempted_well_within_the_30_s(gce_env, compute_emulator, tmp_path):
    """Nothing signals the agent at a spot VM's soft-off: it hears of it from the metadata server, and its hooks,
    checkpoint and PREEMPTED record fit in the 30 s with room to spare."""
    burst = Burst()
    started = tmp_path / "started"
    job = submit(burst, held_call, str(started), "done", cores=2)
    name = machine_name(job.id)
    wait_until(started.exists, what="the job to run")
    t0 = time.monotonic()
    compute_emulator.preempt(name)
    wait_until(lambda: State.PREEMPTED in [s.state for s in job.statuses()], timeout=30, what="PREEMPTED")
    took = time.monotonic() - t0
    assert took < 15, f"the agent took {took:.1f} s of the 30 s to record PREEMPTED"
    console = compute_emulator.serial_output(name)
    assert "agent starting (log:" in console


@pytest.mark.compute_emulator(operation_delay=0.02, quotas={"GPUS_ALL_REGIONS": 1}, driver_delay=8.0)
def test_a_gpu_job_waits_for_the_driver_a_deep_learning_vm_image_is_still_installing(gce_env, compute_emulator):
    job = submit(Burst(), subprocess.getoutput, "nvidia-smi -L", gpu="t4")
    assert job.wait(timeout=240) == State.SUCCEEDED, job.terminal().reason
    assert job.result().startswith("GPU 0: NVIDIA T4")


def test_what_a_cell_prints_never_blocks_its_agent(gce_env, compute_emulator):
    """A line longer than the guest's runner reads (64 KiB) stops the serial console, never the job."""
    job = submit(Burst(), os.system, "python3 -c 'print(\"x\" * 200000)'; seq 1 20000", cores=2)
    assert job.wait(timeout=240) == State.SUCCEEDED and job.result() == 0
    assert "\n20000\n" in job.logs()
