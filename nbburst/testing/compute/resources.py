"""Compute Engine errors and the checking of `instances.insert` bodies, as GCE does them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nbburst.testing.compute import catalog as cat


class ComputeError(Exception):
    """An API error; rendered as Compute's JSON error shape so the real client raises the
    matching `google.api_core.exceptions` class (404 NotFound, 409 Conflict, 403 Forbidden...)."""

    def __init__(self, code: int, reason: str, message: str, domain: str = "global"):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.domain = domain

    def payload(self) -> dict:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "errors": [{"message": self.message, "domain": self.domain, "reason": self.reason}],
            }
        }


def not_found(resource: str) -> ComputeError:
    return ComputeError(404, "notFound", f"The resource '{resource}' was not found")


def invalid(field_name: str, value, detail: str) -> ComputeError:
    return ComputeError(400, "invalid", f"Invalid value for field '{field_name}': '{value}'. {detail}")


NAME_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_URL_PREFIX = r"(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?"
_MACHINE_TYPE = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?zones/([^/]+)/machineTypes/([^/]+)$")
_ACCEL_TYPE = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?zones/([^/]+)/acceleratorTypes/([^/]+)$")
_IMAGE = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?global/images/(family/)?([^/]+)$")
_DISK = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?zones/([^/]+)/disks/([^/]+)$")
_DISK_TYPE = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?zones/([^/]+)/diskTypes/([^/]+)$")
METADATA_VALUE_LIMIT = 256 * 1024
TERMINATION_ACTIONS = ("STOP", "DELETE")


def check_name(name) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise invalid("resource.name", name or "", "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
    return name


def check_labels(labels) -> dict[str, str]:
    labels = dict(labels or {})
    if len(labels) > 64:
        raise invalid("resource.labels", "", "At most 64 labels are allowed.")
    for k, v in labels.items():
        if not _LABEL_KEY.match(k):
            raise invalid(
                "resource.labels",
                "",
                f"Label key '{k}' violates format constraints. The key must start with a "
                "lowercase character, can only contain lowercase letters, numeric characters, "
                "underscores and dashes. The key can be at most 63 characters long.",
            )
        if not isinstance(v, str) or not _LABEL_VALUE.match(v):
            raise invalid(
                "resource.labels",
                "",
                f"Label value '{v}' violates format constraints. The value can only contain "
                "lowercase letters, numeric characters, underscores and dashes. The value can be "
                "at most 63 characters long.",
            )
    return labels


def check_metadata_items(items) -> list[dict]:
    out, seen = [], set()
    for i, item in enumerate(items or []):
        key, value = item.get("key"), item.get("value", "")
        if not key or not re.match(r"^[a-zA-Z0-9-_]{1,128}$", key):
            raise invalid(
                f"resource.metadata.items[{i}].key", key or "", "Must be a match of regex '[a-zA-Z0-9-_]{1,128}'"
            )
        if key in seen:
            raise invalid("resource.metadata", "", f"Duplicate metadata key '{key}'.")
        if len(str(value).encode()) > METADATA_VALUE_LIMIT:
            raise invalid(
                f"resource.metadata.items[{i}].value", "...", f"Metadata value for key '{key}' exceeds 256 KB."
            )
        seen.add(key)
        out.append({"key": key, "value": str(value)})
    return out


@dataclass
class InstancePlan:
    """A checked insert body: the stored resource and what the emulator needs to run it."""

    resource: dict
    machine: cat.MachineType
    image: cat.Image | None
    accelerators: dict[str, int] = field(default_factory=dict)
    spot: bool = False
    disk_gb: dict[str, int] = field(default_factory=dict)  # quota metric -> GB
    external_ips: int = 0  # access configs: each holds an external IP (IN_USE_ADDRESSES)


def plan_instance(project: str, zone: str, body: dict, images, next_ip: str) -> InstancePlan:
    """Check an insert body as GCE does (ComputeError on the first problem) and build the
    instance resource that get/list will return."""
    name = check_name(body.get("name"))
    inst_link = cat.link(project, "zones", zone, "instances", name)

    mt_value = body.get("machineType") or ""
    m = _MACHINE_TYPE.match(mt_value)
    if not m:
        raise invalid(
            "resource.machineType",
            mt_value,
            "Must be a URL to a machine type resource, e.g. zones/ZONE/machineTypes/TYPE.",
        )
    if m.group(2) != zone:
        raise invalid(
            "resource.machineType", mt_value, f"Machine type zone '{m.group(2)}' does not match instance zone '{zone}'."
        )
    machine = cat.machine_type(zone, m.group(3))
    if machine is None:
        raise invalid(
            "resource.machineType", mt_value, f"Machine type with name '{m.group(3)}' does not exist in zone '{zone}'."
        )

    accelerators: dict[str, int] = {}
    guest_accels = []
    for i, ga in enumerate(body.get("guestAccelerators") or []):
        value = ga.get("acceleratorType") or ""
        fname = f"resource.guestAccelerators[{i}].acceleratorType"
        am = _ACCEL_TYPE.match(value)
        if not am:
            raise invalid(
                fname, value, "Must be a URL to an accelerator type resource, e.g. zones/ZONE/acceleratorTypes/TYPE."
            )
        accel = cat.ACCELERATORS.get(am.group(3))
        if accel is None or zone not in accel.zones or am.group(2) != zone:
            raise invalid(fname, value, f"Accelerator type '{am.group(3)}' does not exist in zone '{zone}'.")
        count = int(ga.get("acceleratorCount") or 0)
        if not 1 <= count <= accel.max_cards:
            raise invalid(
                f"resource.guestAccelerators[{i}].acceleratorCount",
                count,
                f"Accelerator count must be between 1 and {accel.max_cards}.",
            )
        if not machine.accepts_guest_accelerators:
            raise ComputeError(
                400, "badRequest", f"[{machine.name}, {accel.name}] features are not compatible for creating instance."
            )
        accelerators[accel.name] = accelerators.get(accel.name, 0) + count
        accel_link = cat.link(project, "zones", zone, "acceleratorTypes", accel.name)
        guest_accels.append({"acceleratorType": accel_link, "acceleratorCount": count})
    has_gpu = bool(accelerators) or bool(machine.accelerator)

    scheduling, spot = _plan_scheduling(body.get("scheduling") or {}, has_gpu)
    disks, image, disk_gb = _plan_disks(project, zone, name, body.get("disks") or [], images, machine)
    labels = check_labels(body.get("labels"))
    items = check_metadata_items((body.get("metadata") or {}).get("items"))

    nics = []
    for i, nic in enumerate(body.get("networkInterfaces") or []):
        out = {
            "kind": "compute#networkInterface",
            "name": f"nic{i}",
            "network": _full(project, nic.get("network") or "global/networks/default"),
            "subnetwork": _full(
                project, nic.get("subnetwork") or f"regions/{cat.ZONE_REGION[zone]}/subnetworks/default"
            ),
            "networkIP": next_ip,
            "stackType": "IPV4_ONLY",
            "fingerprint": "bmJidXJzdA==",
        }
        acs = nic.get("accessConfigs") or []
        if acs:
            out["accessConfigs"] = [
                {
                    "kind": "compute#accessConfig",
                    "type": "ONE_TO_ONE_NAT",
                    "name": ac.get("name") or "External NAT",
                    "natIP": "203.0.113." + next_ip.rsplit(".", 1)[1],
                    "networkTier": ac.get("networkTier") or "PREMIUM",
                }
                for ac in acs
            ]
        nics.append(out)

    accounts = []
    for sa in body.get("serviceAccounts") or []:
        email = sa.get("email") or "default"
        if email == "default":
            email = cat.default_service_account(project)
        accounts.append({"email": email, "scopes": list(sa.get("scopes") or [])})

    resource = {
        "kind": "compute#instance",
        "name": name,
        "description": body.get("description", ""),
        "tags": {"items": list((body.get("tags") or {}).get("items") or []), "fingerprint": "42WmSpB8rSM="},
        "machineType": cat.link(project, "zones", zone, "machineTypes", machine.name),
        "status": "PROVISIONING",
        "zone": cat.link(project, "zones", zone),
        "canIpForward": bool(body.get("canIpForward", False)),
        "networkInterfaces": nics,
        "disks": disks,
        "metadata": {"kind": "compute#metadata", "fingerprint": "", "items": items},
        "serviceAccounts": accounts,
        "selfLink": inst_link,
        "scheduling": scheduling,
        "cpuPlatform": "Unknown CPU Platform",
        "labels": labels,
        "labelFingerprint": "",
        "startRestricted": False,
        "deletionProtection": bool(body.get("deletionProtection", False)),
        "fingerprint": "",
        "lastStartTimestamp": "",
    }
    if guest_accels:
        resource["guestAccelerators"] = guest_accels
    if body.get("hostname"):
        resource["hostname"] = body["hostname"]
    external_ips = sum(len(nic.get("accessConfigs") or []) for nic in nics)
    return InstancePlan(resource, machine, image, accelerators, spot, disk_gb, external_ips)


_NETWORK = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?global/networks/([^/]+)$")
_SUBNETWORK = re.compile(_URL_PREFIX + r"(?:projects/([^/]+)/)?regions/([^/]+)/subnetworks/([^/]+)$")


def check_networks(project: str, zone: str, body: dict, networks: dict[tuple[str, str], cat.Network]) -> None:
    """Each interface's network must exist (404 as Google answers), and a custom-mode network needs a
    subnetwork of the instance's region named (400): https://cloud.google.com/vpc/docs/vpc#subnet-ranges,
    https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert (networkInterfaces[].subnetwork)."""
    region = cat.ZONE_REGION[zone]
    for i, nic in enumerate(body.get("networkInterfaces") or []):
        ref = nic.get("network") or "global/networks/default"
        m = _NETWORK.match(ref)
        if not m:
            raise invalid(f"resource.networkInterfaces[{i}].network", ref, "Must be a URL to a network resource.")
        net_project, net_name = m.group(1) or project, m.group(2)
        network = networks.get((net_project, net_name))
        if network is None:
            raise not_found(f"projects/{net_project}/global/networks/{net_name}")
        sub = nic.get("subnetwork") or ""
        if not sub:
            if not network.auto:
                raise invalid(
                    f"resource.networkInterfaces[{i}]",
                    "",
                    "Subnetwork should be specified for custom subnetmode network",
                )
            continue
        sm = _SUBNETWORK.match(sub)
        if not sm:
            raise invalid(f"resource.networkInterfaces[{i}].subnetwork", sub, "Must be a URL to a subnetwork resource.")
        if sm.group(2) != region or sm.group(3) not in network.subnetworks.get(region, {}):
            raise not_found(f"projects/{sm.group(1) or net_project}/regions/{sm.group(2)}/subnetworks/{sm.group(3)}")


def org_policy_violation(
    project: str, zone: str, plan: InstancePlan, policies: dict[str, list[str] | None]
) -> ComputeError | None:
    """The 412 conditionNotMet an insert gets from the first enforced organisation policy it violates, with
    Google's message (https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints;
    the wording as users report it, e.g. github.com/googlecodelabs/feedback/issues/695 for vmExternalIpAccess,
    github.com/fortinet/fortigate-terraform-deploy/issues/34 for requireShieldedVm).
    ``policies``: constraint -> the values it allows (None: a boolean constraint, or a list that allows none)."""
    name = plan.resource["name"]
    instance = f"projects/{project}/zones/{zone}/instances/{name}"
    image = plan.image

    def refused(message: str) -> ComputeError:
        return ComputeError(412, "conditionNotMet", message)

    for constraint, allowed in policies.items():
        values = allowed or []
        if constraint == "compute.vmExternalIpAccess" and plan.external_ips and instance not in values:
            return refused(
                f"Constraint constraints/compute.vmExternalIpAccess violated for project "
                f"{cat.project_number(project)}. Add instance {instance} to the constraint to use external IP "
                "with it."
            )
        if constraint == "compute.requireShieldedVm" and image is not None and not image.shielded:
            return refused(
                f"Constraint constraints/compute.requireShieldedVm violated for project projects/{project}. The boot "
                f"disk's 'initialize_params.source_image' field specifies a non-Shielded image: "
                f"projects/{image.project}/global/images/{image.name}. See "
                "https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints for "
                "more information."
            )
        if (
            constraint == "compute.trustedImageProjects"
            and image is not None
            and f"projects/{image.project}" not in values
        ):
            return refused(
                f"Constraint constraints/compute.trustedImageProjects violated for project {project}. Use of "
                f"images from project {image.project} is prohibited."
            )
        if constraint == "gcp.resourceLocations" and not {zone, cat.ZONE_REGION[zone]} & {
            v.removeprefix("in:").removesuffix("-locations") for v in values
        }:
            return refused(
                f"Location ZONE:{zone} violates constraint constraints/gcp.resourceLocations on the resource "
                f"{instance}."
            )
    return None


def _full(project: str, ref: str) -> str:
    if ref.startswith("https://"):
        return ref
    if ref.startswith("projects/"):
        return cat.API_ROOT + ref
    return cat.link(project, *ref.split("/"))


def _plan_scheduling(s: dict, has_gpu: bool) -> tuple[dict, bool]:
    model = s.get("provisioningModel") or "STANDARD"
    if model not in ("STANDARD", "SPOT"):
        raise invalid("resource.scheduling.provisioningModel", model, "Must be STANDARD or SPOT.")
    spot = model == "SPOT" or bool(s.get("preemptible"))
    ohm = s.get("onHostMaintenance") or ("TERMINATE" if spot or has_gpu else "MIGRATE")
    if ohm not in ("MIGRATE", "TERMINATE"):
        raise invalid("resource.scheduling.onHostMaintenance", ohm, "Must be MIGRATE or TERMINATE.")
    restart = s.get("automaticRestart")
    restart = (not spot) if restart is None else bool(restart)
    if spot and ohm != "TERMINATE":
        raise ComputeError(
            400,
            "invalid",
            "Invalid value for field 'resource.scheduling.onHostMaintenance': "
            f"'{ohm}'. Scheduling must have preemptible be false when OnHostMaintenance "
            "isn't TERMINATE.",
        )
    if spot and restart:
        raise ComputeError(
            400,
            "invalid",
            "Invalid value for field 'resource.scheduling.automaticRestart': "
            "'true'. Scheduling must have preemptible be false when AutomaticRestart is true.",
        )
    if has_gpu and ohm == "MIGRATE":
        raise ComputeError(400, "badRequest", "Instances with guest accelerators do not support live migration.")
    out = {"onHostMaintenance": ohm, "automaticRestart": restart, "preemptible": spot, "provisioningModel": model}
    action = s.get("instanceTerminationAction")
    if action is not None and action not in TERMINATION_ACTIONS:
        raise invalid("resource.scheduling.instanceTerminationAction", action, "Must be STOP or DELETE.")
    mrd = s.get("maxRunDuration")
    if spot or action or mrd:
        out["instanceTerminationAction"] = action or "STOP"
    if mrd:
        seconds = int(mrd.get("seconds") or 0)
        if not MIN_RUN_S <= seconds <= MAX_RUN_S:  # https://cloud.google.com/compute/docs/instances/limit-vm-runtime
            raise invalid(
                "resource.scheduling.maxRunDuration.seconds",
                seconds,
                f"Must be between {MIN_RUN_S} seconds and {MAX_RUN_S // 86400} days.",
            )
        out["maxRunDuration"] = {"seconds": str(seconds), "nanos": int(mrd.get("nanos") or 0)}
    return out, spot


#: The shortest and longest maxRunDuration Compute Engine takes (tests shorten VM time with the emulator's
#: ``time_scale``, never with a shorter limit).
MIN_RUN_S, MAX_RUN_S = 30, 120 * 86400


def _plan_disks(project: str, zone: str, name: str, disks: list, images, machine: cat.MachineType):
    out, image, gb = [], None, {}
    if not any(d.get("boot") for d in disks):
        raise invalid("resource.disks", "", "Boot disk must be specified.")
    for i, d in enumerate(disks):
        ip = d.get("initializeParams")
        src = d.get("source")
        if src and not ip:
            dm = _DISK.match(src)
            raise not_found(
                f"projects/{(dm and dm.group(1)) or project}/zones/{zone}/disks/{dm.group(3) if dm else src}"
            )
        ip = ip or {}
        disk_image = None
        if ip.get("sourceImage"):
            disk_image = resolve_image(project, ip["sourceImage"], images)
            if disk_image.status != "READY":
                raise ComputeError(
                    400,
                    "resourceNotReady",
                    f"The resource 'projects/{disk_image.project}/global/images/{disk_image.name}' is not ready",
                )
        elif d.get("boot"):
            raise invalid(f"resource.disks[{i}].initializeParams.sourceImage", "", "A boot disk needs a source image.")
        min_gb = disk_image.disk_size_gb if disk_image else 10
        size = int(ip.get("diskSizeGb") or min_gb)
        if size < min_gb:
            raise invalid(
                f"resource.disks[{i}].initializeParams.diskSizeGb",
                size,
                f"Requested disk size cannot be smaller than the image size ({min_gb} GB)",
            )
        dtype = "pd-standard"
        if ip.get("diskType"):
            tm = _DISK_TYPE.match(ip["diskType"])
            if not tm:
                raise invalid(
                    f"resource.disks[{i}].initializeParams.diskType",
                    ip["diskType"],
                    "Must be a URL to a disk type resource.",
                )
            dtype = tm.group(3)
        if not machine.accepts_disk_type(dtype):  # see MachineType.accepts_disk_type for Google's pages
            raise ComputeError(
                400, "badRequest", f"[{machine.name}, {dtype}] features are not compatible for creating instance."
            )
        if disk_image is not None and disk_image.architecture != machine.architecture:
            # https://cloud.google.com/compute/docs/instances/arm-on-compute: an Arm VM boots ARM64 images only
            raise invalid(
                f"resource.disks[{i}].initializeParams.sourceImage",
                ip["sourceImage"],
                f"The architecture of the image ({disk_image.architecture}) is not compatible with the machine "
                f"type {machine.name} ({machine.architecture}).",
            )
        if not dtype.startswith("hyperdisk-"):  # Hyperdisk has quotas of its own, not kept here
            metric = "DISKS_TOTAL_GB" if dtype == "pd-standard" else "SSD_TOTAL_GB"
            gb[metric] = gb.get(metric, 0) + size
        if d.get("boot"):
            image = disk_image
        disk_name = ip.get("diskName") or (name if i == 0 else f"{name}-{i}")
        entry = {
            "kind": "compute#attachedDisk",
            "type": d.get("type") or "PERSISTENT",
            "mode": d.get("mode") or "READ_WRITE",
            "source": cat.link(project, "zones", zone, "disks", disk_name),
            "deviceName": d.get("deviceName") or f"persistent-disk-{i}",
            "index": i,
            "boot": bool(d.get("boot")),
            "autoDelete": bool(d.get("autoDelete", False)),
            "interface": d.get("interface") or "SCSI",
            "diskSizeGb": str(size),
            "architecture": disk_image.architecture if disk_image else "X86_64",
        }
        if disk_image:
            license_name = disk_image.family or "image"
            entry["licenses"] = [cat.link(disk_image.project, "global", "licenses", license_name)]
        out.append(entry)
    return out, image, gb


def resolve_image(project: str, ref: str, images) -> cat.Image:
    """An image reference (`projects/P/global/images/family/F`, `.../images/NAME`, full URL)."""
    m = _IMAGE.match(ref)
    if not m:
        raise invalid("resource.disks[0].initializeParams.sourceImage", ref, "Must be a URL to an image resource.")
    img_project = m.group(1) or project
    if m.group(2):
        return image_from_family(img_project, m.group(3), images)
    return get_image(img_project, m.group(3), images)


def get_image(project: str, name: str, images) -> cat.Image:
    for img in images:
        if img.project == project and img.name == name:
            return img
    raise not_found(f"projects/{project}/global/images/{name}")


def image_from_family(project: str, family: str, images) -> cat.Image:
    """The newest image of the family that is READY and not deprecated."""
    found = [
        i for i in images if i.project == project and i.family == family and not i.deprecated and i.status == "READY"
    ]
    if not found:
        raise not_found(f"projects/{project}/global/images/family/{family}")
    return max(found, key=lambda i: i.created)


@dataclass
class ImagePlan:
    """A checked `images.insert` body (from a disk: the only source the emulator keeps)."""

    name: str
    family: str | None
    labels: dict[str, str]
    description: str | None
    disk_project: str
    disk_zone: str
    disk_name: str
    force: bool = False


def plan_image(project: str, body: dict, images, force_create: bool = False) -> ImagePlan:
    """Check an images.insert body as GCE does (ComputeError on the first problem)."""
    name = check_name(body.get("name"))
    family = body.get("family") or None
    if family is not None and not NAME_RE.match(family):
        raise invalid("resource.family", family, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
    labels = check_labels(body.get("labels"))
    if any(i.project == project and i.name == name for i in images):
        raise ComputeError(
            409, "alreadyExists", f"The resource 'projects/{project}/global/images/{name}' already exists"
        )
    source = body.get("sourceDisk") or ""
    if not source:
        other = [k for k in ("sourceImage", "sourceSnapshot", "rawDisk") if body.get(k)]
        if other:
            raise invalid(f"resource.{other[0]}", "", "The compute emulator makes images from a sourceDisk only.")
        raise ComputeError(400, "required", "Required field 'resource.sourceDisk' not specified")
    m = _DISK.match(source)
    if not m:
        raise invalid(
            "resource.sourceDisk",
            source,
            "Must be a URL to a disk resource, e.g. projects/PROJECT/zones/ZONE/disks/DISK.",
        )
    return ImagePlan(
        name, family, labels, body.get("description"), m.group(1) or project, m.group(2), m.group(3), force_create
    )
