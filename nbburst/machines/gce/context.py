"""GCEContext: the gce backend's settings and the checks on them, which its adapter and its tools share.

Where VMs go (project, zone or the zones of a region, a Vertex AI Workbench instance's own), what they boot
(the image and its Python), where their jobs cross (the gs:// bucket, and who may use it:
:mod:`~nbburst.machines.gce.access`), and what account and network they have. :class:`GCEMachines` (the port's
adapter) launches jobs' VMs with it; ``nbburst doctor`` (:mod:`.doctor`), ``nbburst image build``
(:mod:`.image`), ``nbburst setup`` (:mod:`.setup`) and the Store's watcher VM (:mod:`.watcher`) take it alone,
never the adapter.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Any

from ... import config
from ...errors import BurstError, UsageError
from ...protocol import pricing
from ...protocol.job import Resources
from ...protocol.metadata import metadata as _md
from ...protocol.metadata import on_gce
from ..base import Check
from . import access as gce_access
from . import api as gce_api
from . import keysecret as gce_keysecret
from . import types as gce_types

log = logging.getLogger("nbburst.gce")

ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")
#: The image a job boots when none is configured: a stock public image (see :mod:`.image`).
DEFAULT_IMAGE_PROJECT = "debian-cloud"
DEFAULT_IMAGE_FAMILY = "debian-12"


@functools.lru_cache(maxsize=8)
def _workbench(host: str) -> dict[str, str] | None:
    if not on_gce() or _md("instance/attributes/proxy-url", timeout=1.0) is None:
        return None
    return {
        "project": _md("project/project-id", timeout=2.0) or "",
        "zone": gce_api.resource_name(_md("instance/zone", timeout=2.0) or ""),
        "service_account": _md("instance/service-accounts/default/email", timeout=2.0) or "",
    }


def workbench() -> dict[str, str] | None:
    """Project, zone and service account of this Vertex AI Workbench instance; None elsewhere."""
    return _workbench(os.environ.get("GCE_METADATA_HOST", ""))


class GCEContext:
    """The gce backend's settings, its Compute layer (:class:`~nbburst.machines.gce.api.ComputeAPI`), its key
    secrets, and the choices and checks made from them."""

    def __init__(self, settings: config.NBBurst):
        self.settings = settings
        self.api = gce_api.ComputeAPI(settings.compute_endpoint or "", self._configured_project)
        self.key_secrets = gce_keysecret.KeySecrets(
            settings.secretmanager_endpoint, lambda: self.project, self.api.credentials
        )
        self._buckets_ok: set[str] = set()
        self._stores: dict[str, Any] = {}

    def _configured_project(self) -> str:
        return self.settings.project or (workbench() or {}).get("project") or ""

    def on_workbench(self) -> bool:
        """Whether this runs on a Vertex AI Workbench instance (whose project and zone are the defaults)."""
        return workbench() is not None

    @property
    def project(self) -> str:
        return self.api.project

    # -- where ------------------------------------------------------------------------------
    def zone_setting(self, resources: Resources | None = None) -> str:
        """The zone (or region, or ``auto``) asked for: ``--zone``, c.NBBurst.zone, this Workbench's zone."""
        zone = (resources.zone if resources else None) or self.settings.zone
        if not zone:
            zone = (workbench() or {}).get("zone", "")
        if not zone:
            raise UsageError(
                "no Compute Engine zone: set c.NBBurst.zone (e.g. us-central1-a, or a region such as "
                "us-central1 to try its zones), $NBBURST_ZONE, or `%burst config zone=...`"
            )
        return zone

    def default_zone(self) -> str | None:
        try:
            zone = self.zone_setting()
        except UsageError:
            return None
        return zone if ZONE_RE.match(zone) else None

    def zones_for(self, resources: Resources) -> list[str]:
        """The zone to use, or with ``--zone auto`` (or a region) every zone of the region, preferred first."""
        zone = self.zone_setting(resources)
        if ZONE_RE.match(zone):
            return [zone]
        base = None
        if zone == "auto":
            for candidate in (self.settings.zone, (workbench() or {}).get("zone", "")):
                if candidate and candidate != "auto":
                    base = candidate
                    break
            if not base:
                raise UsageError(
                    "--zone auto tries the zones of a region: set c.NBBurst.zone to a zone or region "
                    "(e.g. us-central1) first"
                )
        else:
            base = zone
        region = base if REGION_RE.match(base) else pricing.region_of(base)
        if not REGION_RE.match(region):
            raise UsageError(f"--zone {zone}: not a zone (us-central1-a), a region (us-central1) or auto")
        from google.api_core import exceptions as gexc

        try:
            info = self.api.region(region, "listing the zones")
        except gexc.NotFound:
            raise UsageError(f"--zone: region {region} does not exist") from None
        zones = sorted(gce_api.resource_name(z) for z in info.zones)
        if base in zones:
            zones.remove(base)
            zones.insert(0, base)
        return zones

    # -- image --------------------------------------------------------------------------------
    def image_for(self, resources: Resources) -> tuple[str, str | None, str]:
        """(image path ``projects/P/global/images/NAME``, its Python ``3.11`` or None, where it came from)."""
        image_project = self.settings.image_project or self.project
        if resources.image:
            ref, source = resources.image, "--image"
        elif resources.image_family:
            ref, source = f"projects/{image_project}/global/images/family/{resources.image_family}", "--image-family"
        elif resources.gpu and self.settings.gpu_image_family:  # an image with an NVIDIA driver
            gpu_project = self.settings.gpu_image_project or image_project
            ref = f"projects/{gpu_project}/global/images/family/{self.settings.gpu_image_family}"
            source = "c.NBBurst.gpu_image_family (--gpu)"
        elif self.settings.image:
            ref, source = self.settings.image, "c.NBBurst.image"
        elif self.settings.image_family:
            ref, source = (
                f"projects/{image_project}/global/images/family/{self.settings.image_family}",
                "c.NBBurst.image_family",
            )
        else:  # also on Workbench: its own image is private to Google, no VM can boot from it
            ref = f"projects/{DEFAULT_IMAGE_PROJECT}/global/images/family/{DEFAULT_IMAGE_FAMILY}"
            source = "the default stock image (the VM installs the notebook's Python and packages)"
        m = re.search(r"(?:projects/([^/]+)/)?global/images/(family/)?([^/]+)$", ref)
        project, family, name = (
            (m.group(1) or image_project, m.group(2), m.group(3)) if m else (image_project, None, ref)
        )
        return self.api.lookup_image(project, name, bool(family), source)

    @staticmethod
    def check_python(image: str, image_python: str | None) -> None:
        """UsageError when the image's Python is known and is not this notebook's minor version."""
        import platform

        here = ".".join(platform.python_version().split(".")[:2])
        if image_python and image_python != here:
            raise UsageError(
                f"the image {image} has Python {image_python} but this notebook runs Python {here}; pickles cannot "
                f"move between Python minor versions. Use an image with Python {here} (--image / --image-family; "
                "`nbburst image build` makes one)"
            )

    def boot_disk_gb(self, machine_type: str, image: str) -> int:
        """The boot disk's size for a VM of ``machine_type`` booting ``image``: c.NBBurst.disk_gb, or the image's
        own size when that is larger (Compute Engine refuses a disk smaller than its image). UsageError when the
        machine cannot boot the image: an Arm machine an x86 image, or the other way round."""
        size, arch = self.api.image_disk(image)
        wanted = gce_types.architecture(machine_type)
        if arch != wanted:
            hint = (
                "an Arm image (e.g. --image-family debian-12-arm64 with c.NBBurst.image_project=debian-cloud)"
                if wanted == "ARM64"
                else "an x86 image"
            )
            raise UsageError(
                f"the machine type {machine_type} runs {wanted} images but {image} is {arch}: use {hint}, or "
                "another machine type (--machine-type)"
            )
        return max(int(self.settings.disk_gb), size)

    def boot_disk(self, zone: str, machine_type: str, image: str) -> Any:
        """The boot disk of a VM of ``machine_type`` in ``zone`` booting ``image``: of the disk type its family takes
        (Hyperdisk Balanced for Hyperdisk-only families), at least as large as the image."""
        size = self.boot_disk_gb(machine_type, image)
        return gce_api.boot_disk(zone, image, size, gce_types.boot_disk_type(machine_type))

    # -- bucket -------------------------------------------------------------------------------
    def store_for(self, root: str) -> Any:
        """The Store at ``root`` (opened once)."""
        if root not in self._stores:
            from ...store import open_store

            self._stores[root] = open_store(root)
        return self._stores[root]

    def check_store(self) -> str:
        """The gs:// store root of the jobs; UsageError when VMs could not use it."""
        url = config.store_url(self.settings, "gce")
        if not url.startswith("gs://"):
            raise UsageError(
                f"the gce backend needs a gs:// store root that VMs can reach, not {url!r}: set "
                "c.NBBurst.bucket (or root=gs://BUCKET/PREFIX)"
            )
        bucket = url[len("gs://") :].split("/", 1)[0]
        if bucket in self._buckets_ok:
            return url
        from google.api_core import exceptions as gexc

        store = self.store_for(url)
        try:
            exists = store.client.bucket(bucket).exists(timeout=30)
        except (gexc.Forbidden, gexc.Unauthorized):
            exists = True  # no storage.buckets.get permission: the object writes will tell
        except Exception as exc:
            message = str(exc)
            if "credentials" in message.lower():
                raise UsageError(gce_api.NO_CREDENTIALS) from None
            raise UsageError(f"cannot reach the bucket gs://{bucket}: {type(exc).__name__}: {message}") from None
        if not exists:
            raise UsageError(
                f"the bucket gs://{bucket} does not exist: create it with `gcloud storage buckets create "
                f"gs://{bucket} --location=REGION --uniform-bucket-level-access --public-access-prevention`, or set "
                "c.NBBurst.bucket to a bucket you can write to"
            )
        checks = self.access_checks(bucket)
        for check in checks:
            if check.level == "warn":
                log.warning("nbburst: %s: %s (fix: %s)", check.name, check.detail, check.fix)
        refused = [f"{c.detail} (fix: {c.fix})" for c in checks if c.level == "fail"]
        if refused:
            raise UsageError("; ".join(refused))
        self._buckets_ok.add(bucket)
        return url

    def access_checks(self, bucket: str) -> list[Check]:
        """Who may use ``bucket`` (see :mod:`~nbburst.machines.gce.access`): these credentials, the VMs' scopes
        and their service account."""
        handle = self.store_for(config.store_url(self.settings, "gce")).client.bucket(bucket)
        checks = [gce_access.caller_access(handle), *gce_access.scope_checks(self.scopes())]
        from google.api_core import exceptions as gexc

        try:
            email = self.service_account_email()
        except (BurstError, gexc.GoogleAPICallError) as exc:  # the project's default account cannot be read
            return [*checks, Check("vm service account", False, f"not checked: {exc}", warning=True)]
        return [*checks, gce_access.service_account_access(handle, email), self.key_secrets.check()]

    # -- the VMs' account and network ----------------------------------------------------------------
    def service_account(self) -> str:
        """The service account the VMs run as: c.NBBurst.service_account, this Workbench's, or ``default``."""
        return self.settings.service_account or (workbench() or {}).get("service_account") or "default"

    def scopes(self) -> list[str]:
        """The VMs' OAuth scopes (c.NBBurst.scopes)."""
        raw = self.settings.scopes or gce_api.CLOUD_PLATFORM
        return [s for s in re.split(r"[\s,]+", raw) if s]

    def service_account_email(self) -> str:
        """The e-mail of the VMs' service account: c.NBBurst.service_account, this Workbench's, or the project's
        default compute service account."""
        chosen = self.service_account()
        return chosen if chosen != "default" else self.api.project_resource().default_service_account

    def service_accounts(self) -> list[Any]:
        """The service account a VM runs as (c.NBBurst.service_account, this Workbench's, or the default), with
        c.NBBurst.scopes."""
        from google.cloud import compute_v1

        return [compute_v1.ServiceAccount(email=self.service_account(), scopes=self.scopes())]

    def network_interface(self, zone: str) -> Any:
        """The network interface of a VM in ``zone`` (c.NBBurst.network, subnetwork and external_ip)."""
        return gce_api.network_interface(
            zone, self.settings.network, self.settings.subnetwork, self.settings.external_ip
        )
