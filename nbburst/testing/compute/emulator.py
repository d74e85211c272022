"""A local Compute Engine: the REST API subset nbburst calls, with instances that are real
local processes, each beside its own metadata server.

    with ComputeEmulator(base_dir, preemption_grace=2) as emu:
        client = emu.client(compute_v1.InstancesClient)   # real client, anonymous credentials
        ...
        emu.preempt("my-vm")

An instance is a folder (its disk) under ``base_dir/instances/PROJECT/ZONE/NAME/disk``. Each boot
(insert, start) runs its ``startup-script`` metadata as the guest agent does (:mod:`.guest`): with bash, in
``/``, without HOME or USER, in a process group of its own, its output read line by line (64 KiB at most)
into the serial console. Stop, delete, preemption, maintenance and ``maxRunDuration`` stop only the startup
script's runner (its output pipe breaks), run the ``shutdown-script``, then SIGTERM what is left, and SIGKILL
whatever is left after the grace period (a spot VM's 30 s by default). Scripts see
``GCE_METADATA_HOST``/``GCE_METADATA_IP`` (their metadata server), ``NBBURST_COMPUTE_ENDPOINT``
(this API), ``NBBURST_EMULATOR_INSTANCE`` and ``NBBURST_EMULATOR_DISK`` (the disk's folder); ``poweroff``,
``shutdown``, ``reboot`` and ``sudo`` on their PATH act on the emulated machine, never on the host. The host's
``NBBURST_*`` variables are not passed on (a real VM has none); pass extra ones with ``instance_env``. The
host's proxy settings (``http_proxy``, ``https_proxy``, ``no_proxy``) are: they are the VMs' egress path, as a
VPC's route or Cloud NAT is a real VM's, so that a test can put a fault-injecting proxy between the VMs and
the services they call. ``time_scale`` runs ``maxRunDuration`` faster (Compute Engine refuses one under
30 s, https://cloud.google.com/compute/docs/instances/limit-vm-runtime).

Quotas are a new project's (24 vCPUs a region, 32 in all regions, no GPU: catalog.DEFAULT_*_QUOTAS) unless
``quotas={"CPUS": 96, "GPUS_ALL_REGIONS": 1, ...}`` or :meth:`set_quota` say otherwise; inserts and starts
beyond them fail with 403 quotaExceeded, and regions.get / projects.get report limits and usage. An instance
with GPUs whose image has an NVIDIA driver (the Deep Learning VM image of the catalog) finds ``nvidia-smi``
on its PATH, listing its GPUs (``driver_delay`` seconds after its first boot: the image installs the driver
then); any other instance finds none.

Refusals as Google gives them: a zone out of capacity fails the insert's operation, or with
``set_zone_capacity(zone, False, on_insert=True)`` the insert itself (503 ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS,
https://cloud.google.com/compute/docs/resource-error); organisation policies (``org_policies=`` or
:meth:`set_org_policy`: vmExternalIpAccess, requireShieldedVm, trustedImageProjects, resourceLocations) answer
412 conditionNotMet; every external IP counts against IN_USE_ADDRESSES; each project has the auto-mode network
``default``, and :meth:`add_network` adds others (an unknown network is 404, a custom-mode one without a
subnetwork 400).

VPC firewall rules (``firewalls.insert``/``get``, :mod:`.firewalls`) are checked and kept as Compute Engine does
(https://cloud.google.com/compute/docs/reference/rest/v1/firewalls), as records: no traffic is filtered by them.

``images.insert`` from a stopped instance's boot disk copies the disk folder as the image's
content (under ``base_dir/images/PROJECT/NAME``); an instance booted from that image starts with
a copy of it on its disk, as a baked image would. Image inserts are global operations
(``globalOperations.get``/``wait``).
"""

from __future__ import annotations

import atexit
import copy
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from nbburst.testing import tokens
from nbburst.testing.compute import catalog as cat
from nbburst.testing.compute.billing import Catalog
from nbburst.testing.compute.firewalls import check_firewall
from nbburst.testing.compute.instance import Instance, fingerprint, kill, reap, scan_processes, write_shims
from nbburst.testing.compute.lifecycle import LifecycleMixin
from nbburst.testing.compute.resources import (
    ComputeError,
    InstancePlan,
    check_labels,
    check_metadata_items,
    check_networks,
    get_image,
    image_from_family,
    not_found,
    org_policy_violation,
    plan_image,
    plan_instance,
)
from nbburst.testing.metadata import MetadataServer

log = logging.getLogger("nbburst.testing")

ACTIVE = ("PROVISIONING", "STAGING", "RUNNING", "STOPPING")
MAX_OPERATIONS = 10000


class ComputeEmulator(LifecycleMixin):
    """The emulated Compute Engine API on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        base_dir: str | os.PathLike | None = None,
        *,
        port: int = 0,
        project: str = "nbburst-test",
        zone: str = "us-central1-a",
        preemption_grace: float = 30.0,
        stop_grace: float = 90.0,
        operation_delay: float = 0.2,
        maintenance_notice: float = 60.0,
        operation_wait_timeout: float = 120.0,
        time_scale: float = 1.0,
        driver_delay: float = 0.0,
        images: list[cat.Image] | None = None,
        instance_env: dict[str, str] | None = None,
        quotas: dict[str, float] | None = None,
        org_policies: dict[str, list[str] | None] | None = None,
    ):
        if zone not in cat.ZONE_REGION:
            raise ValueError(f"unknown zone {zone!r}; known: {sorted(cat.ZONE_REGION)}")
        self._own_base = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="nbburst-compute-")).resolve()
        self._port = port
        self.project, self.zone, self.region = project, zone, cat.ZONE_REGION[zone]
        self.preemption_grace = preemption_grace
        self.stop_grace = stop_grace
        self.operation_delay = operation_delay
        self.maintenance_notice = maintenance_notice
        self.operation_wait_timeout = operation_wait_timeout
        #: How fast an instance's maxRunDuration runs out: an instance runs ``maxRunDuration * time_scale`` seconds.
        #: Compute Engine refuses a limit under 30 s, so tests shorten VMs' lives with this, never with the limit.
        self.time_scale = time_scale
        #: How long after its first boot an instance of a Deep Learning VM image gets its NVIDIA driver: the image
        #: installs it then (https://cloud.google.com/deep-learning-vm/docs/cli#creating_an_instance_with_one_or_more_gpus:
        #: install-nvidia-driver=True), and nvidia-smi is not there before.
        self.driver_delay = driver_delay
        self.instance_env = dict(instance_env or {})
        self.images: list[cat.Image] = list(images) if images is not None else cat.default_images()
        #: Quota limits that replace a new project's (catalog.DEFAULT_*_QUOTAS) in every region and project.
        self.quotas = {metric: float(limit) for metric, limit in (quotas or {}).items()}
        self.request_log: list[dict] = []
        #: The Cloud Billing Catalog stand-in served beside the Compute API (live prices, offline).
        self.billing = Catalog(project)
        self._uid = uuid.uuid4().hex[:12]
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        #: Enforced organisation policy constraints -> the values each allows (see :meth:`set_org_policy`).
        self.org_policies: dict[str, list[str] | None] = {}
        for constraint, allowed in (org_policies or {}).items():
            self.set_org_policy(constraint, allowed)
        self._networks: dict[tuple[str, str], cat.Network] = {}
        self._firewalls: dict[tuple[str, str], dict] = {}  # (project, name) -> the rule as firewalls.get gives it
        #: APIs turned off in the project (Service Usage, see :meth:`set_service`); every other one is on.
        self.disabled_services: set[str] = set()
        #: Service accounts whose instances.insert and instances.start are refused (see :meth:`refuse_launches`).
        self.launch_refused: set[str] = set()
        self._instances: dict[tuple[str, str, str], Instance] = {}
        self._ops: dict[tuple[str, str, str], dict] = {}
        self._request_ids: dict[tuple[str, str], tuple[str, str, str]] = {}
        self._region_quotas: dict[tuple[str, str], dict[str, float]] = {}
        self._project_quotas: dict[str, dict[str, float]] = {}
        self._exhausted: dict[str, set[str] | None] = {}
        self._exhausted_on_insert: set[str] = set()  # zones whose inserts are refused at once (503)
        self._procs: list[subprocess.Popen] = []
        self._threads: list[threading.Thread] = []
        self._ip_counter = 1
        self._closing = False
        self._closed = threading.Event()
        self._httpd = None
        self._bin = self.base_dir / "bin"

    # ---- running the emulator ----------------------------------------------------------------
    def start(self) -> ComputeEmulator:
        from nbburst.testing.compute.http import make_server

        if self._httpd is not None:
            return self
        (self.base_dir / "instances").mkdir(parents=True, exist_ok=True)
        write_shims(self._bin)
        self._httpd = make_server(self, self._port)
        self._spawn(self._httpd.serve_forever, 0.1)
        self._spawn(self._monitor)
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Kill every instance process, close every server. Nothing survives it."""
        with self._lock:
            if self._httpd is None or self._closing:
                return  # not started, or another thread (atexit, a test's teardown) is stopping it
            self._closing = True
            self._cond.notify_all()
            instances = list(self._instances.values())
        self._closed.set()
        for inst in instances:
            inst.hard_kill()
        for pid in scan_processes(f"{self._uid}/", ()):
            kill(pid)
        with self._lock:
            procs, threads = list(self._procs), list(self._threads)
        for p in procs:
            reap(p)
        for inst in instances:
            if inst.metadata:
                inst.metadata.stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        atexit.unregister(self.stop)
        if self._own_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ComputeEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("compute emulator not started")
        return self._httpd.server_address[1]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}"

    @property
    def default_service_account(self) -> str:
        """The default compute service account of the emulator's project (what VMs run as by default)."""
        return cat.default_service_account(self.project)

    def env(self) -> dict[str, str]:
        """Environment variables pointing nbburst at this emulator."""
        return {
            "NBBURST_COMPUTE_ENDPOINT": self.endpoint,
            "NBBURST_PROJECT": self.project,
            "NBBURST_ZONE": self.zone,
            "NBBURST_IMAGE_PROJECT": cat.DEFAULT_IMAGE_PROJECT,
            "NBBURST_IMAGE_FAMILY": cat.DEFAULT_IMAGE_FAMILY,
        }

    def client(self, client_class, **kwargs):
        """A google.cloud.compute_v1 client (any of them) that talks to this emulator."""
        from google.auth.credentials import AnonymousCredentials

        kwargs.setdefault("credentials", AnonymousCredentials())
        kwargs.setdefault("client_options", {"api_endpoint": self.endpoint})
        return client_class(**kwargs)

    # ---- test controls -----------------------------------------------------------------------
    def preempt(
        self,
        name: str,
        *,
        zone: str | None = None,
        project: str | None = None,
        grace: float | None = None,
        wait: bool = False,
    ) -> None:
        """Preempt a running instance: preempted=TRUE, soft-off, `grace` s, hard-off, then STOP or
        DELETE per its instanceTerminationAction. `wait` blocks until that is done."""
        inst = self._find(name, zone, project)
        with self._lock:
            if inst.status != "RUNNING":
                raise ComputeError(400, "badRequest", f"Instance '{name}' is {inst.status}, not RUNNING.")
        done = threading.Event()
        self._spawn(self._run_preempt, inst, grace, done)
        if wait:
            done.wait()

    def simulate_maintenance(
        self, name: str, *, zone: str | None = None, project: str | None = None, wait: bool = False
    ) -> None:
        inst = self._find(name, zone, project)
        done = threading.Event()
        self._spawn(self._run_maintenance, inst, None, done)
        if wait:
            done.wait()

    def poweroff(
        self,
        name: str,
        *,
        reboot: bool = False,
        zone: str | None = None,
        project: str | None = None,
        boot: int | None = None,
    ) -> None:
        """What `sudo poweroff` (or `reboot`) does on the instance; ``boot`` (the number of the boot whose
        guest asked, as its processes have it in $NBBURST_EMULATOR_BOOT) keeps a request that comes late
        from powering off the next boot, which a real guest's request never could."""
        inst = self._find(name, zone, project)
        self._spawn(self._run_guest_off, inst, reboot, boot)

    def set_zone_capacity(
        self, zone: str, available: bool, machine_types: list[str] | None = None, *, on_insert: bool = False
    ) -> None:
        """Make a zone (or only some machine types / prefixes such as "n2-") out of capacity: inserts and starts
        there then fail with ZONE_RESOURCE_POOL_EXHAUSTED in their operation, or, ``on_insert``, the insert
        itself answers 503 ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS (Compute Engine does both:
        https://cloud.google.com/compute/docs/resource-error)."""
        with self._lock:
            if on_insert and not available:
                self._exhausted_on_insert.add(zone)
            elif available:
                self._exhausted_on_insert.discard(zone)
            if available:
                if machine_types and self._exhausted.get(zone):
                    self._exhausted[zone] -= set(machine_types)  # type: ignore[operator]
                    if self._exhausted[zone]:
                        return
                self._exhausted.pop(zone, None)
            else:
                self._exhausted[zone] = set(machine_types) if machine_types else None

    def set_quota(self, metric: str, limit: float, *, region: str | None = None, project: str | None = None) -> None:
        """Set one quota limit: a project-wide metric (CPUS_ALL_REGIONS, GPUS_ALL_REGIONS) for the project,
        any other for the region (default: the emulator's)."""
        project = project or self.project
        with self._lock:
            if metric in cat.DEFAULT_PROJECT_QUOTAS:
                self._plimits(project)[metric] = float(limit)
            else:
                self._rlimits(project, region or self.region)[metric] = float(limit)

    def set_org_policy(self, constraint: str, allowed: list[str] | None = None) -> None:
        """Enforce an organisation policy constraint on inserts (``compute.vmExternalIpAccess``: the instances
        allowed an external IP, as ``projects/P/zones/Z/instances/N``; ``compute.requireShieldedVm``: no values;
        ``compute.trustedImageProjects``: ``projects/P`` whose images may boot; ``gcp.resourceLocations``:
        regions or zones, ``in:REGION-locations`` too)."""
        name = constraint.removeprefix("constraints/")
        if name not in cat.ORG_CONSTRAINTS:
            raise ValueError(f"unknown constraint {constraint!r}; known: {', '.join(cat.ORG_CONSTRAINTS)}")
        with self._lock:
            self.org_policies[name] = None if allowed is None else list(allowed)

    def clear_org_policy(self, constraint: str) -> None:
        with self._lock:
            self.org_policies.pop(constraint.removeprefix("constraints/"), None)

    def set_service(self, name: str, enabled: bool) -> None:
        """Turn an API of the project on or off (``compute.googleapis.com``...): Service Usage reports it, and a
        Compute request while Compute Engine's API is off answers 403 accessNotConfigured as Google does."""
        with self._lock:
            (self.disabled_services.discard if enabled else self.disabled_services.add)(name)

    def api_service(self, project: str, name: str) -> dict:
        """services.get of Service Usage (https://cloud.google.com/service-usage/docs/reference/rest/v1/services/get)."""
        number = cat.project_number(project)
        with self._lock:
            state = "DISABLED" if name in self.disabled_services else "ENABLED"
        return {
            "name": f"projects/{number}/services/{name}",
            "parent": f"projects/{number}",
            "config": {"name": name},
            "state": state,
        }

    def refuse_launches(self, account: str) -> None:
        """Refuse ``account`` (a service account's e-mail) instances.insert and instances.start, as Google does
        to an account without ``compute.instances.create``/``start``: roles/compute.instanceAdmin.v1 grants them
        (https://cloud.google.com/compute/docs/access/iam#compute.instanceAdmin.v1)."""
        with self._lock:
            self.launch_refused.add(account)

    def check_launch_allowed(self, token: str | None, permission: str, resource: str) -> None:
        """403 with Google's message when the caller (the service account ``token`` was minted for by an
        emulated metadata server) may not ``permission`` on ``resource``
        (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-vm-creation#permission_errors)."""
        if tokens.holder(token or "") in self.launch_refused:
            raise ComputeError(403, "forbidden", f"Required '{permission}' permission for '{resource}'")

    def check_compute_enabled(self, project: str) -> None:
        """403 accessNotConfigured when the project's Compute Engine API is off, with Google's message
        (https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-api#api_not_enabled)."""
        if "compute.googleapis.com" in self.disabled_services:
            number = cat.project_number(project)
            raise ComputeError(
                403,
                "accessNotConfigured",
                f"Compute Engine API has not been used in project {number} before or it is disabled. Enable it by "
                f"visiting https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project="
                f"{number} then retry. If you enabled this API recently, wait a few minutes for the action to "
                "propagate to our systems and retry.",
                domain="usageLimits",
            )

    def add_network(
        self,
        name: str,
        *,
        auto: bool = False,
        subnetworks: dict[str, dict[str, bool]] | None = None,
        project: str | None = None,
    ) -> cat.Network:
        """A VPC network: custom mode unless ``auto``, with ``subnetworks`` region -> {name: Private Google
        Access on}."""
        network = cat.Network(project or self.project, name, auto, {r: dict(s) for r, s in (subnetworks or {}).items()})
        with self._lock:
            self._networks[(network.project, name)] = network
        return network

    def _network_catalog(self, project: str) -> dict[tuple[str, str], cat.Network]:
        if (project, "default") not in self._networks:
            self._networks[(project, "default")] = cat.Network(project, "default")
        return self._networks

    def add_image(self, project: str, name: str, family: str | None = None, **kwargs) -> cat.Image:
        img = cat.Image(project, name, family, **kwargs)
        with self._lock:
            self.images.append(img)
        return img

    def instances(self) -> list[dict]:
        """Every instance with its state and process info."""
        with self._lock:
            return [i.info() for i in self._instances.values()]

    def instance(self, name: str, *, zone: str | None = None, project: str | None = None) -> dict:
        with self._lock:
            return self._find(name, zone, project).info()

    def wait_for_status(
        self,
        name: str,
        status: str | tuple[str, ...],
        timeout: float = 30.0,
        *,
        zone: str | None = None,
        project: str | None = None,
    ) -> str:
        """Wait until the instance has `status` ("DELETED" = gone); returns the last status seen."""
        wanted = (status,) if isinstance(status, str) else tuple(status)
        key = (project or self.project, zone or self.zone, name)

        def current() -> str:
            inst = self._instances.get(key)
            return inst.status if inst else "DELETED"

        with self._cond:
            self._cond.wait_for(lambda: current() in wanted or self._closing, timeout=timeout)
            return current()

    def serial_output(self, name: str, *, zone: str | None = None, project: str | None = None) -> str:
        inst = self._find(name, zone, project)
        return inst.console.read_text(errors="replace") if inst.console.exists() else ""

    def disk_path(self, name: str, *, zone: str | None = None, project: str | None = None) -> Path:
        return self._find(name, zone, project).disk

    def live_processes(self) -> list[int]:
        """Pids of instance processes (any instance of this emulator) still alive."""
        return scan_processes(f"{self._uid}/", ())

    # ---- API: instances ----------------------------------------------------------------------
    def api_insert(self, project: str, zone: str, body: dict, request_id: str | None = None) -> dict:
        with self._lock:
            self._check_zone(zone)
            prior = self._prior(project, request_id)
            if prior:
                return prior
            check_networks(project, zone, body, self._network_catalog(project))
            plan = plan_instance(project, zone, body, self.images, self._next_ip())
            refused = org_policy_violation(project, zone, plan, self.org_policies)
            if refused is not None:
                raise refused
            key = (project, zone, plan.resource["name"])
            if key in self._instances:
                raise ComputeError(
                    409,
                    "alreadyExists",
                    f"The resource 'projects/{project}/zones/{zone}/instances/{key[2]}' already exists",
                )
            self._check_quota(project, zone, plan)
            if zone in self._exhausted_on_insert and self._exhausted_for(zone, plan.machine.name):
                raise ComputeError(
                    503,
                    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                    f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
                    "fulfill the request.  '(resource type:compute)'.",
                )
            dir_ = self.base_dir / "instances" / project / zone / key[2]
            shutil.rmtree(dir_, ignore_errors=True)
            inst = Instance(project, zone, plan, dir_, self._uid)
            inst.disk.mkdir(parents=True)
            inst.console.touch()
            r = inst.resource
            r["id"] = str(inst.id)
            r["creationTimestamp"] = cat.rfc3339()
            r["metadata"]["fingerprint"] = fingerprint()
            r["labelFingerprint"] = fingerprint()
            r["fingerprint"] = fingerprint()
            inst.metadata = MetadataServer(inst.metadata_tree()).start()
            self._instances[key] = inst
            op = self._new_op(inst, "insert", request_id)
            self._spawn(self._run_insert, inst, op)
            return copy.deepcopy(op)

    def api_get(self, project: str, zone: str, name: str) -> dict:
        with self._lock:
            return copy.deepcopy(self._get(project, zone, name).resource)

    def api_list(self, project: str, zone: str | None = None) -> list[dict]:
        with self._lock:
            if zone is not None:
                self._check_zone(zone)
            return [
                copy.deepcopy(i.resource)
                for (p, z, _), i in self._instances.items()
                if p == project and (zone is None or z == zone)
            ]

    def api_delete(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        return self._lifecycle_op(project, zone, name, "delete", request_id, self._run_delete)

    def api_stop(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        return self._lifecycle_op(project, zone, name, "stop", request_id, self._run_stop)

    def api_reset(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        return self._lifecycle_op(project, zone, name, "reset", request_id, self._run_reset)

    def api_simulate_maintenance(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        return self._lifecycle_op(
            project,
            zone,
            name,
            "simulateMaintenanceEvent",
            request_id,
            lambda inst, op: self._run_maintenance(inst, op),
        )

    def api_start(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        with self._lock:
            prior = self._prior(project, request_id)
            if prior:
                return prior
            inst = self._get(project, zone, name)
            if inst.status == "STOPPING":
                raise ComputeError(400, "resourceNotReady", f"The resource '{inst.path}' is not ready")
            if inst.status == "TERMINATED":
                self._check_quota(project, zone, inst.plan, exclude=inst)
            op = self._new_op(inst, "start", request_id)
            self._spawn(self._run_start, inst, op)
            return copy.deepcopy(op)

    def api_set_metadata(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        with self._lock:
            inst = self._get(project, zone, name)
            meta = inst.resource["metadata"]
            # The fingerprint is the current one or the request fails with 412 conditionNotMet, and every change
            # makes a new one (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata; the
            # reference of instances.setMetadata, Metadata.fingerprint).
            if body.get("fingerprint") != meta["fingerprint"]:
                raise ComputeError(
                    412, "conditionNotMet", "Supplied fingerprint does not match current metadata fingerprint."
                )
            meta["items"] = check_metadata_items(body.get("items"))
            meta["fingerprint"] = fingerprint()
            op = self._new_op(inst, "setMetadata", request_id)
            self._spawn(self._run_set_metadata, inst, op)
            return copy.deepcopy(op)

    def _run_set_metadata(self, inst: Instance, op: dict) -> None:
        """The change reaches the guest's metadata server as the operation ends, never sooner: the API applies it
        in the operation it returns (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata)."""
        self._pause(self.operation_delay)
        with self._lock:
            if inst.metadata is not None and not inst.deleted:
                attributes = {i["key"]: i["value"] for i in inst.resource["metadata"]["items"]}
                inst.metadata.set("instance/attributes", attributes)
        self._finish(op)

    def api_set_labels(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        with self._lock:
            inst = self._get(project, zone, name)
            if body.get("labelFingerprint") != inst.resource["labelFingerprint"]:
                raise ComputeError(
                    412, "conditionNotMet", "Labels fingerprint either invalid or resource labels have changed"
                )
            inst.resource["labels"] = check_labels(body.get("labels"))
            inst.resource["labelFingerprint"] = fingerprint()
            op = self._new_op(inst, "setLabels", request_id)
            self._finish(op)
            return copy.deepcopy(op)

    def api_serial_port(self, project: str, zone: str, name: str, port: int = 1, start: int = 0) -> dict:
        with self._lock:
            inst = self._get(project, zone, name)
        if port not in (1, 2, 3, 4):
            raise ComputeError(400, "invalid", f"Invalid value for field 'port': '{port}'. Must be 1-4.")
        data, start = b"", max(0, start)
        if port == 1 and inst.console.exists():
            with open(inst.console, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = min(start, size)
                f.seek(start)
                data = f.read(1 << 20)
        return {
            "kind": "compute#serialPortOutput",
            "contents": data.decode("utf-8", "replace"),
            "start": str(start),
            "next": str(start + len(data)),
            "selfLink": inst.resource["selfLink"] + "/serialPort",
        }

    # ---- API: operations (zone None: global operations) --------------------------------------
    def api_operation(self, project: str, zone: str | None, name: str, wait: bool = False) -> dict:
        with self._cond:
            op = self._ops.get((project, zone, name))
            if op is None:
                raise not_found(self._op_path(project, zone, name))
            if wait:  # answers when DONE or after about 2 minutes, whatever the operation's status:
                # https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait
                self._cond.wait_for(
                    lambda: op["status"] == "DONE" or self._closing, timeout=self.operation_wait_timeout
                )
            return copy.deepcopy(op)

    def api_operations(self, project: str, zone: str | None) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(o) for (p, z, _), o in self._ops.items() if p == project and z == zone]

    def api_delete_operation(self, project: str, zone: str | None, name: str) -> None:
        with self._lock:
            if self._ops.pop((project, zone, name), None) is None:
                raise not_found(self._op_path(project, zone, name))

    @staticmethod
    def _op_path(project: str, zone: str | None, name: str) -> str:
        where = f"zones/{zone}" if zone else "global"
        return f"projects/{project}/{where}/operations/{name}"

    # ---- API: catalog ------------------------------------------------------------------------
    def api_project(self, project: str) -> dict:
        with self._lock:
            usage = self._usage(project, None)
            quotas = [
                {"metric": m, "limit": lim, "usage": float(usage.get(m, 0))}
                for m, lim in self._plimits(project).items()
            ]
        number = cat.project_number(project)
        return {
            "kind": "compute#project",
            "id": str(number),
            "name": project,
            "creationTimestamp": "2020-01-01T00:00:00.000+00:00",
            "commonInstanceMetadata": {"kind": "compute#metadata", "fingerprint": "", "items": []},
            "quotas": quotas,
            "selfLink": cat.API_ROOT + f"projects/{project}",
            "defaultServiceAccount": cat.default_service_account(project),
            "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
            "defaultNetworkTier": "PREMIUM",
        }

    def api_region(self, project: str, region: str) -> dict:
        if region not in cat.REGION_ZONES:
            raise not_found(f"projects/{project}/regions/{region}")
        with self._lock:
            usage = self._usage(project, region)
            quotas = [
                {"metric": m, "limit": lim, "usage": float(usage.get(m, 0))}
                for m, lim in self._rlimits(project, region).items()
            ]
        return {
            "kind": "compute#region",
            "id": str(cat.stable_id("region", region, digits=4)),
            "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": region,
            "description": region,
            "status": "UP",
            "zones": [cat.link(project, "zones", z) for z in cat.REGION_ZONES[region]],
            "quotas": quotas,
            "selfLink": cat.link(project, "regions", region),
            "supportsPzs": False,
        }

    def api_network(self, project: str, name: str) -> dict:
        with self._lock:
            network = self._network_catalog(project).get((project, name))
            if network is None:
                raise not_found(f"projects/{project}/global/networks/{name}")
            return network.json()

    def api_firewall(self, project: str, name: str) -> dict:
        with self._lock:
            rule = self._firewalls.get((project, name))
            if rule is None:
                raise not_found(f"projects/{project}/global/firewalls/{name}")
            return copy.deepcopy(rule)

    def api_insert_firewall(self, project: str, body: dict, request_id: str | None = None) -> dict:
        """firewalls.insert: the rule checked as Compute Engine checks it (:mod:`.firewalls`), a global
        operation; a name taken is 409 alreadyExists."""
        with self._lock:
            prior = self._prior(project, request_id)
            if prior:
                return prior
            rule = check_firewall(project, body, self._network_catalog(project))
            if (project, rule["name"]) in self._firewalls:
                raise ComputeError(
                    409,
                    "alreadyExists",
                    f"The resource 'projects/{project}/global/firewalls/{rule['name']}' already exists",
                )
            self._firewalls[(project, rule["name"])] = rule
            op = self._new_global_op(project, "insert", rule["selfLink"], rule["id"], request_id)
            self._finish(op)
            return copy.deepcopy(op)

    def firewalls(self, project: str | None = None) -> list[dict]:
        """The firewall rules made so far (for tests)."""
        with self._lock:
            return [copy.deepcopy(r) for (p, _), r in self._firewalls.items() if p == (project or self.project)]

    def api_subnetwork(self, project: str, region: str, name: str) -> dict:
        with self._lock:
            for (p, _), network in self._network_catalog(project).items():
                if p == project and name in network.subnetworks.get(region, {}):
                    return network.subnetwork_json(region, name)
        raise not_found(f"projects/{project}/regions/{region}/subnetworks/{name}")

    def api_zone(self, project: str, zone: str) -> dict:
        if zone not in cat.ZONE_REGION:
            raise not_found(f"projects/{project}/zones/{zone}")
        return cat.zone_json(project, zone)

    def api_machine_types(self, project: str, zone: str) -> list[dict]:
        self._check_zone(zone)
        return [cat.machine_type_json(project, zone, m) for m in cat.machine_types(zone)]

    def api_machine_type(self, project: str, zone: str, name: str) -> dict:
        self._check_zone(zone)
        m = cat.machine_type(zone, name)
        if m is None:
            raise not_found(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        return cat.machine_type_json(project, zone, m)

    def api_accelerator_types(self, project: str, zone: str) -> list[dict]:
        self._check_zone(zone)
        return [cat.accelerator_json(project, zone, a) for a in cat.ACCELERATORS.values() if zone in a.zones]

    def api_accelerator_type(self, project: str, zone: str, name: str) -> dict:
        self._check_zone(zone)
        a = cat.ACCELERATORS.get(name)
        if a is None or zone not in a.zones:
            raise not_found(f"projects/{project}/zones/{zone}/acceleratorTypes/{name}")
        return cat.accelerator_json(project, zone, a)

    def api_images(self, project: str) -> list[dict]:
        with self._lock:
            return [i.json() for i in self.images if i.project == project]

    def api_image(self, project: str, name: str) -> dict:
        with self._lock:
            return get_image(project, name, self.images).json()

    def api_image_from_family(self, project: str, family: str) -> dict:
        with self._lock:
            return image_from_family(project, family, self.images).json()

    def api_insert_image(
        self, project: str, body: dict, request_id: str | None = None, force_create: bool = False
    ) -> dict:
        """images.insert from an instance's boot disk: PENDING while the disk folder is copied,
        then READY. The disk must be detached or its instance stopped, unless forceCreate."""
        with self._lock:
            prior = self._prior(project, request_id)
            if prior:
                return prior
            plan = plan_image(project, body, self.images, force_create)
            disk_path = f"projects/{plan.disk_project}/zones/{plan.disk_zone}/disks/{plan.disk_name}"
            self._check_zone(plan.disk_zone)
            inst, disk = self._disk_owner(plan.disk_project, plan.disk_zone, plan.disk_name)
            if not disk.get("boot"):
                raise ComputeError(
                    400,
                    "invalid",
                    f"The compute emulator keeps the content of boot disks only; '{disk_path}' is not a boot disk.",
                )
            if inst.status != "TERMINATED" and not plan.force:
                raise ComputeError(
                    400,
                    "resourceInUseByAnotherResource",
                    f"The disk resource '{disk_path}' is already being used by '{inst.path}'",
                )
            img = cat.Image(
                project,
                plan.name,
                plan.family,
                disk_size_gb=int(disk.get("diskSizeGb") or 10),
                labels=plan.labels,
                nvidia_driver=bool(inst.plan.image and inst.plan.image.nvidia_driver),  # the disk holds the driver
                python=inst.plan.image.python if inst.plan.image else None,  # and the system's Python
                status="PENDING",
                description=plan.description,
                source_disk=cat.link(plan.disk_project, "zones", plan.disk_zone, "disks", plan.disk_name),
                source_disk_id=str(inst.id),
            )
            self.images.append(img)
            op = self._new_global_op(
                project, "insert", cat.link(project, "global", "images", img.name), img.json()["id"], request_id
            )
            self._spawn(self._run_image_insert, img, inst, op)
            return copy.deepcopy(op)

    def api_delete_image(self, project: str, name: str, request_id: str | None = None) -> dict:
        with self._lock:
            prior = self._prior(project, request_id)
            if prior:
                return prior
            img = get_image(project, name, self.images)
            self.images.remove(img)
            op = self._new_global_op(
                project, "delete", cat.link(project, "global", "images", name), img.json()["id"], request_id
            )
            self._finish(op)
        if img.content:
            shutil.rmtree(Path(img.content).parent, ignore_errors=True)
        return copy.deepcopy(op)

    def _disk_owner(self, project: str, zone: str, disk_name: str) -> tuple[Instance, dict]:
        """The instance a disk belongs to (instance disks live and die with their instance here)."""
        for (p, z, _), inst in self._instances.items():
            if p != project or z != zone:
                continue
            for disk in inst.resource["disks"]:
                if disk["source"].rsplit("/", 1)[-1] == disk_name:
                    return inst, disk
        raise not_found(f"projects/{project}/zones/{zone}/disks/{disk_name}")

    # ---- lifecycle (background threads) ------------------------------------------------------
    def _run_image_insert(self, img: cat.Image, inst: Instance, op: dict) -> None:
        content = self.base_dir / "images" / img.project / img.name
        error = None
        with inst.transition:  # the instance is not started or deleted while its disk is copied
            self._pause(self.operation_delay)
            try:
                shutil.rmtree(content, ignore_errors=True)
                if inst.deleted:
                    raise FileNotFoundError(inst.disk)
                content.mkdir(parents=True)
                shutil.copytree(inst.disk, content / "disk", symlinks=True)
            except OSError as e:
                shutil.rmtree(content, ignore_errors=True)
                error = (
                    "RESOURCE_NOT_FOUND" if inst.deleted else "INTERNAL_ERROR",
                    f"The disk of '{inst.path}' could not be read: {e}",
                    400,
                    "BAD REQUEST",
                )
        with self._lock:
            if error:
                if img in self.images:
                    self.images.remove(img)
            else:
                img.content, img.status = str(content / "disk"), "READY"
        self._finish(op, error)

    # ---- processes ---------------------------------------------------------------------------
    # ---- helpers -----------------------------------------------------------------------------
    def _check_zone(self, zone: str) -> None:
        if zone not in cat.ZONE_REGION:
            raise ComputeError(400, "invalid", f"Invalid value for field 'zone': '{zone}'. Unknown zone.")

    def _get(self, project: str, zone: str, name: str) -> Instance:
        self._check_zone(zone)
        inst = self._instances.get((project, zone, name))
        if inst is None:
            raise not_found(f"projects/{project}/zones/{zone}/instances/{name}")
        return inst

    def _find(self, name: str, zone: str | None, project: str | None) -> Instance:
        project = project or self.project
        with self._lock:
            if zone:
                return self._get(project, zone, name)
            found = [i for (p, _, n), i in self._instances.items() if p == project and n == name]
            if not found:
                raise not_found(f"projects/{project}/zones/-/instances/{name}")
            return found[0]

    def _next_ip(self) -> str:
        self._ip_counter += 1
        n = self._ip_counter
        return f"10.128.{n // 250}.{n % 250 + 2}"

    def _prior(self, project: str, request_id: str | None) -> dict | None:
        key = self._request_ids.get((project, request_id)) if request_id else None
        return copy.deepcopy(self._ops[key]) if key and key in self._ops else None

    def _new_op(self, inst: Instance, op_type: str, request_id: str | None = None, *, user: str | None = None) -> dict:
        return self._record_op(
            inst.project, inst.zone, op_type, inst.resource["selfLink"], str(inst.id), request_id, user
        )

    def _new_global_op(
        self, project: str, op_type: str, target_link: str, target_id: str, request_id: str | None = None
    ) -> dict:
        return self._record_op(project, None, op_type, target_link, target_id, request_id, None)

    def _record_op(
        self,
        project: str,
        zone: str | None,
        op_type: str,
        target_link: str,
        target_id: str,
        request_id: str | None,
        user: str | None,
    ) -> dict:
        ms = int(time.time() * 1000)
        name = f"operation-{ms}-{secrets.token_hex(7)[:13]}-{secrets.token_hex(4)}-{secrets.token_hex(4)}"
        now = cat.rfc3339()
        where = ("zones", zone) if zone else ("global",)
        op = {
            "kind": "compute#operation",
            "id": str(10**18 + secrets.randbelow(9 * 10**18)),
            "name": name,
            "operationType": op_type,
            "targetLink": target_link,
            "targetId": target_id,
            "status": "RUNNING",
            "user": user or f"emulator@{project}.iam.gserviceaccount.com",
            "progress": 0,
            "insertTime": now,
            "startTime": now,
            "selfLink": cat.link(project, *where, "operations", name),
        }
        if zone:
            op["zone"] = cat.link(project, "zones", zone)
        self._ops[(project, zone, name)] = op
        if request_id:
            self._request_ids[(project, request_id)] = (project, zone, name)
        if len(self._ops) > MAX_OPERATIONS:  # forget the oldest finished ones, as GCE does eventually
            for key in [k for k, o in self._ops.items() if o["status"] == "DONE"][: MAX_OPERATIONS // 10]:
                del self._ops[key]
            self._request_ids = {k: v for k, v in self._request_ids.items() if v in self._ops}
        return op

    def _system_op(self, inst: Instance, op_type: str, message: str | None) -> None:
        op = self._new_op(inst, op_type, user="system")
        if message:
            op["statusMessage"] = message
        self._finish(op)

    def _finish(self, op: dict, error: tuple[str, str, int, str] | None = None) -> None:
        with self._lock:
            op.update(status="DONE", progress=100, endTime=cat.rfc3339())
            if error:
                code, message, http_code, http_message = error
                op["error"] = {"errors": [{"code": code, "message": message}]}
                op["httpErrorStatusCode"] = http_code
                op["httpErrorMessage"] = http_message
            self._cond.notify_all()

    def _is_exhausted(self, inst: Instance) -> bool:
        return self._exhausted_for(inst.zone, inst.plan.machine.name)

    def _exhausted_for(self, zone: str, name: str) -> bool:
        if zone not in self._exhausted:
            return False
        types = self._exhausted[zone]
        return types is None or any(name == t or (t.endswith("-") and name.startswith(t)) for t in types)

    def _exhausted_error(self, inst: Instance) -> tuple[str, str, int, str]:
        return (
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            f"The zone 'projects/{inst.project}/zones/{inst.zone}' does not have enough resources "
            "available to fulfill the request.  Try a different zone, or try again later.",
            503,
            "SERVICE UNAVAILABLE",
        )

    # ---- quotas ------------------------------------------------------------------------------
    def _rlimits(self, project: str, region: str) -> dict[str, float]:
        if (project, region) not in self._region_quotas:
            limits = {k: float(v) for k, v in cat.DEFAULT_REGION_QUOTAS.items()}
            limits.update({k: v for k, v in self.quotas.items() if k not in cat.DEFAULT_PROJECT_QUOTAS})
            self._region_quotas[(project, region)] = limits
        return self._region_quotas[(project, region)]

    def _plimits(self, project: str) -> dict[str, float]:
        if project not in self._project_quotas:
            limits = {k: float(v) for k, v in cat.DEFAULT_PROJECT_QUOTAS.items()}
            limits.update({k: v for k, v in self.quotas.items() if k in cat.DEFAULT_PROJECT_QUOTAS})
            self._project_quotas[project] = limits
        return self._project_quotas[project]

    def _charges(self, project: str, zone: str, plan: InstancePlan) -> dict[str, float]:
        limits = self._rlimits(project, cat.ZONE_REGION[zone])
        out: dict[str, float] = {}
        demand = cat.quota_demand(plan.machine, plan.accelerators, plan.spot, plan.disk_gb, plan.external_ips)
        for metric, amount in demand.items():
            if metric.startswith("PREEMPTIBLE_") and not limits.get(metric):
                metric = metric[len("PREEMPTIBLE_") :]  # no preemptible quota: spot uses the regular one
            out[metric] = out.get(metric, 0) + amount
        return out

    def _usage(self, project: str, region: str | None, exclude: Instance | None = None) -> dict[str, float]:
        usage: dict[str, float] = {}
        for (p, z, _), inst in self._instances.items():
            if p != project or inst is exclude or (region and cat.ZONE_REGION[z] != region):
                continue
            for metric, amount in self._charges(p, z, inst.plan).items():
                if inst.status in ACTIVE or metric in ("INSTANCES", "DISKS_TOTAL_GB", "SSD_TOTAL_GB"):
                    usage[metric] = usage.get(metric, 0) + amount
        return usage

    def _check_quota(self, project: str, zone: str, plan: InstancePlan, exclude: Instance | None = None):
        region = cat.ZONE_REGION[zone]
        rlimits, plimits = self._rlimits(project, region), self._plimits(project)
        rusage, pusage = self._usage(project, region, exclude), self._usage(project, None, exclude)
        for metric, amount in self._charges(project, zone, plan).items():
            if metric in plimits:
                limit, used, where = plimits[metric], pusage.get(metric, 0), "globally"
            elif metric in rlimits:
                limit, used, where = rlimits[metric], rusage.get(metric, 0), f"in region {region}"
            else:
                continue
            if used + amount > limit:
                message = f"Quota '{metric}' exceeded.  Limit: {limit} {where}."
                raise ComputeError(403, "quotaExceeded", message, domain="usageLimits")

    # ---- metadata ----------------------------------------------------------------------------
