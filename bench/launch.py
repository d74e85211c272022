"""Time from "cell starts" to "job RUNNING" on the gce backend, on the emulators.

    python bench/launch.py [--runs 5] [--operation-delay 0]      # phase by phase, an image with the packages
    python bench/launch.py --environments                        # stock image: cold, stored, baked

Starts the Compute Engine and GCS emulators, submits a trivial job (``nbburst.submit``-style, as a
cell would) with ``--backend gce``, and splits the time until the agent reports RUNNING into:

  plan         machine type, image, quota and bucket checks (Compute API reads)
  upload       the job's files, the nbburst wheel (once per Store) and the dist manifest
  insert       instances.insert + waiting on the operation
  boot         operation done -> the startup script's first line (the emulator's "boot")
  install      startup script: read the signed manifest, venv, download + install the wheel
  agent start  python -m nbburst.agent: imports, identity, job spec, environment check begins
  env sync     comparing the job's package list with the VM's (nothing to install: a matching image)
  to RUNNING   checkpoints restored, the cell's process forked, status RUNNING written

The first run of a process is "cold" (client libraries imported, catalog listed, wheel built and
uploaded); the others are "warm" (a second cell in the same kernel). VM-side times come from the
``t=`` stamps the startup script and the agent print to the serial console. On real Compute Engine,
``boot`` is the VM's boot (published figures: about 25 s up to 32 vCPUs); everything else is ours.

``--environments`` boots the default stock image (debian-12: no uv, no packages) with a cell that imports
numpy, pandas and scikit-learn, three ways, and prints the seconds from the insert to the cell running:
the first VM (uv fetched, every package installed, the environment then stored in the bucket), a later
VM (the stored environment unpacked), and a VM of an image baked by ``nbburst image build`` with the
same packages. Packages come from a local package index (:mod:`nbburst.testing.pypi`) whose wheels are
all built before the runs: it stands for PyPI as seen from a VM, with no network in the way.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

PHASES = ["plan", "upload", "insert", "boot", "install", "agent start", "env sync", "to RUNNING"]


def stamp(console: str, pattern: str) -> float:
    m = re.search(pattern + r".*? t=([0-9.]+)", console)
    if not m:
        raise RuntimeError(f"no {pattern!r} in the serial console:\n{console[-2000:]}")
    return float(m.group(1))


def one_run(burst, compute) -> dict[str, float]:
    from nbburst.machines.base import machine_name
    from nbburst.protocol.job import State

    machines = burst.machines("gce")
    marks: dict[str, float] = {}
    real_plan, real_write, real_launch = machines.plan, burst._write_job, machines.launch

    def plan(resources):
        t = time.time()
        try:
            return real_plan(resources)
        finally:
            marks["plan"] = time.time() - t

    def write_job(*args, **kwargs):
        t = time.time()
        try:
            return real_write(*args, **kwargs)
        finally:
            marks["write_job"] = time.time() - t

    def launch(*args, **kwargs):
        try:
            return real_launch(*args, **kwargs)
        finally:
            marks["launched_at"] = time.time()

    machines.plan, burst._write_job, machines.launch = plan, write_job, launch
    try:
        t0 = time.time()
        job = burst.submit(abs, -1, options=burst.options(backend="gce", cores=2))
        status = None
        while status is None or status.state != State.RUNNING:
            status = job.latest_status()
            if job.terminal() is not None:
                break
            time.sleep(0.01)
        running_at = status.started
        console = compute.serial_output(machine_name(job.id))
        job.wait(timeout=60)
    finally:
        machines.plan, burst._write_job, machines.launch = real_plan, real_write, real_launch
    begin = stamp(console, "nbburst-startup: begin")
    agent = stamp(console, "nbburst-startup: agent starting")
    m = re.search(r"nbburst-envsync: .*?\(([0-9.]+) s\) t=([0-9.]+)", console)
    sync_end, sync_s = float(m.group(2)), float(m.group(1))
    return {
        "plan": marks["plan"],
        "upload": marks["write_job"] + machines.timings["upload_dist"],
        "insert": machines.timings["insert"],
        "boot": begin - marks["launched_at"],
        "install": agent - begin,
        "agent start": sync_end - sync_s - agent,
        "env sync": sync_s,
        "to RUNNING": running_at - sync_end,
        "total": running_at - t0,
    }


ENV_CELL = "import numpy, pandas, sklearn\nrows = len(pandas.DataFrame(numpy.ones((3, 2))))\n"


def env_run(burst, compute, **options) -> dict[str, float]:
    """Insert -> cell running for one job of ENV_CELL, with the bootstrap's own phases from the console."""
    from nbburst.client.capture import capture
    from nbburst.machines.base import machine_name
    from nbburst.protocol.job import State

    machines = burst.machines("gce")
    job = burst.submit_cell(ENV_CELL, capture(ENV_CELL, {}), burst.options(backend="gce", cores=2, **options))
    inserted = time.time() - machines.timings["insert"]  # launch returns right after the insert's operation
    status = None
    while status is None or status.state != State.RUNNING:
        status = job.latest_status()
        if job.terminal() is not None:
            break
        time.sleep(0.01)
    name, console = machine_name(job.id), ""
    while True:  # the whole console, until the agent deletes the VM (after storing the environment)
        try:
            console = compute.serial_output(name)
        except Exception:
            break
        time.sleep(0.2)
    if job.wait(timeout=300) != State.SUCCEEDED:
        raise RuntimeError(f"the job failed: {job.terminal().reason}")
    begin, agent = stamp(console, "nbburst-startup: begin"), stamp(console, "nbburst-startup: agent starting")
    steps = [
        f"    {float(m.group(2)) - begin:6.1f} s  {m.group(1)}"
        for m in re.finditer(r"^nbburst-(?:startup|envsync): (.*?) t=([0-9.]+)$", console, re.M)
    ]
    return {
        "boot": begin - inserted,
        "bootstrap": agent - begin,
        "agent": status.started - agent,
        "total": status.started - inserted,
        "steps": "\n".join(steps),
    }


def environments(compute, base: Path) -> None:
    """The three ways a stock image gets the notebook's environment (see the module's docstring)."""
    from nbburst.client.burst import Burst
    from nbburst.machines.gce.context import GCEContext
    from nbburst.machines.gce.image import ImageBuilder, plan
    from nbburst.protocol import dist
    from nbburst.testing.pypi import PackageIndex

    for key in ("NBBURST_IMAGE_FAMILY", "NBBURST_IMAGE_PROJECT"):
        os.environ.pop(key, None)  # the default: a stock image
    index = PackageIndex(base / "index").start()
    index.add_uv()
    index.add_python()
    index.add_installed()
    compute.instance_env.update(index.env())
    compute.instance_env["PYTHONDONTWRITEBYTECODE"] = ""  # VMs keep the bytecode they compile, as real ones do
    for module in ("numpy", "pandas", "sklearn"):  # loaded in the kernel, as in the notebook
        importlib.import_module(module)

    burst = Burst()
    wanted = dist.requirements(ENV_CELL)
    index.build("uv", *wanted)  # every wheel built before the clock runs: a mirror that answers at once
    rows = {"first VM: uv installs everything, then stores it": env_run(burst, compute)}
    rows["later VM: unpacks the stored environment"] = env_run(burst, compute)
    requirements = base / "requirements.txt"
    requirements.write_text("".join(f"{n}=={v}\n" for n, v in wanted.items()))
    os.environ["NBBURST_IMAGE_PROJECT"] = compute.project
    ImageBuilder.poll_s = 0.2
    context = GCEContext(burst.settings)
    image = ImageBuilder(context, say=lambda line: None).build(
        plan(context, family="bench-baked", requirements=str(requirements))
    )
    rows["baked image (nbburst image build)"] = env_run(burst, compute, image_family=image.family)
    index.stop()
    print(f"\ninsert -> cell running on the emulators, stock image, {len(wanted)} packages ({os.cpu_count()} CPUs)\n")
    print(f"{'':<52}{'boot':>8}{'bootstrap':>11}{'agent':>8}{'total':>8}")
    for label, r in rows.items():
        print(
            f"{label:<52}"
            + "".join(f"{r[k]:>{w}.1f}" for k, w in (("boot", 8), ("bootstrap", 11), ("agent", 8), ("total", 8)))
        )
    for label, r in rows.items():
        print(f"\n{label}, the bootstrap's steps (seconds after it began):\n{r['steps']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=4, help="jobs to launch (the first is cold)")
    parser.add_argument(
        "--operation-delay",
        type=float,
        default=0.0,
        help="the emulator's delay per operation step, seconds (0: our overhead only)",
    )
    parser.add_argument(
        "--environments", action="store_true", help="a stock image: first VM, stored environment, baked image"
    )
    args = parser.parse_args(argv)

    from nbburst.testing import ComputeEmulator
    from nbburst.testing.gcs import GCSEmulator

    base = Path(tempfile.mkdtemp(prefix="nbburst-bench-"))
    compute = ComputeEmulator(
        base / "compute", operation_delay=args.operation_delay, stop_grace=5, preemption_grace=2
    ).start()
    gcs = GCSEmulator().start()
    try:
        gcs.create_bucket("bench")
        os.environ.update(gcs.env())
        os.environ.update(compute.env())
        os.environ.update(
            {
                "NBBURST_ROOT": "gs://bench/nbburst",
                "NBBURST_BACKEND": "gce",
                "GOOGLE_CLOUD_PROJECT": compute.project,
                "NBBURST_STATE_DIR": str(base / "state"),
            }
        )
        if args.environments:
            environments(compute, base)
            return 0
        from nbburst.client.burst import Burst

        burst = Burst()
        runs = [one_run(burst, compute) for _ in range(args.runs)]
    finally:
        compute.stop()
        gcs.stop()
        shutil.rmtree(base, ignore_errors=True)

    cold, warm = runs[0], runs[1:] or runs[:1]
    print(
        f"\ncell start -> RUNNING on the emulators ({args.runs} jobs, emulator operation delay "
        f"{args.operation_delay:g} s, {os.cpu_count()} CPUs)\n"
    )
    print(f"{'phase':<14}{'cold (1st job)':>16}{'warm (median)':>16}")
    for phase in [*PHASES, "total"]:
        med = statistics.median(r[phase] for r in warm)
        line = f"{phase:<14}{cold[phase]:>14.2f} s{med:>14.2f} s"
        print(("-" * 46 + "\n" if phase == "total" else "") + line)
    ours = statistics.median(r["total"] - r["boot"] for r in warm)
    print(f"\nnbburst's own overhead (total minus boot), warm: {ours:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
