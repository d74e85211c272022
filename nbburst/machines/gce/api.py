"""The one public layer over the Compute Engine API: clients, retries, operations and lookups.

GCEMachines (a job's VM), the image builder and ``nbburst doctor`` send the same requests to the same
endpoint with the same credentials; they retry the same transient failures and wait on operations the
same way. So all of that lives here, once, behind public names; none of them builds a client itself.

* Clients are google-cloud-compute's (REST). With an endpoint (an emulator, see :mod:`nbburst.testing`)
  they reach it through ``client_options.api_endpoint`` with anonymous credentials; otherwise with
  Application Default Credentials and the real API.
* :meth:`ComputeAPI.call` retries what is worth retrying (5xx, 429, lost connections) and turns missing or
  refused credentials into a readable UsageError; the Compute errors callers map themselves (NotFound,
  Conflict, Forbidden...) pass through as google-api-core exceptions.
* :meth:`ComputeAPI.wait` waits on an operation with our own ZoneOperationsClient or
  GlobalOperationsClient: ``Operation.result()`` polls through an internal client built without our
  endpoint, which would reach the real API from under an emulator.
* Inserts carry a ``request_id``, so a retried insert never makes two VMs or images.
* Compute Engine's refusals are read here, once: a zone out of capacity (in an operation or answered on the
  insert itself, 503 ZONE_RESOURCE_POOL_EXHAUSTED...) is the port's NoCapacity (:func:`no_capacity`), never a
  transient fault to retry; an organisation policy's 412 conditionNotMet is a UsageError that names the
  constraint and the fix (:func:`policy_refusal`).

The google-cloud-compute modules are imported on first use: importing them costs about a second.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from ...errors import BurstError, UsageError
from ...protocol import pricing
from ...protocol.durations import format_duration
from ..base import NoCapacity
from . import quota as gce_quota
from . import types as gce_types

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"

NO_CREDENTIALS = (
    "no Google Cloud credentials: run `gcloud auth application-default login` (on a laptop), set "
    "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run on a Google Cloud VM or Vertex AI "
    "Workbench instance. To try nbburst offline, start the emulators: `python -m nbburst.testing`."
)


# -- values in and out of the API ---------------------------------------------------------------------------


def label(value: str) -> str:
    """``value`` as a label value: lowercase letters, digits, ``_`` and ``-``, at most 63 characters."""
    value = re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]
    return value or "unknown"


def resource_name(link: str) -> str:
    """The last part of a resource URL or path: ``.../zones/us-central1-a`` -> ``us-central1-a``."""
    return link.rstrip("/").rsplit("/", 1)[-1]


def timestamp(text: str) -> float:
    """An RFC 3339 time of the API (``creationTimestamp``...) in seconds since the epoch; 0 when unreadable."""
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return 0.0


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
    """The last non-blank ``lines`` of a serial console, indented, each cut to ``width`` characters."""
    kept = [line.rstrip()[:width] for line in text.splitlines() if line.strip()]
    return "\n".join("    " + line for line in kept[-lines:]) or "    (the serial console is empty)"


def operation_errors(op: Any) -> tuple[list[str], str]:
    """(error codes, their messages joined) of a finished operation; ([], "") when it succeeded."""
    errors = list(op.error.errors) if op.error else []
    return [e.code for e in errors], "; ".join(e.message for e in errors)


def instance_metadata(items: dict[str, str]) -> Any:
    """Instance metadata holding ``items``."""
    from google.cloud import compute_v1

    return compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in items.items()])


def boot_disk(zone: str, image: str, size_gb: int, disk_type: str = "pd-balanced") -> Any:
    """A boot disk of ``disk_type`` (:func:`~nbburst.machines.gce.types.boot_disk_type` of the machine) made from
    ``image``, deleted with its VM."""
    from google.cloud import compute_v1

    return compute_v1.AttachedDisk(
        boot=True,
        auto_delete=True,
        initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=image, disk_size_gb=int(size_gb), disk_type=f"zones/{zone}/diskTypes/{disk_type}"
        ),
    )


def network_interface(zone: str, network: str = "", subnetwork: str = "", external_ip: bool = True) -> Any:
    """An interface on ``network`` (a name or a path; ``default`` when empty), in ``subnetwork`` when given;
    with ``external_ip`` an external address (the VM reaches Cloud Storage and the package index directly),
    without one no access config at all: the subnetwork's Private Google Access and Cloud NAT are its way out
    (https://cloud.google.com/vpc/docs/private-google-access)."""
    from google.cloud import compute_v1

    network = network or "default"
    nic = compute_v1.NetworkInterface(network=network if "/" in network else f"global/networks/{network}")
    if external_ip:
        nic.access_configs = [
            compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT", network_tier="PREMIUM")
        ]
    if subnetwork:
        region = pricing.region_of(zone)
        nic.subnetwork = subnetwork if "/" in subnetwork else f"regions/{region}/subnetworks/{subnetwork}"
    return nic


# -- Compute Engine's refusals ---------------------------------------------------------------------------------

#: What Compute Engine says when a zone has no machine for a request now, in an operation's error codes or in
#: the 503 that answers the insert itself (https://cloud.google.com/compute/docs/resource-error).
CAPACITY_CODES = (
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "STOCKOUT",
    "RESOURCE_POOL_EXHAUSTED",
)
_CAPACITY_TEXT = ("does not have enough resources", "resource pool exhausted", "no capacity", "insufficient capacity")


def is_capacity(codes: list[str], message: str) -> bool:
    """Whether ``codes`` or ``message`` say the zone is out of capacity (not a quota, not a fault)."""
    text = message.lower()
    return any(c in CAPACITY_CODES for c in codes) or any(t.lower() in text for t in CAPACITY_CODES + _CAPACITY_TEXT)


def no_capacity(what: str, zone: str, codes: list[str], message: str) -> NoCapacity | None:
    """Compute Engine's errors that say ``zone`` has no machine for us now, as the port's NoCapacity (the
    supervisor retries on it, ``--zone auto`` moves on); None for any other error."""
    if is_capacity(codes, message):
        return NoCapacity(f"{what}: zone {zone} has no capacity right now ({message or codes[0]})", zone)
    return None


def _error_reasons(exc: Any) -> list[str]:
    """The ``reason`` of each error in a google-api-core exception's JSON body."""
    return [str(e.get("reason", "")) for e in getattr(exc, "errors", None) or [] if isinstance(e, dict)]


#: What to do about each organisation policy constraint that can refuse a VM
#: (https://cloud.google.com/resource-manager/docs/organization-policy/org-policy-constraints).
POLICY_FIXES = {
    "compute.vmExternalIpAccess": (
        "VMs of this project may not have an external IP address. Turn it off with `%burst config "
        "external_ip=false` (c.NBBurst.external_ip = False, or NBBURST_EXTERNAL_IP=false): the VMs then reach "
        "Google's APIs through Private Google Access on their subnetwork and packages through Cloud NAT or an "
        "index mirror (`nbburst doctor` checks the subnetwork)"
    ),
    "compute.requireShieldedVm": (
        "VMs must boot a Shielded VM image: use one of Google's public images or an image made from one "
        "(--image / --image-family, c.NBBurst.image_family)"
    ),
    "compute.trustedImageProjects": (
        "the image's project is not among the trusted image projects: boot an image from an allowed project "
        "(--image-family with c.NBBurst.image_project), or ask the organisation's admin to add the project to "
        "the constraint"
    ),
    "gcp.resourceLocations": (
        "the policy does not allow VMs in this zone: choose a zone it allows (`%burst config zone=...`, "
        "c.NBBurst.zone or --zone)"
    ),
}


def policy_refusal(what: str, message: str) -> UsageError | None:
    """An organisation policy's refusal (412 conditionNotMet naming ``constraints/...``) as a UsageError that
    names the constraint and the fix; None when ``message`` names no constraint."""
    m = re.search(r"constraints/([A-Za-z0-9_.]+[A-Za-z0-9])", message)
    if not m:
        return None
    constraint = m.group(1)
    fix = POLICY_FIXES.get(constraint, "ask the organisation's admin which values the constraint allows")
    return UsageError(
        f"{what}: refused by the organisation policy constraints/{constraint}: {fix}. (Compute Engine: {message})"
    )


# -- the clients ---------------------------------------------------------------------------------------------


class NoAnswer(BurstError):
    """Compute Engine did not answer a request, however often it was made: transient, the request may be made
    again later."""


class ComputeAPI:
    """Compute Engine for one project, at one endpoint, with one set of credentials.

    ``configured_project`` gives the project the user configured ("" for none); otherwise the project of
    the Application Default Credentials, then ``$GOOGLE_CLOUD_PROJECT`` / ``$CLOUDSDK_CORE_PROJECT``.
    """

    #: How many times a call that failed for a transient reason is made (1 s, 2 s, 4 s... apart).
    attempts = 4
    #: How long :meth:`wait` waits for a zone operation unless told otherwise.
    operation_timeout_s = 600.0
    #: How long one ``zoneOperations.wait`` request may take: more than the 2 minutes after which Google answers.
    wait_request_s = 150.0
    #: How long a zone's machine types are reused before they are listed again.
    catalog_ttl_s = 3600.0

    def __init__(self, endpoint: str = "", configured_project: Callable[[], str] = lambda: ""):
        self.endpoint = (endpoint or "").rstrip("/")
        self.configured_project = configured_project
        self._creds: Any = None
        self._adc_project: str | None = None
        self._project: str | None = None
        self._clients: dict[str, Any] = {}
        self._catalogs: dict[str, tuple[float, list[gce_types.MachineType]]] = {}
        self._images: dict[str, tuple[int, str]] = {}  # image path -> (diskSizeGb, architecture)

    def credentials(self) -> Any:
        """Anonymous credentials for an emulator (on an emulated VM, its service account's, so that the emulator
        judges the VM's calls as that account's), else Application Default Credentials (UsageError if none)."""
        if self._creds is None:
            if self.endpoint and os.environ.get("GCE_METADATA_HOST"):
                self._creds = _vm_credentials()
            elif self.endpoint:
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

    def client(self, name: str) -> Any:
        """The ``google.cloud.compute_v1`` client class ``name`` (``InstancesClient``...), made once."""
        if name not in self._clients:
            from google.cloud import compute_v1

            kwargs: dict[str, Any] = {"credentials": self.credentials()}
            if self.endpoint:
                kwargs["client_options"] = {"api_endpoint": self.endpoint}
            self._clients[name] = getattr(compute_v1, name)(**kwargs)
        return self._clients[name]

    @property
    def instances(self) -> Any:
        """The InstancesClient (every instance request goes through this one object)."""
        return self.client("InstancesClient")

    @property
    def project(self) -> str:
        if self._project is None:
            project = self.configured_project()
            if not project and not self.endpoint:
                self.credentials()
                project = self._adc_project or ""
            project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT", "")
            if not project:
                raise UsageError(
                    "no Google Cloud project: set c.NBBurst.project, $NBBURST_PROJECT or "
                    "`%burst config project=ID` (or `gcloud config set project ID`)"
                )
            self._project = project
        return self._project

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, retrying transient failures; ``what`` names the request in errors."""
        import requests
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        delay = 1.0
        for attempt in range(self.attempts):
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
                if isinstance(exc, gexc.ServiceUnavailable) and is_capacity(_error_reasons(exc), exc.message):
                    raise  # out of capacity: no retry makes a machine appear, the caller moves on
                if attempt == self.attempts - 1:
                    raise NoAnswer(f"{what}: Compute Engine did not answer ({exc}); try again") from None
            except (auth_exc.DefaultCredentialsError, auth_exc.RefreshError) as exc:
                raise UsageError(f"{what}: {NO_CREDENTIALS} ({exc})") from None
            except gexc.Unauthorized as exc:
                raise UsageError(f"{what}: the credentials were refused ({exc.message}); {NO_CREDENTIALS}") from None
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def wait(self, operation: Any, what: str, *, zone: str | None = None, timeout_s: float | None = None) -> Any:
        """The finished ``operation`` (of ``zone``, or global), waited on with our own client.

        ``zoneOperations.wait`` answers after about 2 minutes even while the operation still runs
        (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait): each wait may take
        longer than that (:attr:`wait_request_s`), and one that got no answer says nothing of the operation,
        which goes on (a VM being created): it is asked again until ``timeout_s``, never taken for a failure."""
        from google.cloud import compute_v1

        client = self.client("ZoneOperationsClient" if zone else "GlobalOperationsClient")
        where = {"zone": zone} if zone else {}
        timeout_s = self.operation_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                op = self.call(
                    what,
                    client.wait,
                    project=self.project,
                    operation=operation.name,
                    timeout=self.wait_request_s,
                    **where,
                )
            except NoAnswer:
                if time.monotonic() > deadline:
                    raise
                continue
            if op.status == compute_v1.Operation.Status.DONE:
                return op
            if time.monotonic() > deadline:
                raise BurstError(
                    f"{what}: Compute Engine did not finish within {format_duration(timeout_s)} "
                    f"(operation {operation.name})"
                )

    # -- zones, machine types, quota --------------------------------------------------------------------------
    def zone(self, zone: str) -> Any:
        """The zone resource (its ``status``); NotFound when it does not exist."""
        return self.call(
            "reading the zone", self.client("ZonesClient").get, project=self.project, zone=zone, timeout=30
        )

    def region(self, region: str, what: str) -> Any:
        """The region resource (its zones and quotas); NotFound when it does not exist."""
        return self.call(what, self.client("RegionsClient").get, project=self.project, region=region, timeout=30)

    def machine_types(self, zone: str) -> list[gce_types.MachineType]:
        """The predefined machine types of ``zone`` (listed at most once per :attr:`catalog_ttl_s`)."""
        cached = self._catalogs.get(zone)
        if cached and time.monotonic() - cached[0] < self.catalog_ttl_s:
            return cached[1]
        from google.api_core import exceptions as gexc

        try:
            listed = self.call(
                f"listing machine types of {zone}",
                self.client("MachineTypesClient").list,
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

    def machine_type(self, zone: str, name: str) -> gce_types.MachineType | None:
        """The machine type ``name`` of ``zone`` (custom types included); None when the zone has no such type."""
        found = {m.name: m for m in self.machine_types(zone)}.get(name)
        if found or not gce_types.custom_type(name):
            return found
        from google.api_core import exceptions as gexc

        try:
            got = self.call(
                "checking the machine type",
                self.client("MachineTypesClient").get,
                project=self.project,
                zone=zone,
                machine_type=name,
                timeout=30,
            )
        except (gexc.NotFound, gexc.BadRequest):
            return None
        return gce_types.MachineType.from_api(got)

    def accelerator_types(self, zone: str) -> set[str]:
        """Names of the GPUs offered in ``zone``."""
        listed = self.call(
            f"listing GPUs of {zone}",
            self.client("AcceleratorTypesClient").list,
            project=self.project,
            zone=zone,
            timeout=60,
        )
        return {a.name for a in listed}

    def quota_link(self, metric: str) -> str:
        """Where the project's quota ``metric`` is raised, in the Cloud console."""
        return f"https://console.cloud.google.com/iam-admin/quotas?project={self.project}&metric={metric}"

    def project_resource(self) -> Any:
        """The project resource: its project-wide quotas, its default service account."""
        return self.call("reading the project", self.client("ProjectsClient").get, project=self.project, timeout=30)

    def quota_shortfall(self, zone: str, need: gce_quota.Need) -> gce_quota.Shortfall | None:
        """The first quota (the region of ``zone``'s, then the project's) without room for what ``need`` asks."""
        region = pricing.region_of(zone)
        regional = self.region(region, "reading quotas").quotas
        found = gce_quota.shortfall(regional, [], region, need)
        if found is None:  # the project-wide quotas only when the region has room: one request fewer
            project_wide = self.project_resource().quotas
            found = gce_quota.shortfall(regional, project_wide, region, need)
        return found

    def quota_problem(self, zone: str, need: gce_quota.Need) -> str | None:
        """Why the region of ``zone`` or the project has no room for what ``need`` asks (naming the quota and
        where to raise it), or None."""
        found = self.quota_shortfall(zone, need)
        return found.message(self.project, self.quota_link(found.metric)) if found else None

    # -- networks and the project's APIs --------------------------------------------------------------------------
    def network(self, name: str) -> Any:
        """The VPC network ``name`` (a name or a path) of this project; NotFound when it does not exist."""
        return self.call(
            "reading the network", self.client("NetworksClient").get, project=self.project, network=resource_name(name)
        )

    def firewall(self, name: str) -> Any:
        """The VPC firewall rule ``name`` of this project; NotFound when it does not exist."""
        return self.call(
            "reading the firewall rule", self.client("FirewallsClient").get, project=self.project, firewall=name
        )

    def insert_firewall(self, resource: Any, what: str) -> Any:
        """Start making the firewall rule ``resource``; the global operation (see :meth:`wait`)."""
        from google.cloud import compute_v1

        request = compute_v1.InsertFirewallRequest(
            project=self.project, firewall_resource=resource, request_id=str(uuid.uuid4())
        )
        return self.call(what, self.client("FirewallsClient").insert, request=request, timeout=60)

    def subnetwork(self, region: str, name: str) -> Any:
        """The subnetwork ``name`` (a name or a path) of ``region``; NotFound when it does not exist."""
        return self.call(
            "reading the subnetwork",
            self.client("SubnetworksClient").get,
            project=self.project,
            region=region,
            subnetwork=resource_name(name),
        )

    def service_enabled(self, service: str) -> bool:
        """Whether the API ``service`` (``compute.googleapis.com``...) is on in this project, as Service Usage says
        (https://cloud.google.com/service-usage/docs/reference/rest/v1/services/get; the emulator serves it too)."""
        if self.endpoint:
            import requests

            session: Any = requests.Session()
            base = self.endpoint
        else:
            from google.auth.transport.requests import AuthorizedSession

            session, base = AuthorizedSession(self.credentials()), "https://serviceusage.googleapis.com"
        resp = self.call(
            f"asking Service Usage about {service}",
            session.get,
            f"{base}/v1/projects/{self.project}/services/{service}",
            timeout=30,
        )
        if resp.status_code >= 400:
            raise BurstError(f"Service Usage answered {resp.status_code} for {service}: {resp.text[:300]}")
        return resp.json().get("state") == "ENABLED"

    # -- images -----------------------------------------------------------------------------------------------
    def lookup_image(self, project: str, name: str, family: bool, source: str) -> tuple[str, str | None, str]:
        """(``projects/P/global/images/NAME``, its python label or None, ``source``) of an image or family;
        a missing or forbidden one is a UsageError that names ``source``."""
        from google.api_core import exceptions as gexc

        images = self.client("ImagesClient")
        try:
            if family:
                img = self.call("resolving the image", images.get_from_family, project=project, family=name, timeout=30)
            else:
                img = self.call("resolving the image", images.get, project=project, image=name, timeout=30)
        except gexc.NotFound:
            what = f"image family {name}" if family else f"image {name}"
            raise UsageError(f"{source}: {what} does not exist in project {project}") from None
        except gexc.Forbidden as exc:
            raise UsageError(f"{source}: no access to images of project {project} ({exc.message})") from None
        path = f"projects/{project}/global/images/{img.name}"
        self._images[path] = (int(img.disk_size_gb or 0), img.architecture or "X86_64")
        return path, python_of_labels(dict(img.labels)), source

    def image_disk(self, path: str) -> tuple[int, str]:
        """(the smallest boot disk in GB, the architecture ``X86_64``/``ARM64``) of the image at ``path``
        (``projects/P/global/images/NAME``), as :meth:`lookup_image` found it, else read."""
        if path not in self._images:
            m = re.search(r"projects/([^/]+)/global/images/([^/]+)$", path or "")
            if not m:
                return 0, "X86_64"
            img = self.call(
                "reading the image", self.client("ImagesClient").get, project=m.group(1), image=m.group(2), timeout=30
            )
            self._images[path] = (int(img.disk_size_gb or 0), img.architecture or "X86_64")
        return self._images[path]

    def image(self, name: str) -> Any:
        """The image ``name`` of this project."""
        return self.call(
            "reading the image", self.client("ImagesClient").get, project=self.project, image=name, timeout=30
        )

    def insert_image(self, resource: Any, what: str) -> Any:
        """Start making the image ``resource`` in this project; the operation (see :meth:`wait`)."""
        from google.cloud import compute_v1

        request = compute_v1.InsertImageRequest(
            project=self.project, image_resource=resource, request_id=str(uuid.uuid4())
        )
        return self.call(what, self.client("ImagesClient").insert, request=request, timeout=60)

    # -- instances --------------------------------------------------------------------------------------------
    def instance(self, zone: str, name: str, what: str = "describing the VM") -> Any:
        """The instance ``name`` of ``zone``; NotFound when it does not exist."""
        return self.call(what, self.instances.get, project=self.project, zone=zone, instance=name, timeout=30)

    def instances_where(self, filter_: str) -> list[tuple[Any, str]]:
        """(instance, zone) of every instance of the project, in any zone, that matches ``filter_``."""
        from google.cloud import compute_v1

        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=filter_)
        return [
            (inst, resource_name(scope))
            for scope, scoped in self.call("listing VMs", self.instances.aggregated_list, request=request, timeout=60)
            for inst in scoped.instances
        ]

    def insert_instance(self, zone: str, resource: Any, what: str) -> Any:
        """Start creating the instance ``resource`` in ``zone``; the operation (see :meth:`wait`). A zone out of
        capacity is NoCapacity and an organisation policy's refusal a UsageError, whether the insert's answer or
        its operation says so (:meth:`check_insert` for the latter)."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        request = compute_v1.InsertInstanceRequest(
            project=self.project, zone=zone, instance_resource=resource, request_id=str(uuid.uuid4())
        )
        try:
            return self.call(what, self.instances.insert, request=request, timeout=60)
        except gexc.ServiceUnavailable as exc:  # only a capacity 503 gets here: call() retries the others
            raise no_capacity(what, zone, _error_reasons(exc), exc.message) or exc from None
        except gexc.PreconditionFailed as exc:
            refused = policy_refusal(what, exc.message)
            if refused is None:
                raise
            raise refused from None

    @staticmethod
    def check_insert(what: str, zone: str, codes: list[str], message: str) -> None:
        """NoCapacity or an organisation policy's UsageError for the error codes of a finished insert (or start)
        operation; nothing for any other."""
        refused = no_capacity(what, zone, codes, message) or (
            policy_refusal(what, message) if "CONDITION_NOT_MET" in codes else None
        )
        if refused is not None:
            raise refused

    def start_instance(self, zone: str, name: str, what: str) -> Any:
        """Start the stopped instance ``name``; the operation."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        request = compute_v1.StartInstanceRequest(
            project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4())
        )
        try:
            return self.call(what, self.instances.start, request=request, timeout=60)
        except gexc.ServiceUnavailable as exc:  # only a capacity 503 gets here: call() retries the others
            raise no_capacity(what, zone, _error_reasons(exc), exc.message) or exc from None

    def set_metadata(self, zone: str, name: str, metadata: Any, what: str) -> Any:
        """Replace the instance's metadata (its ``fingerprint`` must be the current one, else
        PreconditionFailed); the operation."""
        from google.cloud import compute_v1

        request = compute_v1.SetMetadataInstanceRequest(
            project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4()), metadata_resource=metadata
        )
        return self.call(what, self.instances.set_metadata, request=request, timeout=60)

    def delete_instance(self, zone: str, name: str, what: str) -> Any | None:
        """Start deleting the instance ``name``; the operation, or None when it is gone already."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        request = compute_v1.DeleteInstanceRequest(
            project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4())
        )
        try:
            return self.call(what, self.instances.delete, request=request, timeout=60)
        except gexc.NotFound:
            return None

    def serial_output(
        self, zone: str, name: str, start: int = 0, what: str = "reading the serial console"
    ) -> tuple[str, int]:
        """(the serial console from byte ``start`` on, where the next read starts); ("", start) when the
        instance or its console is gone."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        request = compute_v1.GetSerialPortOutputInstanceRequest(
            project=self.project, zone=zone, instance=name, start=start
        )
        try:
            out = self.call(what, self.instances.get_serial_port_output, request=request, timeout=30)
        except (gexc.NotFound, gexc.BadRequest):
            return "", start
        return out.contents, int(out.next_ or start)

    def operation_types(self, zone: str, instance: Any, since: float = 0.0) -> set[str]:
        """Types of the zone operations on ``instance`` since ``since`` (insert, delete,
        compute.instances.preempted, ...)."""
        from google.cloud import compute_v1

        request = compute_v1.ListZoneOperationsRequest(
            project=self.project, zone=zone, filter=f'targetId = "{instance.id}"'
        )
        listed = self.call(
            "reading the VM's history", self.client("ZoneOperationsClient").list, request=request, timeout=30
        )
        return {op.operation_type for op in listed if timestamp(op.insert_time) >= since}

    def preempt(self, zone: str, name: str, grace_s: float) -> None:
        """Preempt the instance: the emulator's own request (with its grace), else a simulated maintenance
        event."""
        if self.endpoint and "googleapis.com" not in self.endpoint:
            import requests

            url = f"{self.endpoint}/emulator/projects/{self.project}/zones/{zone}/instances/{name}/preempt"
            resp = requests.post(url, json={"grace": grace_s}, timeout=30)
            if resp.status_code != 404:
                resp.raise_for_status()
                return
        self.call(
            f"preempting {name}",
            self.instances.simulate_maintenance_event,
            project=self.project,
            zone=zone,
            instance=name,
            timeout=60,
        )


def _vm_credentials() -> Any:
    """On an emulated VM, its service account's credentials from the metadata server it is given; anonymous ones
    where that server hands out no token (a metadata server standing in for a Workbench instance's, say)."""
    from google.auth import compute_engine
    from google.auth import exceptions as auth_exc
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import Request

    creds = compute_engine.Credentials()
    try:
        creds.refresh(Request())
    except (auth_exc.RefreshError, auth_exc.TransportError):
        return AnonymousCredentials()
    return creds
