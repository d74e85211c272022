"""Whether the GPUs a job was planned with can be used here, before its cell runs.

A VM gets its GPUs from Compute Engine, but only a working NVIDIA driver makes them usable, and that comes
with the image (a Deep Learning VM image has one; stock Debian or Ubuntu images do not). Without it, CUDA
code fails deep inside the cell, or quietly runs on the CPU. So a job planned with GPUs asks ``nvidia-smi``
first (it ships with the driver and fails when the driver does not answer), and the job FAILS with that as
its reason instead of running.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

NVIDIA_SMI_TIMEOUT_S = 60.0


def problem(plan: dict[str, Any]) -> str | None:
    """Why the GPUs of ``plan`` (the job's machine plan: ``gpu``, ``gpu_count``) cannot be used here; None
    when it has none or ``nvidia-smi`` lists at least as many."""
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
