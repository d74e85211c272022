"""``nbburst doctor`` for the gce backend: what is set up, what is missing, and how to fix it.

Credentials, project and zone, the Compute API, the APIs a job uses (Compute, Storage, Secret Manager, Cloud
Billing), the bucket and who may use it (these credentials, the VMs' scopes and service account:
:mod:`~nbburst.machines.gce.access`), the network and subnetwork (with no external IP, Private Google Access),
the firewall rule that lets the notebook reach a session VM's relay (:mod:`~nbburst.machines.gce.firewall`),
the spot and standard quotas of the region and of the project (:mod:`~nbburst.machines.gce.quota`), the external
addresses and SSD disk a VM takes, and the image.

Read-only: it lists and reads (credentials, zone, bucket, quotas, image) and never creates anything
that costs money. It reads through the public names of :class:`~nbburst.machines.gce.context.GCEContext` (the
backend's settings and checks) and of the Compute layer (:mod:`nbburst.machines.gce.api`), never through the
backend's adapter.
"""

from __future__ import annotations

from typing import Any

from ... import config
from ...errors import BurstError
from ...protocol import pricing
from ...protocol.job import Resources
from ..base import Check
from . import api as gce_api
from . import firewall as gce_firewall
from . import quota as gce_quota
from . import types as gce_types
from .context import GCEContext


def doctor(context: GCEContext, resources: Resources | None = None) -> list[Check]:
    """The checks of ``nbburst doctor`` for the gce backend; never raises."""
    api = context.api
    checks: list[Check] = []

    def check(name: str, fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:
            message = exc.message if hasattr(exc, "message") and exc.message else str(exc)
            checks.append(Check(name, False, f"{type(exc).__name__}: {message}", fix=_fix_for(name, message)))
            return None

    def creds() -> Any:
        if api.endpoint:
            checks.append(
                Check("credentials", True, f"Compute Engine emulator at {api.endpoint} (anonymous credentials)")
            )
            return True
        c = api.credentials()
        who = getattr(c, "service_account_email", None) or getattr(c, "signer_email", None) or "user credentials"
        checks.append(Check("credentials", True, f"Application Default Credentials ({who})"))
        return True

    if not check("credentials", creds):
        return checks
    where = check("project and zone", lambda: (api.project, context.zone_setting(resources)))
    if not where:
        return checks
    checks.append(
        Check(
            "project and zone",
            True,
            f"project {where[0]}, zone {where[1]}"
            + (" (on a Vertex AI Workbench instance)" if context.on_workbench() else ""),
        )
    )

    def compute_api() -> Any:
        zones = context.zones_for(resources or Resources())
        zone = api.zone(zones[0])
        checks.append(Check("compute api", True, f"zone {zone.name} is {zone.status}"))
        return zones

    zones = check("compute api", compute_api)
    check("apis", lambda: checks.extend(_apis(context)))
    check("bucket", lambda: checks.extend(_bucket(context)))
    if not zones:
        return checks
    res = resources or Resources()
    check("network", lambda: checks.append(_network(context, pricing.region_of(zones[0]))))
    check("session firewall", lambda: checks.append(gce_firewall.check(context)))
    check("addresses and disks", lambda: checks.extend(_addresses_and_disks(context, pricing.region_of(zones[0]))))

    def quota() -> None:
        plan_zone = zones[0]
        catalog = api.machine_types(plan_zone)
        choice = gce_types.choose(
            res,
            catalog,
            plan_zone,
            pricing.table_for(context.settings),
            api.accelerator_types(plan_zone) if res.gpu else None,
        )
        for spot in (True, False):
            short = api.quota_shortfall(plan_zone, gce_quota.Need(choice.machine, choice.gpu, choice.gpu_count, spot))
            kind = "spot" if spot else "standard"
            if short:
                link = api.quota_link(short.metric)
                fix = f"request more quota: {link} ({short.metric})"
                checks.append(
                    Check(f"{kind} quota", False, short.message(api.project, link), warning=not spot, fix=fix)
                )
            else:
                checks.append(
                    Check(
                        f"{kind} quota",
                        True,
                        f"room for a {kind} {choice.machine.name} ({choice.machine.cpus} vCPUs) in "
                        f"{pricing.region_of(plan_zone)} and in the project's all-regions quotas",
                    )
                )

    check("quota", quota)

    def image() -> None:
        path, py, source = context.image_for(res)
        context.check_python(path, py)
        checks.append(
            Check(
                "image", True, f"{path} from {source}" + (f", Python {py}" if py else " (Python version not labelled)")
            )
        )

    check("image", image)
    return checks


#: The APIs a job uses: its VMs (Compute Engine), its Store (Cloud Storage), its key (Secret Manager) and its
#: prices (Cloud Billing, read for live prices; the dated table serves without it).
APIS = {
    "compute.googleapis.com": False,
    "storage.googleapis.com": False,
    "secretmanager.googleapis.com": False,
    "cloudbilling.googleapis.com": True,  # a warning only
}


def _apis(context: GCEContext) -> list[Check]:
    """Whether each API a job uses is on in the project (Service Usage); a warning when that cannot be read."""
    api = context.api
    try:
        off = [name for name in APIS if not api.service_enabled(name)]
    except BurstError as exc:
        return [Check("apis", False, f"not checked: {exc}", warning=True, fix="roles/serviceusage.serviceUsageViewer")]
    if not off:
        return [Check("apis", True, f"on in project {api.project}: {', '.join(APIS)}")]
    return [
        Check(
            "apis",
            False,
            f"off in project {api.project}: {', '.join(off)}",
            warning=all(APIS[name] for name in off),
            fix=f"gcloud services enable {' '.join(off)} --project {api.project}",
        )
    ]


def _network(context: GCEContext, region: str) -> Check:
    """The VMs' network and their subnetwork in ``region``: they exist, a custom-mode network has a subnetwork
    named, and VMs without an external IP reach Google's APIs through Private Google Access
    (https://cloud.google.com/vpc/docs/private-google-access) and packages through Cloud NAT or a mirror."""
    from google.api_core import exceptions as gexc

    settings, api = context.settings, context.api
    name = gce_api.resource_name(settings.network or "default")
    try:
        network = api.network(name)
    except gexc.NotFound:
        return Check(
            "network",
            False,
            f"network {name} does not exist in project {api.project}",
            fix="set c.NBBurst.network to one of `gcloud compute networks list`",
        )
    sub = settings.subnetwork or (network.name if network.auto_create_subnetworks else "")
    if not sub:
        return Check(
            "network",
            False,
            f"network {name} is a custom-mode network: a VM on it needs a subnetwork of {region}",
            fix=f"set c.NBBurst.subnetwork to one of `gcloud compute networks subnets list --network {name} "
            f"--regions {region}`",
        )
    try:
        subnet = api.subnetwork(region, sub)
    except gexc.NotFound:
        return Check(
            "network",
            False,
            f"subnetwork {gce_api.resource_name(sub)} does not exist in {region}",
            fix=f"set c.NBBurst.subnetwork to one of `gcloud compute networks subnets list --regions {region}`",
        )
    where = f"network {name}, subnetwork {subnet.name} in {region}"
    if settings.external_ip:
        return Check("network", True, f"{where}; VMs get an external IP (c.NBBurst.external_ip)")
    if not subnet.private_ip_google_access:
        return Check(
            "network",
            False,
            f"{where}: VMs have no external IP (external_ip is off) and the subnetwork has no Private Google "
            "Access, so they cannot reach Cloud Storage or Secret Manager",
            fix=f"gcloud compute networks subnets update {subnet.name} --region {region} "
            "--enable-private-ip-google-access; and for packages Cloud NAT on the network (`gcloud compute routers "
            "nats create`) or a baked image (`nbburst image build`)",
        )
    if settings.package_index:
        return Check("network", True, f"{where}: no external IP, Private Google Access on, packages from the index")
    return Check(
        "network",
        False,
        f"{where}: no external IP, Private Google Access on; no package index is set, so VMs reach PyPI only if "
        "the network has Cloud NAT",
        fix="Cloud NAT on the network (`gcloud compute routers nats create`), or a package index they reach "
        "(`%burst config package_index=https://MIRROR/simple`, $NBBURST_PACKAGE_INDEX), or a baked image "
        "(`nbburst image build`)",
        warning=True,
    )


def _addresses_and_disks(context: GCEContext, region: str) -> list[Check]:
    """Room in the region for one more VM's external IP (IN_USE_ADDRESSES) and boot disk (SSD_TOTAL_GB)."""
    settings, api = context.settings, context.api
    regional = api.region(region, "reading quotas").quotas
    out = []
    for metric, need, what in (
        ("IN_USE_ADDRESSES", 1 if settings.external_ip else 0, "an external IP"),
        ("SSD_TOTAL_GB", int(settings.disk_gb), f"a {settings.disk_gb} GB pd-balanced boot disk"),
    ):
        name = f"{metric.lower().replace('_', ' ')} quota"
        if not need:
            out.append(Check(name, True, "not needed: VMs get no external IP (external_ip is off)"))
            continue
        short = gce_quota.room(regional, region, metric, need)
        if short:
            link = api.quota_link(metric)
            out.append(Check(name, False, short.message(api.project, link), fix=f"request more quota: {link}"))
        else:
            out.append(Check(name, True, f"room in {region} for {what}"))
    return out


def _bucket(context: GCEContext) -> list[Check]:
    url = config.store_url(context.settings, "gce")
    if not url.startswith("gs://"):
        return [
            Check(
                "bucket",
                False,
                f"store root {url} is not a gs:// bucket",
                fix="set c.NBBurst.bucket (VMs read and write the job there)",
            )
        ]
    bucket_name = url[len("gs://") :].split("/", 1)[0]
    store = context.store_for(url)
    bucket = store.client.bucket(bucket_name)
    if not bucket.exists(timeout=30):
        return [
            Check(
                "bucket",
                False,
                f"gs://{bucket_name} does not exist",
                fix=f"gcloud storage buckets create gs://{bucket_name} --location=REGION "
                "--uniform-bucket-level-access --public-access-prevention",
            )
        ]
    out = [
        Check("bucket", True, f"gs://{bucket_name} exists (storage api reachable)"),
        *context.access_checks(bucket_name),
    ]
    try:
        bucket.reload(timeout=30)
        pap = bucket.iam_configuration.public_access_prevention
    except Exception:
        pap = None
    if pap == "enforced":
        out.append(Check("public access prevention", True, f"enforced on gs://{bucket_name}"))
    else:
        out.append(
            Check(
                "public access prevention",
                False,
                f"{pap or 'not known'} on gs://{bucket_name}: job inputs and results could be made public by an ACL",
                warning=True,
                fix=f"gcloud storage buckets update gs://{bucket_name} --public-access-prevention",
            )
        )
    return out


def _fix_for(name: str, message: str) -> str:
    low = message.lower()
    if "credentials" in low:
        return "gcloud auth application-default login (or run on Google Cloud with a service account)"
    if name == "project and zone":
        return "set c.NBBurst.project and c.NBBurst.zone (or $NBBURST_PROJECT / $NBBURST_ZONE)"
    if "not been used" in low or "disabled" in low or "api" in low and "enable" in low:
        return "gcloud services enable compute.googleapis.com storage.googleapis.com"
    if name == "bucket":
        return "check c.NBBurst.bucket and the account's Storage permissions"
    if name == "image":
        return "set c.NBBurst.image_family/image_project to an image with this notebook's Python (nbburst image build)"
    if name == "compute api":
        return (
            "check c.NBBurst.project and c.NBBurst.zone, and that these credentials may use Compute Engine there "
            "(roles/compute.instanceAdmin.v1)"
        )
    if name == "quota":
        return "let these credentials read the project's and region's quotas (roles/compute.viewer)"
    return "see docs/compute-engine-first-run.md in nbburst's repository (what a project needs once)"
