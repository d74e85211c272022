"""Which Compute Engine quotas one more VM needs, and the first one without room for it.

Pure functions over the quotas Compute Engine lists (``regions.get`` and ``projects.get``), so a plan is
refused before anything is paid for, with the metric to raise. A VM counts against:

* regional vCPUs: ``CPUS``; a spot VM counts against ``PREEMPTIBLE_CPUS`` instead when the region sets that
  quota (a limit above 0: a new project lists it at 0, which means not set);
* its machine family's regional quota (``N2_CPUS``, ``C2D_CPUS``, ``A2_CPUS``...) when the region lists one
  and the VM is on the standard vCPU quota;
* regional GPUs of its GPU model (``NVIDIA_T4_GPUS``...), or ``PREEMPTIBLE_NVIDIA_T4_GPUS`` for a spot VM
  when the region sets it. On-demand H100s are counted by a Cloud Quotas quota per GPU family that
  ``regions.get`` does not list (Compute Engine's metric enum has only their PREEMPTIBLE_ and COMMITTED_
  forms): a missing ``NVIDIA_H100_GPUS`` is left for the insert to judge;
* project-wide, spot or not: ``CPUS_ALL_REGIONS`` and ``GPUS_ALL_REGIONS``, which new projects often hold at
  32 vCPUs and 0 GPUs;
* regional ``IN_USE_ADDRESSES``, one for each external IP (8 in a new region), and ``SSD_TOTAL_GB`` for its
  pd-balanced boot disk (https://cloud.google.com/compute/resource-usage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import types as gce_types

#: Standard GPU quotas that regions.get does not list (see the module docstring).
UNLISTED_GPU_QUOTAS = frozenset({"NVIDIA_H100_GPUS"})
PROJECT_CPUS, PROJECT_GPUS = "CPUS_ALL_REGIONS", "GPUS_ALL_REGIONS"


@dataclass(frozen=True)
class Need:
    """What ``count`` alike VMs ask of the quotas (a ``--workers N`` job is N + 1 of them): each one's machine,
    GPUs, external IPs and GB of SSD boot disk, on spot or on the standard quotas."""

    machine: gce_types.MachineType
    gpu: str | None = None
    gpu_count: int = 0
    spot: bool = True
    count: int = 1
    external_ips: int = 0
    ssd_gb: int = 0


@dataclass(frozen=True)
class Shortfall:
    """A quota without room for the VM: ``limit`` None when the project has none listed at all."""

    metric: str
    where: str  # a region, or "all regions"
    need: float
    free: float
    limit: float | None
    spot: bool
    spot_quota: bool  # a spot VM counted against PREEMPTIBLE_CPUS (else against the standard CPUS)
    vms: int = 1  # how many such VMs (a --workers job's and its workers)

    def message(self, project: str, link: str) -> str:
        kind = "spot" if self.spot else "standard"
        if self.limit is None:
            return f"the project {project} has no {self.metric} quota in {self.where}; request it: {link}"
        note = ""
        if self.metric == "CPUS" and self.spot and not self.spot_quota:
            note = " (spot VMs use the CPUS quota when the region has no PREEMPTIBLE_CPUS quota)"
        advice = "Ask for fewer GPUs" if self.metric.endswith("_GPUS") else "Ask for fewer cores"
        if self.metric.startswith("PREEMPTIBLE_"):
            advice += "; or --on-demand (standard quota)"
        if self.metric == "IN_USE_ADDRESSES":
            advice = "Give VMs no external IP (`%burst config external_ip=false`)"
        if self.metric == "SSD_TOTAL_GB":
            advice = "Ask for a smaller boot disk (c.NBBurst.disk_gb)"
        if self.metric == PROJECT_GPUS and not self.limit:
            advice = f"The project can run no GPU at all until {PROJECT_GPUS} is raised (new projects have 0)"
        where = f"all regions of project {project}" if self.where == "all regions" else self.where
        what = f"this {kind} VM" if self.vms == 1 else f"{self.vms} {kind} VMs (the job's and {self.vms - 1} workers)"
        return (
            f"not enough quota for {what} in {where}: it needs {self.need:g} {self.metric}{note} but only "
            f"{max(self.free, 0):g} of {self.limit:g} are free. {advice}, or request more quota: {link}"
        )


def _listed(quotas: Any) -> dict[str, tuple[float, float]]:
    """metric -> (limit, usage) of the API's ``quotas`` list."""
    return {q.metric: (float(q.limit), float(q.usage)) for q in quotas}


def shortfall(regional: Any, project_wide: Any, region: str, need: Need) -> Shortfall | None:
    """The first quota (of ``regional`` then ``project_wide``, the API's lists) without room for what ``need``
    asks, or None."""
    machine, gpu, gpu_count, spot = need.machine, need.gpu, need.gpu_count, need.spot
    count, external_ips, ssd_gb = need.count, need.external_ips, need.ssd_gb
    quotas = _listed(regional)
    pre = quotas.get("PREEMPTIBLE_CPUS")
    spot_quota = spot and pre is not None and pre[0] > 0
    cpus = machine.cpus * count
    regional_needs: dict[str, float] = {"PREEMPTIBLE_CPUS" if spot_quota else "CPUS": cpus}
    if not spot_quota:
        regional_needs[gce_types.family_quota_metric(machine.family)] = cpus
    gpus = ((gpu_count or machine.gpu_count) if gpu else 0) * count
    if gpu:
        metric = gce_types.gpu_quota_metric(gpu)
        preemptible = quotas.get("PREEMPTIBLE_" + metric)
        if spot and preemptible is not None and preemptible[0] > 0:
            metric = "PREEMPTIBLE_" + metric
        regional_needs[metric] = gpus
    if external_ips:
        regional_needs["IN_USE_ADDRESSES"] = external_ips * count
    if ssd_gb:
        regional_needs["SSD_TOTAL_GB"] = ssd_gb * count
    for metric, amount in regional_needs.items():
        if metric not in quotas:
            if metric.endswith("_GPUS") and metric not in UNLISTED_GPU_QUOTAS:
                return Shortfall(metric, region, amount, 0, None, spot, spot_quota, count)
            continue  # no such quota here (a family without one of its own)
        found = _check(metric, region, amount, quotas[metric], spot, spot_quota, count)
        if found:
            return found
    project_quotas = _listed(project_wide)
    for metric, amount in ((PROJECT_CPUS, cpus), (PROJECT_GPUS, gpus)):
        if amount and metric in project_quotas:
            found = _check(metric, "all regions", amount, project_quotas[metric], spot, spot_quota, count)
            if found:
                return found
    return None


def room(regional: Any, region: str, metric: str, need: float) -> Shortfall | None:
    """Whether the region's quota ``metric`` (of ``regional``, the API's list) has room for ``need`` more: its
    Shortfall, or None (also when the region lists no such quota)."""
    quota = _listed(regional).get(metric)
    return _check(metric, region, need, quota, False, False, 1) if quota else None


def _check(
    metric: str, where: str, need: float, quota: tuple[float, float], spot: bool, spot_quota: bool, vms: int
) -> Shortfall | None:
    limit, usage = quota
    free = limit - usage
    return Shortfall(metric, where, need, free, limit, spot, spot_quota, vms) if need > free else None
