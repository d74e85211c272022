"""What the emulated Compute Engine offers: regions, zones, machine types, GPUs, images, quotas.

The catalog is illustrative, shaped like the real one (names, sizes, which zone offers
what), not an authoritative copy of Google's.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field

API_ROOT = "https://www.googleapis.com/compute/v1/"


def link(project: str, *parts: str) -> str:
    """Full resource URL, as Compute Engine writes it in selfLink, zone, targetLink..."""
    return API_ROOT + "/".join(("projects", project) + parts)


def rfc3339(ts: float | None = None) -> str:
    """A timestamp in Compute's format, e.g. 2024-05-01T12:00:00.123+00:00."""
    ts = time.time() if ts is None else ts
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return f"{base}.{int(ts * 1000) % 1000:03d}+00:00"


def stable_id(*parts: str, digits: int = 19) -> int:
    """A numeric id derived from names (Compute ids are uint64 decimal strings)."""
    h = int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:8], "big")
    return 10 ** (digits - 1) + h % (9 * 10 ** (digits - 1))


def project_number(project: str) -> int:
    return stable_id("project", project, digits=12)


def default_service_account(project: str) -> str:
    """The e-mail of the project's default compute service account."""
    return f"{project_number(project)}-compute@developer.gserviceaccount.com"


REGION_ZONES: dict[str, list[str]] = {
    "us-central1": ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"],
    "us-east1": ["us-east1-b", "us-east1-c", "us-east1-d"],
    "europe-west4": ["europe-west4-a", "europe-west4-b", "europe-west4-c"],
}
ZONE_REGION = {z: r for r, zones in REGION_ZONES.items() for z in zones}
ALL_ZONES = frozenset(ZONE_REGION)


@dataclass(frozen=True)
class AcceleratorType:
    name: str
    description: str
    max_cards: int
    zones: frozenset[str]
    quota: str  # regional quota metric (PREEMPTIBLE_ prefixed for spot)


ACCELERATORS: dict[str, AcceleratorType] = {
    a.name: a
    for a in (
        AcceleratorType(
            "nvidia-tesla-t4",
            "NVIDIA T4",
            4,
            frozenset(
                {
                    "us-central1-a",
                    "us-central1-b",
                    "us-central1-c",
                    "us-central1-f",
                    "us-east1-c",
                    "us-east1-d",
                    "europe-west4-b",
                    "europe-west4-c",
                }
            ),
            "NVIDIA_T4_GPUS",
        ),
        AcceleratorType(
            "nvidia-l4",
            "NVIDIA L4",
            8,
            frozenset(
                {
                    "us-central1-a",
                    "us-central1-b",
                    "us-central1-c",
                    "us-east1-b",
                    "us-east1-d",
                    "europe-west4-a",
                    "europe-west4-b",
                    "europe-west4-c",
                }
            ),
            "NVIDIA_L4_GPUS",
        ),
        AcceleratorType(
            "nvidia-tesla-a100",
            "NVIDIA A100 40GB",
            16,
            frozenset(
                {
                    "us-central1-a",
                    "us-central1-b",
                    "us-central1-c",
                    "us-central1-f",
                    "us-east1-b",
                    "europe-west4-a",
                    "europe-west4-b",
                }
            ),
            "NVIDIA_A100_GPUS",
        ),
    )
}


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    shared_cpu: bool = False
    accelerator: str | None = None  # built-in GPUs (a2, g2)
    accelerator_count: int = 0

    @property
    def family(self) -> str:
        return self.name.split("-")[0] if not self.name.startswith("custom-") else "n1"

    @property
    def architecture(self) -> str:
        """Arm families run ARM64 images only, the others X86_64 ones
        (https://cloud.google.com/compute/docs/instances/arm-on-compute)."""
        return "ARM64" if self.family in ARM_FAMILIES else "X86_64"

    def accepts_disk_type(self, disk_type: str) -> bool:
        """Hyperdisk-only families (C4, C4A, N4...) refuse Persistent Disk types, and the older families (E2, N1,
        N2, C2D...) Hyperdisk Balanced (https://cloud.google.com/compute/docs/disks/hyperdisks#machine-type-support,
        https://cloud.google.com/compute/docs/general-purpose-machines#c4a_disks)."""
        hyperdisk = disk_type.startswith("hyperdisk-")
        if self.family in HYPERDISK_ONLY_FAMILIES:
            return hyperdisk
        return not hyperdisk or self.family in HYPERDISK_FAMILIES

    @property
    def accepts_guest_accelerators(self) -> bool:
        """Only N1 takes attached GPUs; A2 and G2 come with theirs."""
        return self.family == "n1"

    def description(self) -> str:
        gb = self.memory_mb / 1024
        text = f"{self.cpus} vCPU{'s' if self.cpus > 1 else ''}, {gb:g} GB RAM"
        if self.accelerator:
            text += f", {self.accelerator_count} {ACCELERATORS[self.accelerator].description} GPU"
        return text


#: Families whose CPUs are Arm (ARM64 images only).
ARM_FAMILIES = frozenset({"t2a", "c4a", "n4a"})
#: Families that take Hyperdisk only, for the boot disk too.
HYPERDISK_ONLY_FAMILIES = frozenset({"c4", "c4a", "c4d", "n4", "n4a", "n4d"})
#: Families that take Hyperdisk Balanced besides Persistent Disk.
HYPERDISK_FAMILIES = HYPERDISK_ONLY_FAMILIES | {"c3", "c3d", "a3", "m3"}


def _series(prefix: str, sizes, mb_per_cpu: int, **extra) -> list[MachineType]:
    return [MachineType(f"{prefix}-{n}", n, n * mb_per_cpu, **extra) for n in sizes]


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in [
        MachineType("e2-micro", 2, 1024, shared_cpu=True),
        MachineType("e2-small", 2, 2048, shared_cpu=True),
        MachineType("e2-medium", 2, 4096, shared_cpu=True),
        *_series("e2-standard", (2, 4, 8, 16, 32), 4096),
        *_series("e2-highmem", (2, 4, 8, 16), 8192),
        *_series("e2-highcpu", (2, 4, 8, 16, 32), 1024),
        *_series("n2-standard", (2, 4, 8, 16, 32, 48, 64, 80, 96, 128), 4096),
        *_series("n2-highmem", (2, 4, 8, 16, 32, 48, 64, 80), 8192),
        MachineType("n2-highmem-96", 96, 786432),
        MachineType("n2-highmem-128", 128, 884736),
        *_series("n2-highcpu", (2, 4, 8, 16, 32, 48, 64, 80, 96), 1024),
        *_series("c2d-standard", (2, 4, 8, 16, 32, 56, 112), 4096),
        *_series("c2d-highcpu", (2, 4, 8, 16, 32, 56, 112), 2048),
        *_series("n4-standard", (2, 4, 8, 16, 32, 48, 64, 80), 4096),
        MachineType("c4a-standard-1", 1, 4096),
        *_series("c4a-standard", (2, 4, 8, 16, 32, 48, 64, 72), 4096),
        MachineType("t2a-standard-1", 1, 4096),
        *_series("t2a-standard", (2, 4, 8, 16, 32, 48), 4096),
        MachineType("n1-standard-1", 1, 3840),
        *_series("n1-standard", (2, 4, 8, 16, 32, 64, 96), 3840),
        *[
            MachineType(f"g2-standard-{n}", n, gb * 1024, accelerator="nvidia-l4", accelerator_count=gpus)
            for n, gb, gpus in (
                (4, 16, 1),
                (8, 32, 1),
                (12, 48, 1),
                (16, 64, 1),
                (24, 96, 2),
                (32, 128, 1),
                (48, 192, 4),
                (96, 384, 8),
            )
        ],
        *[
            MachineType(f"a2-highgpu-{g}g", 12 * g, 87040 * g, accelerator="nvidia-tesla-a100", accelerator_count=g)
            for g in (1, 2, 4, 8)
        ],
    ]
}

# Zones that offer each family; families not listed are offered everywhere.
FAMILY_ZONES: dict[str, frozenset[str]] = {
    "g2": ACCELERATORS["nvidia-l4"].zones,
    "a2": ACCELERATORS["nvidia-tesla-a100"].zones,
    "c2d": ALL_ZONES - {"us-central1-f", "us-east1-c"},
}

# Regional per-family CPU quotas (E2 and N1 count only against CPUS).
FAMILY_CPU_QUOTA = {"n2": "N2_CPUS", "c2d": "C2D_CPUS", "a2": "A2_CPUS"}

_CUSTOM = re.compile(r"^(?:(n1|n2|e2|c2d)-)?custom-(\d+)-(\d+)(?:-ext)?$")


def machine_type(zone: str, name: str) -> MachineType | None:
    """The machine type `name` as offered in `zone`, or None if the zone does not offer it."""
    if zone not in ALL_ZONES:
        return None
    m = MACHINE_TYPES.get(name)
    if m is None:
        cm = _CUSTOM.match(name)
        if not cm:
            return None
        cpus, mem = int(cm.group(2)), int(cm.group(3))
        if cpus < 1 or mem % 256 or mem < 256 * cpus:
            return None
        m = MachineType(name, cpus, mem)
    if zone not in FAMILY_ZONES.get(m.family, ALL_ZONES):
        return None
    return m


def machine_types(zone: str) -> list[MachineType]:
    return [m for m in MACHINE_TYPES.values() if machine_type(zone, m.name)]


def machine_type_json(project: str, zone: str, m: MachineType) -> dict:
    out = {
        "kind": "compute#machineType",
        "id": str(stable_id("machineType", m.name, digits=7)),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": m.name,
        "description": m.description(),
        "guestCpus": m.cpus,
        "memoryMb": m.memory_mb,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 16 if m.shared_cpu else 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "selfLink": link(project, "zones", zone, "machineTypes", m.name),
        "isSharedCpu": m.shared_cpu,
        "architecture": m.architecture,
    }
    if m.accelerator:
        out["accelerators"] = [{"guestAcceleratorType": m.accelerator, "guestAcceleratorCount": m.accelerator_count}]
    return out


def accelerator_json(project: str, zone: str, a: AcceleratorType) -> dict:
    return {
        "kind": "compute#acceleratorType",
        "id": str(stable_id("acceleratorType", a.name, digits=5)),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": a.name,
        "description": a.description,
        "zone": link(project, "zones", zone),
        "selfLink": link(project, "zones", zone, "acceleratorTypes", a.name),
        "maximumCardsPerInstance": a.max_cards,
    }


def zone_json(project: str, zone: str) -> dict:
    region = ZONE_REGION[zone]
    return {
        "kind": "compute#zone",
        "id": str(stable_id("zone", zone, digits=4)),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": zone,
        "description": zone,
        "status": "UP",
        "region": link(project, "regions", region),
        "selfLink": link(project, "zones", zone),
        "availableCpuPlatforms": ["Intel Cascade Lake", "Intel Ice Lake", "AMD Milan"],
        "supportsPzs": False,
    }


# ---- quotas -------------------------------------------------------------------------------------

# A new project's quotas, as Compute Engine commonly grants them (the console's quota page says what a
# given project has): 24 vCPUs a region, 32 in all regions, and no GPU anywhere until one is requested
# (GPUS_ALL_REGIONS 0). Tests that need more say so: ComputeEmulator(quotas={...}) or set_quota().
DEFAULT_REGION_QUOTAS: dict[str, float] = {
    "CPUS": 24,
    # Listed at 0 in a new project, i.e. not set: spot usage then counts against CPUS, as on GCE.
    "PREEMPTIBLE_CPUS": 0,
    "N2_CPUS": 24,
    "C2D_CPUS": 24,
    "A2_CPUS": 0,
    "INSTANCES": 1000,
    "DISKS_TOTAL_GB": 102400,
    "SSD_TOTAL_GB": 81920,
    # Every external IP address a running VM holds counts against IN_USE_ADDRESSES (8 a region in a new
    # project): https://cloud.google.com/compute/resource-usage#external_ip_addresses
    "IN_USE_ADDRESSES": 8,
    "NVIDIA_T4_GPUS": 1,
    "PREEMPTIBLE_NVIDIA_T4_GPUS": 1,
    "NVIDIA_L4_GPUS": 1,
    "PREEMPTIBLE_NVIDIA_L4_GPUS": 1,
    "NVIDIA_A100_GPUS": 0,
    "PREEMPTIBLE_NVIDIA_A100_GPUS": 0,
}
DEFAULT_PROJECT_QUOTAS: dict[str, float] = {"CPUS_ALL_REGIONS": 32, "GPUS_ALL_REGIONS": 0}


def quota_demand(
    m: MachineType, accelerators: dict[str, int], spot: bool, disks: dict[str, int], external_ips: int = 0
) -> dict:
    """Quota metrics (before the PREEMPTIBLE_ fallback) that one running instance uses."""
    prefix = "PREEMPTIBLE_" if spot else ""
    d: dict[str, float] = {"INSTANCES": 1, prefix + "CPUS": m.cpus, "CPUS_ALL_REGIONS": m.cpus}
    if external_ips:
        d["IN_USE_ADDRESSES"] = external_ips
    if m.family in FAMILY_CPU_QUOTA:
        d[FAMILY_CPU_QUOTA[m.family]] = m.cpus
    gpus = dict(accelerators)
    if m.accelerator:
        gpus[m.accelerator] = gpus.get(m.accelerator, 0) + m.accelerator_count
    for name, count in gpus.items():
        metric = prefix + ACCELERATORS[name].quota
        d[metric] = d.get(metric, 0) + count
        d["GPUS_ALL_REGIONS"] = d.get("GPUS_ALL_REGIONS", 0) + count
    for metric, gb in disks.items():
        d[metric] = d.get(metric, 0) + gb
    return d


# ---- networks -----------------------------------------------------------------------------------


@dataclass
class Network:
    """A VPC network. An auto-mode one (the project's ``default``) has a subnetwork of its own name in every
    region; a custom-mode one only those it was given, so an instance on it must name one
    (https://cloud.google.com/vpc/docs/vpc#subnet-ranges). ``subnetworks``: region -> {name: whether Private
    Google Access is on (https://cloud.google.com/vpc/docs/private-google-access): a VM without an external
    IP reaches Google's APIs only through it}."""

    project: str
    name: str
    auto: bool = True
    subnetworks: dict[str, dict[str, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.auto:
            for region in REGION_ZONES:
                self.subnetworks.setdefault(region, {}).setdefault(self.name, False)

    def json(self) -> dict:
        return {
            "kind": "compute#network",
            "id": str(stable_id("network", self.project, self.name)),
            "name": self.name,
            "selfLink": link(self.project, "global", "networks", self.name),
            "autoCreateSubnetworks": self.auto,
            "subnetworks": [
                link(self.project, "regions", region, "subnetworks", name)
                for region, names in self.subnetworks.items()
                for name in names
            ],
            "routingConfig": {"routingMode": "REGIONAL"},
        }

    def subnetwork_json(self, region: str, name: str) -> dict:
        return {
            "kind": "compute#subnetwork",
            "id": str(stable_id("subnetwork", self.project, region, name)),
            "name": name,
            "network": link(self.project, "global", "networks", self.name),
            "region": link(self.project, "regions", region),
            "ipCidrRange": "10.128.0.0/20",
            "gatewayAddress": "10.128.0.1",
            "privateIpGoogleAccess": self.subnetworks[region][name],
            "selfLink": link(self.project, "regions", region, "subnetworks", name),
        }


# ---- organisation policies ------------------------------------------------------------------------

#: The organisation policy constraints an insert can violate, as the emulator enforces them
#: (https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints).
ORG_CONSTRAINTS = (
    "compute.vmExternalIpAccess",
    "compute.requireShieldedVm",
    "compute.trustedImageProjects",
    "gcp.resourceLocations",
)


# ---- images -------------------------------------------------------------------------------------


@dataclass
class Image:
    """An image. One made by ``images.insert`` from a disk has ``content``: a copy of that disk's
    folder, which becomes the first content of every instance disk made from the image.

    ``python``: a stock image's system Python minor version. Its instances' ``python3`` has nothing but the
    standard library, and (when that version is not this machine's) says it is that version; their PATH has
    no other Python and no uv (see :func:`nbburst.testing.compute.instance.stock_path`). None: an image
    prepared with this machine's Python and every package it has (its instances' ``python3`` is this one)."""

    project: str
    name: str
    family: str | None = None
    disk_size_gb: int = 10
    deprecated: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    status: str = "READY"  # PENDING while images.insert copies the disk
    description: str | None = None
    source_disk: str | None = None  # full URL of the disk it was made from
    source_disk_id: str | None = None
    content: str | None = None  # folder holding the disk's files
    #: Whether instances booted from it have a working NVIDIA driver (``nvidia-smi`` on their PATH when they
    #: have GPUs): Deep Learning VM images do, stock OS images do not. Not part of the API's image resource.
    nvidia_driver: bool = False
    python: str | None = None  # not part of the API's image resource either
    #: Whether it supports Shielded VM (UEFI, Secure Boot): Google's public images do, an imported one may not
    #: (https://cloud.google.com/compute/shielded-vm/docs/images).
    shielded: bool = True
    architecture: str = "X86_64"

    def json(self) -> dict:
        out = {
            "kind": "compute#image",
            "id": str(stable_id("image", self.project, self.name)),
            "creationTimestamp": rfc3339(self.created),
            "name": self.name,
            "description": f"{self.family or self.name} image" if self.description is None else self.description,
            "sourceType": "RAW",
            "status": self.status,
            "archiveSizeBytes": str(self.disk_size_gb * 2**28),
            "diskSizeGb": str(self.disk_size_gb),
            "selfLink": link(self.project, "global", "images", self.name),
            "labels": dict(self.labels),
            "architecture": self.architecture,
            "storageLocations": ["us"],
        }
        if self.family:
            out["family"] = self.family
        if self.source_disk:
            out["sourceDisk"] = self.source_disk
            out["sourceDiskId"] = self.source_disk_id or ""
        if self.deprecated:
            out["deprecated"] = {"state": "DEPRECATED"}
        if self.shielded:
            out["shieldedInstanceInitialState"] = {}
            out["guestOsFeatures"] = [{"type": "UEFI_COMPATIBLE"}, {"type": "VIRTIO_SCSI_MULTIQUEUE"}]
        return out


DEFAULT_IMAGE_PROJECT = "nbburst-images"
DEFAULT_IMAGE_FAMILY = "nbburst-py311"
#: A Deep Learning VM image family (CUDA 12.9, NVIDIA driver 580, Ubuntu 24.04), as Google publishes it.
GPU_IMAGE_PROJECT = "deeplearning-platform-release"
GPU_IMAGE_FAMILY = "common-cu129-ubuntu-2404-nvidia-580"


def default_images() -> list[Image]:
    t = time.time() - 86400
    return [
        Image(DEFAULT_IMAGE_PROJECT, "nbburst-py311-v1", DEFAULT_IMAGE_FAMILY, created=t),
        # Stock public images, with the system Python each one has.
        Image("debian-cloud", "debian-12-bookworm-v20240110", "debian-12", created=t, python="3.11"),
        Image("debian-cloud", "debian-13-trixie-v20250815", "debian-13", created=t, python="3.13"),
        Image(
            "debian-cloud",
            "debian-12-bookworm-arm64-v20240110",
            "debian-12-arm64",
            created=t,
            python="3.11",
            architecture="ARM64",
        ),
        Image("ubuntu-os-cloud", "ubuntu-2204-jammy-v20240126", "ubuntu-2204-lts", created=t, python="3.10"),
        Image(
            "ubuntu-os-cloud", "ubuntu-2404-noble-amd64-v20240701", "ubuntu-2404-lts-amd64", created=t, python="3.12"
        ),
        Image(
            GPU_IMAGE_PROJECT,
            f"{GPU_IMAGE_FAMILY}-v20261001",
            GPU_IMAGE_FAMILY,
            disk_size_gb=50,
            created=t,
            nvidia_driver=True,
        ),
    ]
