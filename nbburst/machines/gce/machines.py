"""GCEMachines: each machine is a Compute Engine VM (spot by default) running the agent.

Talks to Compute Engine with the google-cloud-compute clients. With
``c.NBBurst.compute_endpoint`` set (an emulator, see :mod:`nbburst.testing`)
they reach that endpoint with anonymous credentials; otherwise Application
Default Credentials and the real API.

What a launch does, in order (everything that can be refused is refused in
:meth:`GCEMachines.plan`, before anything is written or paid for):

* ``plan``: zone(s), the cheapest fitting machine type (``gce_types``), the
  image and its Python version (image label ``python=3-11``), the bucket, and
  the region's CPU/GPU quota for spot or standard VMs;
* ``launch``: uploads the client's nbburst wheel and the job's package list
  (``nbburst.protocol.dist``), then inserts the VM with a ``request_id`` (a retried
  insert never makes two VMs) and waits on the operation with its own
  ZoneOperationsClient. With ``--zone auto``, a zone out of capacity
  (ZONE_RESOURCE_POOL_EXHAUSTED) passes on to the next zone of the region.

The VM: labels ``nbburst=1``, ``nbburst-job``, ``nbburst-owner``; metadata
``nbburst-job-url``, ``nbburst-key`` (the per-job signing key, which never
enters the Store), ``nbburst-attempt`` and the startup/shutdown scripts
(``gce_scripts``); spot with ``instanceTerminationAction=STOP`` (the disk
stays for a restart) and a ``maxRunDuration`` of the job's time left plus a
margin, so Compute Engine itself ends a VM whose agent hangs.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import os
import re
import time
import uuid
from typing import Any

from ... import config
from ...errors import BurstError, UnsupportedOption, UsageError
from ...protocol import dist, pricing
from ...protocol.job import JobLayout, JobSpec, Resources
from ...protocol.metadata import metadata as _md
from ...protocol.metadata import on_gce
from ..base import GONE, PROVISIONING, RUNNING, STOPPED, STOPPING, Check, MachineInfo, Machines, Plan, machine_name
from . import scripts as gce_scripts
from . import types as gce_types

log = logging.getLogger("nbburst.gce")

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
_REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")
_STATES = {
    "PROVISIONING": PROVISIONING,
    "STAGING": PROVISIONING,
    "REPAIRING": PROVISIONING,
    "RUNNING": RUNNING,
    "STOPPING": STOPPING,
    "SUSPENDING": STOPPING,
    "TERMINATED": STOPPED,
    "STOPPED": STOPPED,
    "SUSPENDED": STOPPED,
}
_CAPACITY_CODES = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "STOCKOUT",
    "RESOURCE_POOL_EXHAUSTED",
)
_PREEMPTION_OPS = ("compute.instances.preempted", "compute.instances.terminateOnHostMaintenance")

NO_CREDENTIALS = (
    "no Google Cloud credentials: run `gcloud auth application-default login` (on a laptop), set "
    "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run on a Google Cloud VM or Vertex AI "
    "Workbench instance. To try nbburst offline, start the emulators: `python -m nbburst.testing`."
)


class _NoCapacity(Exception):
    pass


class NoCapacityError(BurstError):
    """No capacity for the VM now (the supervisor backs off and retries, see nbburst.client.supervisor)."""

    no_capacity = True

    def __init__(self, message: str, zone: str | None = None):
        super().__init__(message)
        self.zone = zone


class _NotOffered(Exception):
    pass


def _label(value: str) -> str:
    value = re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]
    return value or "unknown"


def _zone_of(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


def _timestamp(text: str) -> float:
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return 0.0


@functools.lru_cache(maxsize=8)
def _workbench(host: str) -> dict[str, str] | None:
    if not on_gce() or _md("instance/attributes/proxy-url", timeout=1.0) is None:
        return None
    return {
        "project": _md("project/project-id", timeout=2.0) or "",
        "zone": _zone_of(_md("instance/zone", timeout=2.0) or ""),
        "service_account": _md("instance/service-accounts/default/email", timeout=2.0) or "",
        "image": _md("instance/image", timeout=2.0) or "",
    }


def workbench() -> dict[str, str] | None:
    """Project, zone, service account and image of this Vertex AI Workbench instance; None elsewhere."""
    return _workbench(os.environ.get("GCE_METADATA_HOST", ""))


def python_of_labels(labels: dict[str, str]) -> str | None:
    """``python=3-11`` (or ``python-version``/``nbburst-python``) -> ``3.11``."""
    for key in ("python", "python-version", "nbburst-python"):
        raw = labels.get(key)
        if raw:
            parts = re.findall(r"\d+", raw)
            if len(parts) >= 2:
                return f"{parts[0]}.{parts[1]}"
            if len(parts) == 1 and len(parts[0]) >= 2:
                return f"{parts[0][0]}.{parts[0][1:]}"
    return None


def console_tail(text: str, lines: int = 15, width: int = 300) -> str:
    kept = [line.rstrip()[:width] for line in text.splitlines() if line.strip()]
    return "\n".join("    " + line for line in kept[-lines:]) or "    (the serial console is empty)"


class GCEMachines(Machines):
    backend = "gce"
    #: maxRunDuration = the job's time left + this margin (boot, install, the agent's own ending).
    run_margin_s = 600.0
    min_run_s = 30
    operation_timeout_s = 600.0
    catalog_ttl_s = 3600.0
    api_attempts = 4

    def __init__(self, settings: config.NBBurst):
        self.settings = settings
        self.endpoint = (settings.compute_endpoint or "").rstrip("/")
        self._creds: Any = None
        self._adc_project: str | None = None
        self._project: str | None = None
        self._clients: dict[str, Any] = {}
        self._zones: dict[str, str] = {}  # machine name -> zone
        self._catalogs: dict[str, tuple[float, list[gce_types.MachineType]]] = {}
        self._buckets_ok: set[str] = set()
        self._stores: dict[str, Any] = {}
        self.timings: dict[str, float] = {}  # of the last launch, in seconds (bench/launch.py)
        self.last_launch: dict[str, Any] = {}

    # -- clients ------------------------------------------------------------------------
    def _credentials(self) -> Any:
        if self._creds is None:
            if self.endpoint:
                from google.auth.credentials import AnonymousCredentials

                self._creds = AnonymousCredentials()
            else:
                import google.auth
                from google.auth import exceptions as auth_exc

                try:
                    self._creds, self._adc_project = google.auth.default(scopes=[CLOUD_PLATFORM])
                except auth_exc.DefaultCredentialsError:
                    raise UsageError(NO_CREDENTIALS) from None
        return self._creds

    def _client(self, name: str) -> Any:
        if name not in self._clients:
            from google.cloud import compute_v1

            kwargs: dict[str, Any] = {"credentials": self._credentials()}
            if self.endpoint:
                kwargs["client_options"] = {"api_endpoint": self.endpoint}
            self._clients[name] = getattr(compute_v1, name)(**kwargs)
        return self._clients[name]

    @property
    def instances(self) -> Any:
        return self._client("InstancesClient")

    @property
    def operations(self) -> Any:
        return self._client("ZoneOperationsClient")

    @property
    def project(self) -> str:
        if self._project is None:
            wb = workbench() if not self.settings.project else None
            project = self.settings.project or (wb or {}).get("project") or ""
            if not project and not self.endpoint:
                self._credentials()
                project = self._adc_project or ""
            project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT", "")
            if not project:
                raise UsageError(
                    "no Google Cloud project: set c.NBBurst.project, $NBBURST_PROJECT or "
                    "`%burst config project=ID` (or `gcloud config set project ID`)"
                )
            self._project = project
        return self._project

    def _api(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the API, retrying transient failures, and turn errors into readable ones."""
        import requests
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        delay = 1.0
        for attempt in range(self.api_attempts):
            try:
                return fn(*args, **kwargs)
            except (
                gexc.ServiceUnavailable,
                gexc.InternalServerError,
                gexc.GatewayTimeout,
                gexc.TooManyRequests,
                ConnectionError,
                requests.ConnectionError,
                requests.Timeout,
                auth_exc.TransportError,
            ) as exc:
                if attempt == self.api_attempts - 1:
                    raise BurstError(f"{what}: Compute Engine did not answer ({exc}); try again") from None
            except (auth_exc.DefaultCredentialsError, auth_exc.RefreshError) as exc:
                raise UsageError(f"{what}: {NO_CREDENTIALS} ({exc})") from None
            except gexc.Unauthorized as exc:
                raise UsageError(f"{what}: the credentials were refused ({exc.message}); {NO_CREDENTIALS}") from None
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    # -- where ------------------------------------------------------------------------------
    def _zone_setting(self, resources: Resources | None = None) -> str:
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
            zone = self._zone_setting()
        except UsageError:
            return None
        return zone if _ZONE_RE.match(zone) else None

    def _zones_for(self, resources: Resources) -> list[str]:
        """The zone to use, or with ``--zone auto`` (or a region) every zone of the region, preferred first."""
        zone = self._zone_setting(resources)
        if _ZONE_RE.match(zone):
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
        region = base if _REGION_RE.match(base) else pricing.region_of(base)
        if not _REGION_RE.match(region):
            raise UsageError(f"--zone {zone}: not a zone (us-central1-a), a region (us-central1) or auto")
        from google.api_core import exceptions as gexc

        try:
            info = self._api(
                "listing the zones", self._client("RegionsClient").get, project=self.project, region=region, timeout=30
            )
        except gexc.NotFound:
            raise UsageError(f"--zone: region {region} does not exist") from None
        zones = sorted(_zone_of(z) for z in info.zones)
        if base in zones:
            zones.remove(base)
            zones.insert(0, base)
        return zones

    # -- catalog ----------------------------------------------------------------------------
    def _catalog(self, zone: str) -> list[gce_types.MachineType]:
        cached = self._catalogs.get(zone)
        if cached and time.monotonic() - cached[0] < self.catalog_ttl_s:
            return cached[1]
        from google.api_core import exceptions as gexc

        try:
            listed = self._api(
                f"listing machine types of {zone}",
                self._client("MachineTypesClient").list,
                project=self.project,
                zone=zone,
                timeout=60,
            )
            catalog = [gce_types.MachineType.from_api(m) for m in listed]
        except (gexc.NotFound, gexc.BadRequest):
            raise UsageError(f"zone {zone} does not exist in Compute Engine (c.NBBurst.zone / --zone)") from None
        except gexc.Forbidden as exc:
            raise UsageError(
                f"cannot list machine types in project {self.project}: {exc.message}. Is the Compute "
                "Engine API enabled (`gcloud services enable compute.googleapis.com`) and may this "
                "account use it?"
            ) from None
        self._catalogs[zone] = (time.monotonic(), catalog)
        return catalog

    def _machine_type(self, zone: str, name: str) -> gce_types.MachineType | None:
        found = {m.name: m for m in self._catalog(zone)}.get(name)
        if found or not gce_types.custom_type(name):
            return found
        from google.api_core import exceptions as gexc

        try:
            got = self._api(
                "checking the machine type",
                self._client("MachineTypesClient").get,
                project=self.project,
                zone=zone,
                machine_type=name,
                timeout=30,
            )
        except (gexc.NotFound, gexc.BadRequest):
            return None
        return gce_types.MachineType.from_api(got)

    def _gpus(self, zone: str) -> set[str]:
        listed = self._api(
            f"listing GPUs of {zone}",
            self._client("AcceleratorTypesClient").list,
            project=self.project,
            zone=zone,
            timeout=60,
        )
        return {a.name for a in listed}

    # -- image --------------------------------------------------------------------------------
    def _image(self, resources: Resources) -> tuple[str, str | None, str]:
        """(image path ``projects/P/global/images/NAME``, its Python ``3.11`` or None, where it came from)."""
        image_project = self.settings.image_project or self.project
        wb = workbench()
        if resources.image:
            ref, source = resources.image, "--image"
        elif resources.image_family:
            ref, source = f"projects/{image_project}/global/images/family/{resources.image_family}", "--image-family"
        elif wb and wb.get("image") and not (self.settings.image or self.settings.image_family):
            ref, source = wb["image"], "this Workbench instance's image"
        elif self.settings.image:
            ref, source = self.settings.image, "c.NBBurst.image"
        elif self.settings.image_family:
            ref, source = (
                f"projects/{image_project}/global/images/family/{self.settings.image_family}",
                "c.NBBurst.image_family",
            )
        else:
            raise UsageError(
                "no VM image: set c.NBBurst.image_family (and image_project), or pass --image / "
                "--image-family; `nbburst image build` makes an image with this notebook's Python "
                "and packages"
            )
        m = re.search(r"(?:projects/([^/]+)/)?global/images/(family/)?([^/]+)$", ref)
        project, family, name = (
            (m.group(1) or image_project, m.group(2), m.group(3)) if m else (image_project, None, ref)
        )
        return self.lookup_image(project, name, bool(family), source)

    def lookup_image(self, project: str, name: str, family: bool, source: str) -> tuple[str, str | None, str]:
        """(``projects/P/global/images/NAME``, its python label or None, ``source``) of an image or family;
        a missing or forbidden one is a UsageError that names ``source``."""
        from google.api_core import exceptions as gexc

        images = self._client("ImagesClient")
        try:
            if family:
                img = self._api("resolving the image", images.get_from_family, project=project, family=name, timeout=30)
            else:
                img = self._api("resolving the image", images.get, project=project, image=name, timeout=30)
        except gexc.NotFound:
            what = f"image family {name}" if family else f"image {name}"
            raise UsageError(f"{source}: {what} does not exist in project {project}") from None
        except gexc.Forbidden as exc:
            raise UsageError(f"{source}: no access to images of project {project} ({exc.message})") from None
        return f"projects/{project}/global/images/{img.name}", python_of_labels(dict(img.labels)), source

    @staticmethod
    def _check_python(image: str, image_python: str | None) -> None:
        import platform

        here = ".".join(platform.python_version().split(".")[:2])
        if image_python and image_python != here:
            raise UsageError(
                f"the image {image} has Python {image_python} but this notebook runs Python {here}; pickles cannot "
                f"move between Python minor versions. Use an image with Python {here} (--image / --image-family; "
                "`nbburst image build` makes one)"
            )

    # -- bucket -------------------------------------------------------------------------------
    def _store(self, root: str) -> Any:
        if root not in self._stores:
            from ...store import open_store

            self._stores[root] = open_store(root)
        return self._stores[root]

    def _check_store(self) -> str:
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

        store = self._store(url)
        try:
            exists = store.client.bucket(bucket).exists(timeout=30)
        except (gexc.Forbidden, gexc.Unauthorized):
            exists = True  # no storage.buckets.get permission: the object writes will tell
        except Exception as exc:
            message = str(exc)
            if "credentials" in message.lower():
                raise UsageError(NO_CREDENTIALS) from None
            raise UsageError(f"cannot reach the bucket gs://{bucket}: {type(exc).__name__}: {message}") from None
        if not exists:
            raise UsageError(
                f"the bucket gs://{bucket} does not exist: create it with `gcloud storage buckets create "
                f"gs://{bucket} --location=REGION --uniform-bucket-level-access --public-access-prevention`, or set "
                "c.NBBurst.bucket to a bucket you can write to"
            )
        self._buckets_ok.add(bucket)
        return url

    # -- quota --------------------------------------------------------------------------------
    def _quota_problem(
        self, zone: str, machine: gce_types.MachineType, gpu: str | None, gpu_count: int, spot: bool
    ) -> str | None:
        region = pricing.region_of(zone)
        info = self._api(
            "reading quotas", self._client("RegionsClient").get, project=self.project, region=region, timeout=30
        )
        quotas = {q.metric: q for q in info.quotas}
        demand: dict[str, float] = {}
        pre = quotas.get("PREEMPTIBLE_CPUS")
        spot_quota = spot and pre is not None and pre.limit > 0
        demand["PREEMPTIBLE_CPUS" if spot_quota else "CPUS"] = machine.cpus
        if not spot_quota:
            family_metric = gce_types.family_quota_metric(machine.family)
            if family_metric in quotas:
                demand[family_metric] = machine.cpus
        gpus = {}
        if gpu:
            gpus[gpu] = gpu_count or machine.gpu_count
        for name, count in gpus.items():
            metric = gce_types.gpu_quota_metric(name)
            pq = quotas.get("PREEMPTIBLE_" + metric)
            if spot and pq is not None and pq.limit > 0:
                metric = "PREEMPTIBLE_" + metric
            demand[metric] = demand.get(metric, 0) + count
        kind = "spot" if spot else "standard"
        for metric, need in demand.items():
            q = quotas.get(metric)
            if q is None:
                if metric.endswith("_GPUS"):
                    return (
                        f"the project {self.project} has no {metric} quota in {region}; request it "
                        f"({self._quota_link(metric)})"
                    )
                continue
            free = q.limit - q.usage
            if need > free:
                fallback = ""
                if metric == "CPUS" and spot and not spot_quota:
                    fallback = " (spot VMs use the CPUS quota when the region has no PREEMPTIBLE_CPUS quota)"
                hint = "; or --on-demand (standard quota)" if spot and spot_quota else ""
                return (
                    f"not enough quota for this {kind} VM in {region}: it needs {need:g} {metric}{fallback} but "
                    f"only {max(free, 0):g} of {q.limit:g} are free. Ask for fewer cores{hint}, or request more "
                    f"quota: {self._quota_link(metric)}"
                )
        return None

    def _quota_link(self, metric: str) -> str:
        return f"https://console.cloud.google.com/iam-admin/quotas?project={self.project}&metric={metric}"

    # -- planning -----------------------------------------------------------------------------
    def plan(self, resources: Resources) -> Plan:
        if resources.workers:
            raise UnsupportedOption(
                "--workers: scaling out over several VMs (Dask) is not available on the gce "
                "backend yet; use --cores for a bigger VM"
            )
        self._check_store()
        zones = self._zones_for(resources)
        zone = zones[0]
        catalog = self._catalog(zone)
        if resources.machine_type and resources.machine_type not in {m.name for m in catalog}:
            extra = self._machine_type(zone, resources.machine_type)
            if extra is not None:
                catalog = [*catalog, extra]
        offered = self._gpus(zone) if resources.gpu else None
        prices = pricing.table_for(self.settings)
        choice = gce_types.choose(resources, catalog, zone, prices, offered)
        spot = not resources.on_demand
        image, image_python, image_source = self._image(resources)
        self._check_python(image, image_python)
        problem = self._quota_problem(zone, choice.machine, choice.gpu, choice.gpu_count, spot)
        if problem:
            raise UsageError(problem)
        py = f"Python {image_python}" if image_python else "Python version not labelled; the agent checks it"
        reason = f"{choice.reason}; image {image.rsplit('/', 1)[-1]} from {image_source} ({py})"
        if len(zones) > 1:
            reason += f"; zones to try: {', '.join(zones)}"
        m = choice.machine
        return Plan(
            machine_type=m.name,
            cores=m.cpus,
            memory_gb=round(m.memory_mb / 1024, 2),
            spot=spot,
            zone=zone,
            gpu=choice.gpu,
            gpu_count=choice.gpu_count if choice.gpu else 0,
            image=image,
            reason=reason,
            price_per_hour=round(choice.price.total, 6),
            on_demand_price_per_hour=round(choice.price.on_demand, 6),
            extra={
                "project": self.project,
                "zones": zones,
                "disk_gb": self.settings.disk_gb,
                "gpu_attached": choice.attached_gpu,
                "image_python": image_python,
                "custom": choice.custom,
            },
        )

    # -- the VM ---------------------------------------------------------------------------------
    def _max_run_s(self, spec: JobSpec) -> int:
        left = spec.created + spec.timeout_s - time.time()
        return int(max(self.min_run_s, left + self.run_margin_s))

    def _service_account(self) -> str:
        return self.settings.service_account or (workbench() or {}).get("service_account") or "default"

    def _scopes(self) -> list[str]:
        raw = getattr(self.settings, "scopes", "") or CLOUD_PLATFORM
        return [s for s in re.split(r"[\s,]+", raw) if s]

    def instance_resource(
        self, spec: JobSpec, job_url: str, key: bytes, attempt: int, zone: str, plan: dict[str, Any], spot: bool
    ) -> Any:
        from google.cloud import compute_v1

        name = machine_name(spec.job_id)
        gpu, gpu_count = plan.get("gpu"), int(plan.get("gpu_count") or 0)
        attached = bool(gpu) and (plan.get("extra") or {}).get("gpu_attached", False)
        items = {
            "nbburst-job-url": job_url,
            "nbburst-key": key.hex(),
            "nbburst-attempt": str(attempt),
            "startup-script": gce_scripts.startup_script(),
            "shutdown-script": gce_scripts.shutdown_script(),
        }
        if gpu:
            items["install-nvidia-driver"] = "True"
        scheduling = compute_v1.Scheduling(
            provisioning_model="SPOT" if spot else "STANDARD",
            instance_termination_action="STOP",
            max_run_duration=compute_v1.Duration(seconds=self._max_run_s(spec)),
            on_host_maintenance="TERMINATE" if spot or gpu else "MIGRATE",
            automatic_restart=False,
        )
        network = self.settings.network or "default"
        nic = compute_v1.NetworkInterface(
            network=network if "/" in network else f"global/networks/{network}",
            access_configs=[
                compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT", network_tier="PREMIUM")
            ],
        )
        if self.settings.subnetwork:
            sub = self.settings.subnetwork
            nic.subnetwork = sub if "/" in sub else f"regions/{pricing.region_of(zone)}/subnetworks/{sub}"
        resource = compute_v1.Instance(
            name=name,
            description=f"nbburst job {spec.name} ({spec.job_id})",
            machine_type=f"zones/{zone}/machineTypes/{plan['machine_type']}",
            labels={
                "nbburst": "1",
                "nbburst-job": spec.job_id,
                "nbburst-owner": _label(spec.owner or "unknown"),
                "nbburst-name": _label(spec.name),
            },
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in items.items()]),
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=plan["image"],
                        disk_size_gb=int(self.settings.disk_gb),
                        disk_type=f"zones/{zone}/diskTypes/pd-balanced",
                    ),
                )
            ],
            network_interfaces=[nic],
            scheduling=scheduling,
            service_accounts=[compute_v1.ServiceAccount(email=self._service_account(), scopes=self._scopes())],
        )
        if attached and gpu_count:
            resource.guest_accelerators = [
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{gpu}", accelerator_count=gpu_count
                )
            ]
        return resource

    def _wait(self, zone: str, operation: Any, what: str) -> Any:
        """Wait for a zone operation with our own client (same endpoint and credentials)."""
        from google.cloud import compute_v1

        name = operation.name
        deadline = time.monotonic() + self.operation_timeout_s
        while True:
            op = self._api(what, self.operations.wait, project=self.project, zone=zone, operation=name, timeout=120)
            if op.status == compute_v1.Operation.Status.DONE:
                return op
            if time.monotonic() > deadline:
                raise BurstError(
                    f"{what}: Compute Engine did not finish within {self.operation_timeout_s:g} s (operation {name})"
                )

    @staticmethod
    def _op_error(op: Any) -> tuple[list[str], str]:
        errors = list(op.error.errors) if op.error else []
        return [e.code for e in errors], "; ".join(e.message for e in errors)

    def _create(self, zone: str, resource: Any) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        request = compute_v1.InsertInstanceRequest(
            project=self.project, zone=zone, instance_resource=resource, request_id=str(uuid.uuid4())
        )
        what = f"creating VM {resource.name} in {zone}"
        try:
            op = self._api(what, self.instances.insert, request=request, timeout=60)
        except gexc.Conflict:
            return  # it exists: made by an earlier try of this very launch (the name is the job's)
        except gexc.Forbidden as exc:
            raise BurstError(
                f"{what}: {exc.message}"
                + (
                    f" — request more quota: {self._quota_link('CPUS')}"
                    if "quota" in exc.message.lower()
                    else " — the account needs the Compute Instance Admin role"
                    " and permission to use the service account"
                )
            ) from None
        except gexc.BadRequest as exc:
            if "does not exist in zone" in exc.message or "not available" in exc.message:
                raise _NotOffered(exc.message) from None
            raise BurstError(f"{what}: {exc.message}") from None
        except gexc.NotFound as exc:
            raise BurstError(f"{what}: {exc.message}") from None
        try:
            done = self._wait(zone, op, what)
        except BurstError:
            self._zones[resource.name] = zone
            try:  # we cannot tell how it went: never leave a VM behind that nobody waits for
                self.delete(resource.name)
            except Exception:
                log.warning(
                    "nbburst: could not delete %s after a failed launch; `nbburst gc` removes it", resource.name
                )
            raise
        codes, message = self._op_error(done)
        if any(c in _CAPACITY_CODES for c in codes):
            raise _NoCapacity(message or codes[0])
        if any("QUOTA" in c for c in codes):
            raise BurstError(f"{what}: {message} — request more quota: {self._quota_link('CPUS')}")
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")

    def _launch_zones(self, spec: JobSpec, plan: dict[str, Any]) -> list[str]:
        """The planned zones, unless the resources now name another zone (a supervisor moving the job)."""
        zones = list((plan.get("extra") or {}).get("zones") or [plan["zone"]])
        wanted = spec.resources.zone
        if wanted and _ZONE_RE.match(wanted) and wanted != plan.get("zone"):
            return [wanted]
        return zones

    def relaunch_zones(self, spec: JobSpec) -> list[str]:
        """Zones a supervisor may move a job to when its zone has no capacity (``--zone auto``)."""
        return list((spec.plan.get("extra") or {}).get("zones") or [])

    def launch(self, spec: JobSpec, job_url: str, key: bytes, attempt: int, *, skip_zones: tuple[str, ...] = ()) -> str:
        name = machine_name(spec.job_id)
        plan = spec.plan if spec.plan.get("image") else self.plan(spec.resources).to_dict()
        t0 = time.perf_counter()
        self._publish(spec, job_url, key)
        self.timings = {"upload_dist": time.perf_counter() - t0}
        zones = [z for z in self._launch_zones(spec, plan) if z not in skip_zones]
        spot = bool(plan.get("spot", True)) and not spec.resources.on_demand
        fallback = spot and (spec.resources.fallback_on_demand or self.settings.fallback_on_demand)
        tried: list[str] = []
        t1 = time.perf_counter()
        for use_spot in [spot] + ([False] if fallback else []):
            for zone in zones:
                resource = self.instance_resource(spec, job_url, key, attempt, zone, plan, use_spot)
                try:
                    self._create(zone, resource)
                except _NoCapacity:
                    tried.append(f"{zone} (no {'spot' if use_spot else 'on-demand'} capacity)")
                    continue
                except _NotOffered:
                    tried.append(f"{zone} ({plan['machine_type']} not offered)")
                    continue
                self._zones[name] = zone
                self.timings["insert"] = time.perf_counter() - t1
                self.last_launch = {"zone": zone, "tried": tried, "spot": use_spot}
                if tried:
                    log.warning("nbburst: %s started in %s after trying %s", name, zone, ", ".join(tried))
                return name
        kind = "spot" if spot else "on-demand"
        if len(zones) == 1 and len(tried) == 1 and tried[0].endswith("not offered)"):
            raise NoCapacityError(f"{plan['machine_type']} is not offered in zone {zones[0]}", zones[0])
        if len(zones) == 1 and len(tried) == 1:
            region = pricing.region_of(zones[0])
            raise NoCapacityError(
                f"zone {zones[0]} has no capacity for {plan['machine_type']} {kind} VMs right now "
                f"(ZONE_RESOURCE_POOL_EXHAUSTED). Try --zone auto (the other zones of {region}), "
                f"{'--on-demand, ' if spot else ''}another machine type, or again later",
                zones[0],
            )
        raise NoCapacityError(
            f"no capacity for {plan['machine_type']} {kind} VMs in any zone tried: {', '.join(tried)}. Try "
            f"{'--on-demand, ' if spot else ''}another region (c.NBBurst.zone) or machine type, or again later",
            zones[-1] if zones else None,
        )

    def _publish(self, spec: JobSpec, job_url: str, key: bytes) -> None:
        root, _, job_id = job_url.rstrip("/").rpartition("/jobs/")
        store, layout = self._store(root), JobLayout(job_id)
        if store.exists(layout.dist_manifest):
            return
        code = store.get(layout.code).decode(errors="replace") if spec.kind == "cell" else ""
        try:
            modules = list(json.loads(store.get(layout.inputs)).get("modules", {}).values())
        except Exception:
            modules = []
        dist.publish(store, layout, key, dist.requirements(code, modules))

    # -- finding a machine ------------------------------------------------------------------------
    def _get(self, name: str) -> tuple[Any, str] | None:
        """(instance, zone), or None when it does not exist."""
        from google.api_core import exceptions as gexc

        zone = self._zones.get(name) or self.default_zone()
        if zone:
            try:
                inst = self._api(
                    "describing the VM", self.instances.get, project=self.project, zone=zone, instance=name, timeout=30
                )
                self._zones[name] = zone
                return inst, zone
            except gexc.NotFound:
                if name in self._zones:
                    return None
        found = self._aggregated(f'name = "{name}"')
        if not found:
            return None
        inst, zone = found[0]
        self._zones[name] = zone
        return inst, zone

    def _aggregated(self, filter_: str) -> list[tuple[Any, str]]:
        from google.cloud import compute_v1

        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=filter_)
        out = []
        for scope, scoped in self._api("listing VMs", self.instances.aggregated_list, request=request, timeout=60):
            for inst in scoped.instances:
                out.append((inst, _zone_of(scope)))
        return out

    @staticmethod
    def _info(inst: Any, zone: str) -> MachineInfo:
        labels = dict(inst.labels)
        attrs = {i.key: i.value for i in inst.metadata.items}
        try:
            attempt = int(attrs.get("nbburst-attempt") or 0)
        except ValueError:
            attempt = 0
        return MachineInfo(
            name=inst.name,
            job_id=labels.get("nbburst-job", ""),
            state=_STATES.get(inst.status, PROVISIONING),
            attempt=attempt,
            created=_timestamp(inst.creation_timestamp),
            detail=f"{inst.status} {_zone_of(inst.machine_type)} in {zone}"
            + (" (spot)" if inst.scheduling.provisioning_model == "SPOT" else ""),
            labels=labels,
        )

    def describe(self, name: str) -> MachineInfo:
        found = self._get(name)
        if found is None:
            return MachineInfo(name=name, job_id="", state=GONE)
        return self._info(*found)

    def list(self, job_id: str | None = None) -> list[MachineInfo]:
        filter_ = 'labels.nbburst = "1"' + (f' labels.nbburst-job = "{job_id}"' if job_id else "")
        out = []
        for inst, zone in self._aggregated(filter_):
            self._zones[inst.name] = zone
            out.append(self._info(inst, zone))
        return sorted(out, key=lambda m: m.name)

    # -- lifecycle ----------------------------------------------------------------------------------
    def restart(self, name: str, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        """Start the stopped VM again (its disk keeps the venv and pip cache), or make a new one when it is
        gone, or elsewhere when the supervisor moves the job (another zone, on-demand)."""
        from google.cloud import compute_v1

        found = self._get(name)
        if found is None:
            return self.launch(spec, job_url, key, attempt)
        inst, zone = found
        if inst.status not in ("TERMINATED", "STOPPED"):
            raise BurstError(f"machine {name} is {inst.status}; it can be restarted once it has stopped")
        failure = self.boot_failure(name, found)
        if failure:
            raise BurstError(failure)  # starting it again would fail the same way
        wanted = spec.resources.zone
        moved = bool(wanted and _ZONE_RE.match(wanted) and wanted != zone)
        to_standard = spec.resources.on_demand and inst.scheduling.provisioning_model == "SPOT"
        if moved or to_standard:
            log.info(
                "nbburst: %s: replacing the VM in %s (%s)", name, zone, f"moving to {wanted}" if moved else "on-demand"
            )
            self.delete(name, wait=True)
            return self.launch(spec, job_url, key, attempt)
        self._set_attempt(inst, zone, attempt)
        what = f"starting VM {name} in {zone}"
        request = compute_v1.StartInstanceRequest(
            project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4())
        )
        op = self._api(what, self.instances.start, request=request, timeout=60)
        codes, message = self._op_error(self._wait(zone, op, what))
        if any(c in _CAPACITY_CODES for c in codes):
            raise NoCapacityError(f"{what}: zone {zone} has no capacity right now ({message or codes[0]})", zone)
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")
        return name

    def _set_attempt(self, inst: Any, zone: str, attempt: int) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        for _ in range(3):
            items = [
                compute_v1.Items(key=i.key, value=i.value) for i in inst.metadata.items if i.key != "nbburst-attempt"
            ]
            items.append(compute_v1.Items(key="nbburst-attempt", value=str(attempt)))
            request = compute_v1.SetMetadataInstanceRequest(
                project=self.project,
                zone=zone,
                instance=inst.name,
                request_id=str(uuid.uuid4()),
                metadata_resource=compute_v1.Metadata(fingerprint=inst.metadata.fingerprint, items=items),
            )
            try:
                op = self._api("updating the VM's metadata", self.instances.set_metadata, request=request, timeout=60)
            except gexc.PreconditionFailed:
                inst = self._api(
                    "describing the VM",
                    self.instances.get,
                    project=self.project,
                    zone=zone,
                    instance=inst.name,
                    timeout=30,
                )
                continue
            self._wait(zone, op, "updating the VM's metadata")
            return
        raise BurstError(f"could not update the metadata of {inst.name}: it kept changing")

    def delete(self, name: str, *, wait: bool = False) -> None:
        from google.api_core import exceptions as gexc

        found = self._get(name)
        if found is None:
            return
        from google.cloud import compute_v1

        zone = found[1]
        request = compute_v1.DeleteInstanceRequest(
            project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4())
        )
        try:
            op = self._api(f"deleting VM {name}", self.instances.delete, request=request, timeout=60)
        except gexc.NotFound:
            return
        if wait:
            self._wait(zone, op, f"deleting VM {name}")

    def cleanup(self, name: str) -> None:
        """The job ended: delete its VM unless it is gone or being deleted already (the agent deletes its own;
        a VM that could only power itself off is deleted here)."""
        found = self._get(name)
        if found is not None and "delete" not in self._operations_on(*found):
            self.delete(name)

    def _operations_on(self, inst: Any, zone: str, since: float = 0.0) -> set[str]:
        """Types of the zone operations on this VM (insert, delete, compute.instances.preempted, ...)."""
        from google.cloud import compute_v1

        request = compute_v1.ListZoneOperationsRequest(
            project=self.project, zone=zone, filter=f'targetId = "{inst.id}"'
        )
        return {
            op.operation_type
            for op in self._api("reading the VM's history", self.operations.list, request=request, timeout=30)
            if _timestamp(op.insert_time) >= since
        }

    def boot_failure(self, name: str, found: tuple[Any, str] | None = None) -> str | None:
        """Why a stopped VM is a failure rather than a preemption: its last boot ended before the agent
        could run the job (no Python, no nbburst install, job not readable), per its serial console.
        None when it was preempted or stopped for maintenance, or the agent did run."""
        found = found or self._get(name)
        if found is None:
            return None
        inst, zone = found
        if inst.status not in ("TERMINATED", "STOPPED"):
            return None
        if self._operations_on(inst, zone, since=_timestamp(inst.last_start_timestamp) - 1) & set(_PREEMPTION_OPS):
            return None  # preempted or ended for maintenance: a relaunch, not a failure
        console = self.console(name)
        last_boot = console[console.rfind("nbburst-startup: begin") :] if "nbburst-startup: begin" in console else ""
        if not last_boot:
            return None  # our script never ran (or the console is gone): nothing to blame it on
        exited = re.findall(r"nbburst-startup: agent exited with status (\d+)", last_boot)
        if "nbburst-startup: agent starting" in last_boot and not (exited and exited[-1] in ("2", "3")):
            return None
        return (
            f"the machine {name} stopped before the nbburst agent could run the job (a boot failure, not a "
            f"preemption). Last lines of its serial console:\n{console_tail(last_boot)}"
        )

    def preempt(self, name: str, grace_s: float) -> None:
        found = self._get(name)
        if found is None:
            raise UsageError(f"machine {name} does not exist (the job is not running)")
        zone = found[1]
        if self.endpoint and "googleapis.com" not in self.endpoint:
            import requests

            url = f"{self.endpoint}/emulator/projects/{self.project}/zones/{zone}/instances/{name}/preempt"
            resp = requests.post(url, json={"grace": grace_s}, timeout=30)
            if resp.status_code != 404:
                resp.raise_for_status()
                return
        self._api(
            f"preempting {name}",
            self.instances.simulate_maintenance_event,
            project=self.project,
            zone=zone,
            instance=name,
            timeout=60,
        )

    def console(self, name: str) -> str:
        from google.api_core import exceptions as gexc

        found = self._get(name)
        if found is None:
            return ""
        try:
            out = self._api(
                "reading the serial console",
                self.instances.get_serial_port_output,
                project=self.project,
                zone=found[1],
                instance=name,
                timeout=30,
            )
        except (gexc.NotFound, gexc.BadRequest):
            return ""
        return out.contents

    # -- doctor ---------------------------------------------------------------------------------------
    def doctor(self, resources: Resources | None = None) -> list[Check]:
        """Credentials, project and zone, the Compute and Storage APIs, the bucket, the spot and standard CPU
        quota for ``resources`` (default: the default machine), and the image (see gce_doctor)."""
        from .doctor import doctor

        return doctor(self, resources)
