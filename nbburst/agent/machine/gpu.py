"""Whether the GPUs a job was planned with can be used here, before its cell runs.

A VM gets its GPUs from Compute Engine, but only a working NVIDIA driver makes them usable, and that comes
with the image (a Deep Learning VM image has one; stock Debian or Ubuntu images do not). Without it, CUDA
code fails deep inside the cell, or quietly runs on the CPU. So a job planned with GPUs asks ``nvidia-smi``
first (it ships with the driver and fails when the driver does not answer), and the job FAILS with that as
its reason instead of running.

A Deep Learning VM image installs its driver at the first boot when the metadata says
``install-nvidia-driver=True``
(https://cloud.google.com/deep-learning-vm/docs/cli#creating_an_instance_with_one_or_more_gpus), which may
still be going on when the job starts: on such an image the check is made again for a few minutes before the
job fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from typing import Any

from nbburst.protocol.metadata import metadata

NVIDIA_SMI_TIMEOUT_S = 60.0
#: How long a Deep Learning VM image may take to install its driver before the job fails for want of it.
DRIVER_WAIT_S = 300.0
#: How often nvidia-smi is asked again meanwhile.
DRIVER_POLL_S = 5.0
#: The project of Google's Deep Learning VM images.
DLVM_PROJECT = "deeplearning-platform-release"


def problem(plan: dict[str, Any]) -> str | None:
    """Why the GPUs of ``plan`` (the job's machine plan: ``gpu``, ``gpu_count``) cannot be used here; None
    when it has none or ``nvidia-smi`` lists at least as many. On a Deep Learning VM image that installs its
    driver, asked again until :data:`DRIVER_WAIT_S` has passed."""
    found = _check(plan)
    if found is None or not _driver_installing():
        return found
    print(
        f"nbburst: waiting up to {DRIVER_WAIT_S:.0f} s for the NVIDIA driver the Deep Learning VM image installs",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + DRIVER_WAIT_S
    while found is not None and time.monotonic() < deadline:
        time.sleep(DRIVER_POLL_S)
        found = _check(plan)
    return found


def _driver_installing() -> bool:
    """Whether this VM's image is a Deep Learning VM image told to install the NVIDIA driver."""
    image = metadata("instance/image") or ""
    asked = (metadata("instance/attributes/install-nvidia-driver") or "").strip().lower() == "true"
    return asked and f"projects/{DLVM_PROJECT}/" in image


def _check(plan: dict[str, Any]) -> str | None:
    gpu, wanted = plan.get("gpu"), int(plan.get("gpu_count") or 0)
    if not gpu or wanted < 1:
        return None
    asked = f"the job asked for {wanted} {gpu} GPU{'s' if wanted > 1 else ''}"
    fix = "use an image with an NVIDIA driver (a Deep Learning VM image: c.NBBurst.gpu_image_family) or install it"
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return f"{asked} but this machine has no NVIDIA driver (no nvidia-smi on its PATH): {fix}"
    try:
        done = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{asked} but nvidia-smi did not answer ({exc}): {fix}"
    said = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        last = said.splitlines()[-1] if said else "no output"
        return f"{asked} but nvidia-smi failed (exit status {done.returncode}: {last}): the NVIDIA driver does not work"
    listed = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    if len(listed) < wanted:
        return f"{asked} but nvidia-smi lists {len(listed)}: {'; '.join(listed) or said or 'none'}"
    return None
