"""Choosing a Compute Engine machine type: the cheapest one that fits, and why.

Pure functions over a zone's catalog (what ``machineTypes.list`` returned) and
the price table of :mod:`nbburst.protocol.pricing`, so the choice is testable offline
and the reason can be shown to the user before anything is launched.

Rules:

* ``--machine-type`` is taken as given (after checking it exists in the zone
  and is at least as big as ``--cores``/``--memory``).
* ``--gpu TYPE[:COUNT]`` picks the family the GPU lives in: T4, V100, P100 and
  P4 attach to N1 machines; L4 comes with G2 machines and A100 with A2
  machines, whose type fixes the number of GPUs.
* Otherwise every predefined type of a priced family with at least ``--cores``
  vCPUs and ``--memory`` GB (default: 1 GB per vCPU) competes with custom
  types of E2, N2 and N1 cut to the request; the cheapest hourly price wins
  (spot or on-demand prices, as the job will run). Shared-core types and
  families without prices are left out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...errors import UsageError
from ...protocol import pricing
from ...protocol.job import Resources

DEFAULT_CORES = 4
#: Memory per vCPU assumed when --memory is not given (the highcpu ratio).
DEFAULT_GB_PER_CPU = 1.0

GPU_ALIASES = {
    "t4": "nvidia-tesla-t4",
    "nvidia-t4": "nvidia-tesla-t4",
    "v100": "nvidia-tesla-v100",
    "nvidia-v100": "nvidia-tesla-v100",
    "p100": "nvidia-tesla-p100",
    "nvidia-p100": "nvidia-tesla-p100",
    "p4": "nvidia-tesla-p4",
    "nvidia-p4": "nvidia-tesla-p4",
    "l4": "nvidia-l4",
    "a100": "nvidia-tesla-a100",
    "nvidia-a100": "nvidia-tesla-a100",
    "a100-80gb": "nvidia-a100-80gb",
    "h100": "nvidia-h100-80gb",
}
#: GPUs attached to N1 machines (guestAccelerators).
ATTACHED_GPUS = {"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"}
#: GPUs that come with an accelerator-optimized family: GPU -> family.
BUILTIN_GPU_FAMILY = {"nvidia-l4": "g2", "nvidia-tesla-a100": "a2", "nvidia-a100-80gb": "a2", "nvidia-h100-80gb": "a3"}

# Custom machine types: family -> (name prefix, valid vCPU counts, GB per vCPU min, max).
_CUSTOM = {
    "e2": ("e2-custom", lambda n: n % 2 == 0 and 2 <= n <= 32, 0.5, 8.0),
    "n2": ("n2-custom", lambda n: (n % 2 == 0 and 2 <= n <= 32) or (n % 4 == 0 and 32 < n <= 80), 0.5, 8.0),
    "n1": ("custom", lambda n: n == 1 or (n % 2 == 0 and 2 <= n <= 96), 0.9, 6.5),
}
#: Families whose CPUs are Arm: they boot ARM64 images only (https://cloud.google.com/compute/docs/instances/arm-on-compute).
ARM_FAMILIES = frozenset({"t2a", "c4a", "n4a"})
#: Families that take Hyperdisk only, for the boot disk too: no pd-balanced
#: (https://cloud.google.com/compute/docs/disks/hyperdisks#machine-type-support).
HYPERDISK_ONLY_FAMILIES = frozenset({"c4", "c4a", "c4d", "n4", "n4a", "n4d"})


def architecture(machine_type: str) -> str:
    """``ARM64`` for a machine type of an Arm family, else ``X86_64`` (the API's names)."""
    return "ARM64" if pricing.family_of(machine_type) in ARM_FAMILIES else "X86_64"


def boot_disk_type(machine_type: str) -> str:
    """The boot disk type a VM of ``machine_type`` can have: Hyperdisk Balanced where its family takes nothing else,
    else pd-balanced."""
    return "hyperdisk-balanced" if pricing.family_of(machine_type) in HYPERDISK_ONLY_FAMILIES else "pd-balanced"


_CUSTOM_NAME = re.compile(r"^(?:(?P<family>[a-z0-9]+)-)?custom-(?P<cpus>\d+)-(?P<mb>\d+)(?:-ext)?$")


@dataclass
class MachineType:
    """One entry of a zone's catalog."""

    name: str
    cpus: int
    memory_mb: int
    shared_cpu: bool = False
    gpu: str | None = None  # built-in accelerator (g2, a2)
    gpu_count: int = 0

    @property
    def family(self) -> str:
        return pricing.family_of(self.name)

    @property
    def memory_gb(self) -> float:
        return round(self.memory_mb / 1024, 2)

    @classmethod
    def from_api(cls, m: Any) -> MachineType:
        accels = list(getattr(m, "accelerators", []) or [])
        gpu = accels[0].guest_accelerator_type if accels else None
        count = accels[0].guest_accelerator_count if accels else 0
        return cls(m.name, int(m.guest_cpus), int(m.memory_mb), bool(m.is_shared_cpu), gpu or None, int(count))


@dataclass
class Choice:
    machine: MachineType
    gpu: str | None
    gpu_count: int
    price: pricing.Breakdown
    custom: bool = False
    reason: str = ""

    @property
    def attached_gpu(self) -> bool:
        return bool(self.gpu) and self.machine.gpu is None


def normalise_gpu(name: str | None) -> str | None:
    if not name:
        return None
    name = name.strip().lower()
    return GPU_ALIASES.get(name, name)


def custom_type(name: str) -> MachineType | None:
    """``n2-custom-8-16384`` -> a MachineType (no zone check); None if not a custom name."""
    m = _CUSTOM_NAME.match(name)
    if not m:
        return None
    return MachineType(name, int(m.group("cpus")), int(m.group("mb")))


def _price(
    m: MachineType,
    gpu: str | None,
    gpu_count: int,
    spot: bool,
    region: str,
    prices: dict[str, Any],
) -> pricing.Breakdown:
    """The hourly price of ``m`` (custom types at their custom prices, see :func:`pricing.hourly`)."""
    plan = {"machine_type": m.name, "cores": m.cpus, "memory_gb": m.memory_mb / 1024, "spot": spot, "zone": region}
    if gpu and m.gpu is None:
        plan.update(gpu=gpu, gpu_count=gpu_count)
    return pricing.for_plan(plan, "gce", prices=prices)


def _priced(family: str, prices: dict[str, Any]) -> bool:
    return family in prices.get("families", {})


def _custom_candidates(cores: int, memory_gb: float, families: set[str]) -> list[MachineType]:
    out = []
    for family, (prefix, valid_cpus, lo, hi) in _CUSTOM.items():
        if family not in families:
            continue
        n = cores
        while n <= 96 and not valid_cpus(n):
            n += 1
        if n > 96:
            continue
        mb = max(memory_gb, n * lo) * 1024
        mb = int(math.ceil(mb / 256) * 256)
        if mb > n * hi * 1024:
            continue  # would need extended memory: a predefined highmem type does better
        out.append(MachineType(f"{prefix}-{n}-{mb}", n, mb))
    return out


def choose(
    resources: Resources,
    catalog: list[MachineType],
    zone: str,
    prices: dict[str, Any],
    offered_gpus: set[str] | None = None,
    custom_ok: bool = True,
) -> Choice:
    """The cheapest machine in ``catalog`` (the zone's types) that fits ``resources``."""
    spot = not resources.on_demand
    region = pricing.region_of(zone)
    gpu = normalise_gpu(resources.gpu)
    gpu_count = resources.gpu_count or (1 if gpu else 0)
    kind = "spot" if spot else "on-demand"
    by_name = {m.name: m for m in catalog}

    if gpu and offered_gpus is not None and gpu not in offered_gpus:
        listed = ", ".join(sorted(offered_gpus)) or "none"
        raise UsageError(
            f"--gpu {gpu}: not offered in zone {zone} (GPUs there: {listed}); pick another zone "
            "with --zone, or another GPU"
        )

    if resources.machine_type:
        m = by_name.get(resources.machine_type) or custom_type(resources.machine_type)
        if m is None:
            similar = sorted(n for n in by_name if n.split("-")[0] == resources.machine_type.split("-")[0])[:8]
            hint = f"; {resources.machine_type.split('-')[0]} types there: {', '.join(similar)}" if similar else ""
            raise UsageError(f"--machine-type {resources.machine_type}: not offered in zone {zone}{hint}")
        if resources.cores and m.cpus < resources.cores:
            raise UsageError(f"--machine-type {m.name} has {m.cpus} vCPUs, fewer than --cores {resources.cores}")
        if resources.memory_gb and m.memory_mb / 1024 < resources.memory_gb - 1e-9:
            raise UsageError(
                f"--machine-type {m.name} has {m.memory_gb:g} GB, less than --memory {resources.memory_gb:g}"
            )
        _check_gpu_fits(m, gpu, gpu_count)
        price = _price(m, gpu, gpu_count, spot, region, prices)
        reason = f"{m.name} as asked (--machine-type): {m.cpus} vCPUs, {m.memory_gb:g} GB, {kind}"
        return Choice(m, gpu or m.gpu, gpu_count if gpu else m.gpu_count, price, m.name not in by_name, reason)

    cores = resources.cores or DEFAULT_CORES
    memory_gb = resources.memory_gb or cores * DEFAULT_GB_PER_CPU
    defaults = []
    if not resources.cores:
        defaults.append(f"no --cores given: {cores}")
    if not resources.memory_gb:
        defaults.append(f"no --memory given: {memory_gb:g} GB")

    candidates: list[tuple[MachineType, bool]] = []
    if gpu and gpu in BUILTIN_GPU_FAMILY:
        family = BUILTIN_GPU_FAMILY[gpu]
        for m in catalog:
            if m.family == family and m.gpu == gpu and m.gpu_count == gpu_count:
                candidates.append((m, False))
        if not candidates:
            counts = sorted({m.gpu_count for m in catalog if m.gpu == gpu})
            if counts:
                raise UsageError(
                    f"--gpu {gpu}:{gpu_count}: {family.upper()} machines in {zone} come with "
                    f"{', '.join(map(str, counts))} {gpu} GPUs; ask for one of those counts"
                )
            raise UsageError(f"--gpu {gpu}: no {family.upper()} machine types in zone {zone}; pick another zone")
        # GPU machines: --cores/--memory still apply (a bigger G2 has more vCPUs for the same GPU)
        fitting = [(m, c) for m, c in candidates if m.cpus >= cores and m.memory_mb / 1024 >= memory_gb - 1e-9]
        if not fitting and not resources.cores and not resources.memory_gb:
            fitting = candidates
        candidates = fitting
    elif gpu:
        if gpu not in ATTACHED_GPUS:
            raise UsageError(
                f"--gpu {gpu}: nbburst does not know which machines take this GPU; "
                "name a machine type with --machine-type"
            )
        for m in catalog:
            if m.family == "n1" and not m.shared_cpu and m.cpus >= cores and m.memory_mb / 1024 >= memory_gb - 1e-9:
                candidates.append((m, False))
        if custom_ok:
            candidates += [(m, True) for m in _custom_candidates(cores, memory_gb, {"n1"})]
    else:
        for m in catalog:
            if (
                m.shared_cpu
                or m.gpu
                or not _priced(m.family, prices)
                or m.family in ("g2", "a2", "a3")
                or m.cpus < cores
                or m.memory_mb / 1024 < memory_gb - 1e-9
            ):
                continue
            candidates.append((m, False))
        if custom_ok:
            families = {m.family for m in catalog if not m.shared_cpu}
            candidates += [(m, True) for m in _custom_candidates(cores, memory_gb, families & set(_CUSTOM))]

    if not candidates:
        biggest = max((m for m in catalog if not m.gpu), key=lambda m: (m.cpus, m.memory_mb), default=None)
        what = f"{cores} vCPUs and {memory_gb:g} GB" + (f" with {gpu_count} {gpu}" if gpu else "")
        hint = (
            f"; the biggest type there is {biggest.name} ({biggest.cpus} vCPUs, {biggest.memory_gb:g} GB)"
            if biggest
            else ""
        )
        raise UsageError(f"no machine type in zone {zone} has {what}{hint}")

    priced = []
    for m, custom in candidates:
        b = _price(m, gpu, gpu_count, spot, region, prices)
        priced.append((b.total, m.cpus - cores, custom, m.name, m, b))
    priced.sort(key=lambda t: t[:4])
    total, _, custom, _, m, b = priced[0]
    others = [(p[3], round(p[0], 4)) for p in priced[1:3]]
    what = f"≥{cores} vCPUs, ≥{memory_gb:g} GB" + (f", {gpu_count}x {gpu}" if gpu else "")
    reason = (
        f"{m.name}: the cheapest {kind} machine in {zone} with {what} "
        f"({m.cpus} vCPUs, {m.memory_gb:g} GB, ${total:.4f}/h)"
    )
    if others:
        reason += "; next: " + ", ".join(f"{n} ${p:.4f}/h" for n, p in others)
    if defaults:
        reason += " [" + "; ".join(defaults) + "]"
    chosen_gpu = gpu or m.gpu
    return Choice(m, chosen_gpu, gpu_count if gpu else m.gpu_count, b, custom, reason)


def _check_gpu_fits(m: MachineType, gpu: str | None, count: int) -> None:
    if not gpu:
        return
    if m.gpu:
        if m.gpu != gpu or m.gpu_count != count:
            raise UsageError(
                f"--machine-type {m.name} comes with {m.gpu_count} {m.gpu}; it cannot have --gpu {gpu}:{count}"
            )
        return
    if m.family != "n1":
        raise UsageError(
            f"--gpu {gpu}: GPUs attach only to N1 machine types, not {m.name}; "
            "drop --machine-type and nbburst picks a fitting one"
        )


#: GPUs whose quota metric is not named after the accelerator type (Compute Engine's ``Quota.metric`` enum).
_QUOTA_CORE = {"nvidia-h100-80gb": "H100"}


def gpu_quota_metric(gpu: str) -> str:
    """``nvidia-tesla-t4`` -> ``NVIDIA_T4_GPUS``; ``nvidia-a100-80gb`` -> ``NVIDIA_A100_80GB_GPUS``;
    ``nvidia-h100-80gb`` -> ``NVIDIA_H100_GPUS``."""
    core = _QUOTA_CORE.get(gpu) or gpu.removeprefix("nvidia-").removeprefix("tesla-").upper().replace("-", "_")
    return f"NVIDIA_{core}_GPUS"


def family_quota_metric(family: str) -> str:
    return f"{family.upper()}_CPUS"
