"""GCEMachines: each machine is a Compute Engine VM (spot by default) running the agent.

Talks to Compute Engine through :class:`~nbburst.machines.gce.api.ComputeAPI`
(clients, retries, operations, lookups). With ``c.NBBurst.compute_endpoint``
set (an emulator, see :mod:`nbburst.testing`) it reaches that endpoint with
anonymous credentials; otherwise Application Default Credentials and the real API.

The settings and checks it shares with ``nbburst doctor``, ``nbburst image build``, ``nbburst setup`` and the
Store's watcher VM (project, zones, image, bucket, the VMs' account and network) are its ``context``, a
:class:`~nbburst.machines.gce.context.GCEContext`.

What a launch does, in order (everything that can be refused is refused in
:meth:`GCEMachines.plan`, before anything is written or paid for):

* ``plan``: zone(s), the cheapest fitting machine type (``gce_types``) at
  today's prices (``gce_prices``: the Cloud Billing Catalog, else the dated table), the
  image and its Python version (image label ``python=3-11``; with ``--gpu``, an image with an NVIDIA
  driver: ``gpu_image_family``), the bucket and who may use it (``gce_access``, checked once a session),
  and the CPU/GPU quotas of the region and of the project for spot or standard VMs (``gce_quota``);
* ``launch``: uploads the client's nbburst wheel and the job's package list
  (``nbburst.protocol.dist``), then inserts the VM with a ``request_id`` (a retried
  insert never makes two VMs) and waits on the operation with its own
  ZoneOperationsClient. With ``--zone auto``, a zone out of capacity
  (ZONE_RESOURCE_POOL_EXHAUSTED) passes on to the next zone of the region.

The VM: labels ``nbburst=1``, ``nbburst-job``, ``nbburst-owner``; metadata
``nbburst-job-url``, ``nbburst-key-secret`` (the Secret Manager secret holding the per-job signing key, which
never enters the Store nor the metadata: only the VM's service account may read it, see
:mod:`~nbburst.machines.gce.keysecret`), ``nbburst-attempt`` and the startup/shutdown scripts
(:mod:`nbburst.machines.gce.vm`); spot with ``instanceTerminationAction=STOP`` (the disk
stays for a restart) and a ``maxRunDuration`` of the job's time left plus a
margin, so Compute Engine itself ends a VM whose agent hangs; with ``--budget``,
at most what the budget left buys at the machine's price, and
``instanceTerminationAction=DELETE`` (:mod:`nbburst.protocol.budget`).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

from ... import config
from ...errors import BurstError, NotPermitted, UsageError
from ...protocol import budget, dist, envcache, pricing, sessionwire, signing
from ...protocol.job import JobLayout, JobSpec, Resources, job_url, split_job_url
from ...store import NotFound
from ..base import (
    GONE,
    PROVISIONING,
    RUNNING,
    STOPPED,
    STOPPING,
    Check,
    MachineInfo,
    Machines,
    NoCapacity,
    Plan,
    SessionLaunch,
    machine_name,
    worker_name,
)
from . import api as gce_api
from . import doctor as gce_doctor
from . import keysecret as gce_keysecret
from . import prices as gce_prices
from . import quota as gce_quota
from . import types as gce_types
from . import vm
from . import watcher as gce_watcher
from .context import ZONE_RE, GCEContext
from .firewall import SESSION_TAG

log = logging.getLogger("nbburst.gce")

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
#: How a VM's console says it waits for access granted at launch to propagate (vm/vmlib.py's IAM_WAIT).
IAM_WAIT = "waiting for IAM"
_PREEMPTION_OPS = ("compute.instances.preempted", "compute.instances.terminateOnHostMaintenance")


class _NotOffered(Exception):
    pass


def platform_of(plan: dict[str, Any]) -> str:
    """What an environment built on a VM of ``plan`` depends on besides Python and its packages: the CPU
    architecture and the image's system (its name without the date stamp: ``debian-cloud/debian-12-bookworm``)."""
    arch = "aarch64" if gce_types.architecture(str(plan.get("machine_type", ""))) == "ARM64" else "x86_64"
    image = str(plan.get("image", ""))
    m = re.search(r"projects/([^/]+)/global/images/([^/]+?)(?:-v\d{8}.*)?$", image)
    system = f"{m.group(1)}/{m.group(2)}" if m else image
    return f"linux-{arch}/{system}"


#: The network tag of a ``--workers`` job's VMs: Dask's traffic between them is admitted by a firewall rule
#: from and to this tag only (docs/scale-out.md, "Firewall on Compute Engine").
DASK_TAG = "nbburst-dask"


class GCEMachines(Machines):
    backend = "gce"
    scale_out = True  # worker VMs (launch_worker)
    session_transport = "mailbox"  # a session's cells come through the Store (launch_session, agent/session/relay.py)
    #: A session's VM: maxRunDuration = the session's time left + this margin (its warm parent ends first).
    session_margin_s = 60.0
    #: maxRunDuration = the job's time left + this margin (boot, install, the agent's own ending).
    run_margin_s = 600.0
    min_run_s = 30

    def __init__(self, settings: config.NBBurst):
        self.context = GCEContext(settings)  # where VMs go, what they boot, their bucket and account
        self.settings, self.api, self.key_secrets = settings, self.context.api, self.context.key_secrets
        self.prices = gce_prices.LivePrices(settings, self.api.credentials)
        self.watchers = gce_watcher.Watchers(self.context)  # the Store's watcher VM: relaunches with the laptop closed
        self._zones: dict[str, str] = {}  # machine name -> zone
        self.timings: dict[str, float] = {}  # of the last launch, in seconds (bench/launch.py)
        self.last_launch: dict[str, Any] = {}
        self.last_environment: dict[str, Any] = {}  # of the last launch: what the VM installs, from where

    # -- Compute Engine -------------------------------------------------------------------
    @property
    def project(self) -> str:
        return self.api.project

    @property
    def instances(self) -> Any:
        """The API's InstancesClient."""
        return self.api.instances

    @property
    def api_attempts(self) -> int:
        """How many times a Compute request that failed for a transient reason is made."""
        return self.api.attempts

    @api_attempts.setter
    def api_attempts(self, attempts: int) -> None:
        self.api.attempts = attempts

    # -- planning -----------------------------------------------------------------------------
    def plan(self, resources: Resources) -> Plan:
        self.check_workers(resources)
        self.context.check_store()
        zones = self.context.zones_for(resources)
        zone = zones[0]
        catalog = self.api.machine_types(zone)
        if resources.machine_type and resources.machine_type not in {m.name for m in catalog}:
            extra = self.api.machine_type(zone, resources.machine_type)
            if extra is not None:
                catalog = [*catalog, extra]
        offered = self.api.accelerator_types(zone) if resources.gpu else None
        prices = self.prices.table(pricing.region_of(zone))
        choice = gce_types.choose(resources, catalog, zone, prices, offered)
        spot = not resources.on_demand
        image, image_python, image_source = self.context.image_for(resources)
        self.context.check_python(image, image_python)
        disk_gb = self.context.boot_disk_gb(choice.machine.name, image)
        vms = 1 + (resources.workers or 0)  # --workers: the job's VM and its worker VMs, all alike
        need = gce_quota.Need(
            choice.machine,
            choice.gpu,
            choice.gpu_count,
            spot,
            count=vms,
            external_ips=1 if self.settings.external_ip else 0,
            ssd_gb=disk_gb if gce_types.boot_disk_type(choice.machine.name) == "pd-balanced" else 0,
        )
        problem = self.api.quota_problem(zone, need)
        if problem:
            raise UsageError(problem)
        py = f"Python {image_python}" if image_python else "Python version not labelled; the agent checks it"
        reason = f"{choice.reason}; image {image.rsplit('/', 1)[-1]} from {image_source} ({py})"
        if len(zones) > 1:
            reason += f"; zones to try: {', '.join(zones)}"
        reason += f"; {pricing.price_source(prices)}"
        m = choice.machine
        plan = Plan(
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
                "disk_gb": disk_gb,
                "gpu_attached": choice.attached_gpu,
                "image_python": image_python,
                "custom": choice.custom,
            },
        )
        return pricing.price_plan(plan, self.backend, self.settings, prices)  # the breakdown at these prices

    # -- the VM ---------------------------------------------------------------------------------
    def _max_run_s(self, spec: JobSpec) -> int:
        """The job's time left plus a margin, or less when its budget (what is left of it) buys less."""
        left = self._time_left(spec)
        by_time = int(max(self.min_run_s, left + self.run_margin_s))
        by_budget = budget.run_seconds(spec)
        return by_time if by_budget is None else max(self.min_run_s, min(by_time, by_budget))

    def _time_left(self, spec: JobSpec) -> float:
        """The job's time left by the Store's clock, as the agent and the supervisor count it: the time limit runs
        from the spec's write, and this machine's clock may be off by hours."""
        store = self.context.store_for(config.store_url(self.settings, "gce"))
        try:
            return store.updated(JobLayout(spec.job_id).spec) + spec.timeout_s - store.now()
        except NotFound:  # not written yet: nothing better than this machine's clock
            return spec.created + spec.timeout_s - time.time()

    def instance_resource(
        self,
        spec: JobSpec,
        job_url: str,
        key_secret: str,
        attempt: int,
        zone: str,
        plan: dict[str, Any],
        spot: bool,
        worker: int | None = None,
    ) -> Any:
        """The job's VM, or its worker VM ``worker`` (``--workers``): the same machine, labels and limits."""
        from google.cloud import compute_v1

        name = machine_name(spec.job_id) if worker is None else worker_name(spec.job_id, worker)
        gpu, gpu_count = plan.get("gpu"), int(plan.get("gpu_count") or 0)
        attached = bool(gpu) and (plan.get("extra") or {}).get("gpu_attached", False)
        items = {
            "nbburst-job-url": job_url,
            gce_keysecret.METADATA_KEY: key_secret,
            "nbburst-attempt": str(attempt),
            "startup-script": vm.startup_script(),
            "shutdown-script": vm.shutdown_script(),
        }
        if self.settings.package_index:
            items[vm.PACKAGE_INDEX_KEY] = self.settings.package_index  # the VM's uv and pip install from it
        if gpu:
            items["install-nvidia-driver"] = "True"
        if worker is not None:
            items["nbburst-worker"] = str(worker)  # its agent serves a Dask worker (agent/scaleout.py)
        scheduling = compute_v1.Scheduling(
            provisioning_model="SPOT" if spot else "STANDARD",
            # a capped job's machine goes once its budget is spent: deleted, so its disk costs nothing more
            instance_termination_action="STOP" if spec.budget_usd is None else "DELETE",
            max_run_duration=compute_v1.Duration(seconds=self._max_run_s(spec)),
            on_host_maintenance="TERMINATE" if spot or gpu else "MIGRATE",
            automatic_restart=False,
        )
        resource = compute_v1.Instance(
            name=name,
            description=f"nbburst job {spec.name} ({spec.job_id})",
            machine_type=f"zones/{zone}/machineTypes/{plan['machine_type']}",
            labels={
                "nbburst": "1",
                "nbburst-job": spec.job_id,
                "nbburst-owner": gce_api.label(spec.owner or "unknown"),
                "nbburst-name": gce_api.label(spec.name),
            },
            metadata=gce_api.instance_metadata(items),
            disks=[self.context.boot_disk(zone, plan["machine_type"], plan["image"])],
            network_interfaces=[self.context.network_interface(zone)],
            scheduling=scheduling,
            service_accounts=self.context.service_accounts(),
        )
        if spec.resources.workers:  # the firewall rule of docs/scale-out.md admits Dask's traffic between these
            resource.tags = compute_v1.Tags(items=[DASK_TAG])
        if attached and gpu_count:
            resource.guest_accelerators = [
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{gpu}", accelerator_count=gpu_count
                )
            ]
        return resource

    def _create(self, zone: str, resource: Any) -> None:
        from google.api_core import exceptions as gexc

        what = f"creating VM {resource.name} in {zone}"
        try:
            op = self.api.insert_instance(zone, resource, what)
        except gexc.Conflict:
            return  # it exists: made by an earlier try of this very launch (the name is the job's)
        except gexc.Forbidden as exc:
            if "quota" in exc.message.lower():
                raise BurstError(f"{what}: {exc.message} — request more quota: {self.api.quota_link('CPUS')}") from None
            raise NotPermitted(
                f"{what}: {exc.message} — the account needs the Compute Instance Admin role"
                " and permission to use the service account"
            ) from None
        except gexc.BadRequest as exc:
            if "does not exist in zone" in exc.message or "not available" in exc.message:
                raise _NotOffered(exc.message) from None
            raise BurstError(f"{what}: {exc.message}") from None
        except gexc.NotFound as exc:
            raise BurstError(f"{what}: {exc.message}") from None
        try:
            done = self.api.wait(op, what, zone=zone)
        except BurstError:
            self._zones[resource.name] = zone
            try:  # we cannot tell how it went: never leave a VM behind that nobody waits for
                self.delete(resource.name)
            except Exception:
                log.warning(
                    "nbburst: could not delete %s after a failed launch; `nbburst gc` removes it", resource.name
                )
            raise
        codes, message = gce_api.operation_errors(done)
        self.api.check_insert(what, zone, codes, message)
        if any("QUOTA" in c for c in codes):
            raise BurstError(f"{what}: {message} — request more quota: {self.api.quota_link('CPUS')}")
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")

    def _launch_zones(self, spec: JobSpec, plan: dict[str, Any]) -> list[str]:
        """The planned zones, unless the resources now name another zone (a supervisor moving the job)."""
        zones = list((plan.get("extra") or {}).get("zones") or [plan["zone"]])
        wanted = spec.resources.zone
        if wanted and ZONE_RE.match(wanted) and wanted != plan.get("zone"):
            return [wanted]
        return zones

    def launch_worker(self, spec: JobSpec, job_url: str, key: bytes, index: int, attempt: int) -> str:
        """A worker VM of a ``--workers`` job; one left from before (stopped, preempted) is replaced."""
        if self._get(worker_name(spec.job_id, index)) is not None:
            self.delete(worker_name(spec.job_id, index), wait=True)
        return self.launch(spec, job_url, key, attempt, worker=index)

    def launch_session(self, request: SessionLaunch) -> str:
        """Start a warm session's VM ``request.machine`` (client/session/mailbox.py): a job VM's image,
        environment (what ``request.preload`` needs) and account, whose startup runs the session's relay and
        warm parent (agent/session/relay.py) with the session's settings (idle, until, preload, boot) in its
        metadata; the session's token reaches it as a job key does (Secret Manager). Spot as planned, deleted at
        the session's limit (maxRunDuration) or when it ends itself."""
        from google.cloud import compute_v1

        session_id, machine, plan, secret = (
            request.session_id,
            request.machine,
            request.plan,
            bytes.fromhex(request.token),
        )
        settings = {"idle": request.idle_s, "until": request.until, "preload": request.preload, "boot": request.boot}
        root = self.context.check_store()
        owner = config.owner(self.settings)
        left = request.until - time.time()
        spec = JobSpec(
            job_id=session_id,
            name=f"session {session_id}",
            backend=self.backend,
            kind="session",
            resources=Resources(cores=plan.get("cores")),
            timeout_s=left,
            max_restarts=0,
            outputs=None,
            owner=owner,
            plan=plan,
        )
        keys = signing.KeyRing(config.state_dir(self.settings) / "keys")
        if not keys.has(session_id):  # the environment its VM stores is signed with the secret: the next VM trusts it
            keys.add(session_id, secret, root)
        self._publish_environment(
            self.context.store_for(root), JobLayout(session_id), secret, "", request.preload, plan
        )
        key_secret = self.key_secrets.put(session_id, secret, self.context.service_account_email(), owner)
        tried = []
        for zone in self._launch_zones(spec, plan):
            resource = self.instance_resource(spec, job_url(root, session_id), key_secret, 1, zone, plan, plan["spot"])
            resource.name, resource.description = machine, f"nbburst warm session {session_id}"
            resource.labels["nbburst-session"] = "1"
            resource.tags = compute_v1.Tags(
                items=[SESSION_TAG]
            )  # the firewall rule of `nbburst setup` admits its relay
            items = {i.key: i.value for i in resource.metadata.items if i.key != "shutdown-script"}
            items["startup-script"] = vm.session_startup_script()
            items["nbburst-session"] = json.dumps(settings)
            items[sessionwire.WAKE_ATTRIBUTE] = "0"  # there from the start: the relay's hanging read waits on it
            resource.metadata = gce_api.instance_metadata(items)
            resource.scheduling.instance_termination_action = "DELETE"
            resource.scheduling.max_run_duration = compute_v1.Duration(
                seconds=int(max(self.min_run_s, left + self.session_margin_s))
            )
            try:
                self._create(zone, resource)
            except (NoCapacity, _NotOffered) as exc:
                tried.append(str(exc))
                continue
            self._zones[machine] = zone
            return machine
        raise NoCapacity(f"no zone could start the session's VM: {'; '.join(tried)}")

    def launch(
        self,
        spec: JobSpec,
        job_url: str,
        key: bytes,
        attempt: int,
        *,
        skip_zones: tuple[str, ...] = (),
        worker: int | None = None,
    ) -> str:
        name = machine_name(spec.job_id) if worker is None else worker_name(spec.job_id, worker)
        plan = spec.plan if spec.plan.get("image") else self.plan(spec.resources).to_dict()
        t0 = time.perf_counter()
        self._publish(spec, job_url, key)
        self.timings = {"upload_dist": time.perf_counter() - t0}
        key_secret = self.key_secrets.put(spec.job_id, key, self.context.service_account_email(), spec.owner)
        self.timings["key_secret"] = time.perf_counter() - t0 - self.timings["upload_dist"]
        zones = [z for z in self._launch_zones(spec, plan) if z not in skip_zones]
        spot = bool(plan.get("spot", True)) and not spec.resources.on_demand
        fallback = spot and (spec.resources.fallback_on_demand or self.settings.fallback_on_demand)
        tried: list[str] = []
        t1 = time.perf_counter()
        for use_spot in [spot] + ([False] if fallback else []):
            for zone in zones:
                resource = self.instance_resource(spec, job_url, key_secret, attempt, zone, plan, use_spot, worker)
                try:
                    self._create(zone, resource)
                except NoCapacity:
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
            raise NoCapacity(f"{plan['machine_type']} is not offered in zone {zones[0]}", zones[0])
        if len(zones) == 1 and len(tried) == 1:
            region = pricing.region_of(zones[0])
            raise NoCapacity(
                f"zone {zones[0]} has no capacity for {plan['machine_type']} {kind} VMs right now "
                f"(ZONE_RESOURCE_POOL_EXHAUSTED). Try --zone auto (the other zones of {region}), "
                f"{'--on-demand, ' if spot else ''}another machine type, or again later",
                zones[0],
            )
        raise NoCapacity(
            f"no capacity for {plan['machine_type']} {kind} VMs in any zone tried: {', '.join(tried)}. Try "
            f"{'--on-demand, ' if spot else ''}another region (c.NBBurst.zone) or machine type, or again later",
            zones[-1] if zones else None,
        )

    # -- the environment on the VM ---------------------------------------------------------------
    def environment(self, code: str, modules: Iterable[str], plan: dict[str, Any] | None = None) -> dist.Environment:
        """What a VM of ``plan`` installs for a job of ``code`` (see :mod:`nbburst.protocol.dist`)."""
        modules = list(modules)
        python = ".".join(map(str, sys.version_info[:2]))
        platform = platform_of(plan) if plan else ""
        return dist.environment(dist.requirements(code, modules), python, platform, code, modules)

    def check_environment(self, code: str, modules: Iterable[str]) -> None:
        """Refuse a job whose cell needs a distribution a VM cannot install (conda-only, Colab-only), naming it."""
        modules = list(modules)
        dist.check(self.environment(code, modules), code, modules)

    def _publish(self, spec: JobSpec, job_url: str, key: bytes) -> None:
        """The job's signed manifest: its nbburst, its environment and the stored one to start from."""
        root, job_id = split_job_url(job_url)
        store, layout = self.context.store_for(root), JobLayout(job_id)
        if store.exists(layout.dist_manifest):
            return
        code = store.get(layout.code).decode(errors="replace") if spec.kind == "cell" else ""
        try:
            modules = list(json.loads(store.get(layout.inputs)).get("modules", {}).values())
        except Exception:
            modules = []
        self._publish_environment(store, layout, key, code, modules, spec.plan)

    def _publish_environment(
        self, store: Any, layout: JobLayout, key: bytes, code: str, modules: list[str], plan: dict[str, Any]
    ) -> None:
        """The signed manifest of what a VM of ``plan`` installs to run ``code`` with ``modules``."""
        environment = self.environment(code, modules, plan)
        dist.check(environment, code, modules)
        if environment.unavailable:
            log.warning(
                "nbburst: not installed on the VM (the cell does not import them): %s",
                ", ".join(f"{u.name} ({u.why})" for u in environment.unavailable),
            )
        keys = signing.KeyRing(config.state_dir(self.settings) / "keys")
        base = envcache.choose(
            store,
            environment.hash,
            environment.python,
            environment.platform,
            {p.name: p.version for p in environment.pins},
            lambda job: keys.get(job) if keys.has(job) else None,
        )
        dist.publish(store, layout, key, environment_=environment, base=base)
        self.last_environment = {"summary": environment.summary(), "hash": environment.hash, "base": base}

    # -- finding a machine ------------------------------------------------------------------------
    def _get(self, name: str) -> tuple[Any, str] | None:
        """(instance, zone), or None when it does not exist."""
        from google.api_core import exceptions as gexc

        zone = self._zones.get(name) or self.context.default_zone()
        if zone:
            try:
                inst = self.api.instance(zone, name)
                self._zones[name] = zone
                return inst, zone
            except gexc.NotFound:
                if name in self._zones:
                    return None
        found = self.api.instances_where(f'name = "{name}"')
        if not found:
            return None
        inst, zone = found[0]
        self._zones[name] = zone
        return inst, zone

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
            created=gce_api.timestamp(inst.creation_timestamp),
            detail=f"{inst.status} {gce_api.resource_name(inst.machine_type)} in {zone}"
            + (" (spot)" if inst.scheduling.provisioning_model == "SPOT" else ""),
            labels=labels,
        )

    def describe(self, name: str) -> MachineInfo:
        found = self._get(name)
        if found is None:
            return MachineInfo(name=name, job_id="", state=GONE)
        return self._info(*found)

    def list(self, job_id: str | None = None) -> list[MachineInfo]:
        # Several expressions: each in parentheses, as the API's filter parameter requires.
        filter_ = '(labels.nbburst = "1")' + (f' (labels.nbburst-job = "{job_id}")' if job_id else "")
        out = []
        for inst, zone in self.api.instances_where(filter_):
            self._zones[inst.name] = zone
            out.append(self._info(inst, zone))
        return sorted(out, key=lambda m: m.name)

    # -- lifecycle ----------------------------------------------------------------------------------
    def restart(self, name: str, spec: JobSpec, job_url: str, key: bytes, attempt: int) -> str:
        """Start the stopped VM again (its disk keeps the venv and pip cache), or make a new one when it is
        gone, or elsewhere when the supervisor moves the job (another zone, on-demand)."""
        from google.api_core import exceptions as gexc

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
        moved = bool(wanted and ZONE_RE.match(wanted) and wanted != zone)
        to_standard = spec.resources.on_demand and inst.scheduling.provisioning_model == "SPOT"
        if moved or to_standard:
            log.info(
                "nbburst: %s: replacing the VM in %s (%s)", name, zone, f"moving to {wanted}" if moved else "on-demand"
            )
            self.delete(name, wait=True)
            return self.launch(spec, job_url, key, attempt)
        what = f"starting VM {name} in {zone}"
        try:
            self._set_attempt(inst, zone, attempt)
            op = self.api.start_instance(zone, name, what)
        except gexc.Forbidden as exc:
            raise NotPermitted(f"{what}: {exc.message} — the account needs the Compute Instance Admin role") from None
        codes, message = gce_api.operation_errors(self.api.wait(op, what, zone=zone))
        self.api.check_insert(what, zone, codes, message)
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")
        return name

    def _set_attempt(self, inst: Any, zone: str, attempt: int) -> None:
        what = "updating the VM's metadata"
        self.api.wait(self._set_item(inst, zone, "nbburst-attempt", str(attempt), what), what, zone=zone)

    def _set_item(self, inst: Any, zone: str, key: str, value: str, what: str) -> Any:
        """Set one attribute of the instance's metadata, keeping the others; the operation. setMetadata replaces
        them all and takes the current fingerprint: a stale one is refused with 412 conditionNotMet, so the
        instance is read again and the change retried
        (https://cloud.google.com/compute/docs/metadata/setting-custom-metadata)."""
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        for _ in range(3):
            items = [compute_v1.Items(key=i.key, value=i.value) for i in inst.metadata.items if i.key != key]
            items.append(compute_v1.Items(key=key, value=value))
            metadata = compute_v1.Metadata(fingerprint=inst.metadata.fingerprint, items=items)
            try:
                return self.api.set_metadata(zone, inst.name, metadata, what)
            except gexc.PreconditionFailed:
                inst = self.api.instance(zone, inst.name)
        raise BurstError(f"could not update the metadata of {inst.name}: it kept changing")

    def wake_session(self, name: str, value: str) -> None:
        """Change the session VM's wake attribute, on which its relay holds a hanging read (agent/session/relay.py);
        the operation is not waited for: the relay sees the value once Compute Engine has applied it. Nothing when
        the VM is gone (the client finds that out by itself)."""
        found = self._get(name)
        if found is not None:
            self._set_item(found[0], found[1], sessionwire.WAKE_ATTRIBUTE, value, "waking the session's relay")

    def delete(self, name: str, *, wait: bool = False) -> None:
        found = self._get(name)
        if found is None:
            return
        zone, what = found[1], f"deleting VM {name}"
        op = self.api.delete_instance(zone, name, what)
        if op is not None and wait:
            self.api.wait(op, what, zone=zone)

    def cleanup(self, name: str) -> None:
        """The job ended: delete its VM unless it is gone or being deleted already (the agent deletes its own;
        a VM that could only power itself off is deleted here), and its key's secret."""
        found = self._get(name)
        if found is not None and found[0].labels.get("nbburst-session") == "1" and found[0].status == "RUNNING":
            return  # a warm session's VM, which ran the job: it serves the next cells and ends itself
        if found is not None and "delete" not in self.api.operation_types(found[1], found[0]):
            self.delete(name)
        self.release_key(name.removeprefix(machine_name("")))

    def ensure_watcher(self, store: Any, spec: JobSpec) -> str:
        """Make sure the watcher VM of ``store`` runs, so that ``spec``'s job is relaunched after a preemption even
        when no notebook runs (:mod:`~nbburst.machines.gce.watcher`); what was done ("" with c.NBBurst.watcher
        off)."""
        if not self.settings.watcher:
            return ""
        return self.watchers.ensure(store, spec.timeout_s)

    def watchers_of(self, store_url: str) -> list[str]:
        """The watcher VMs of the Store at ``store_url`` (:meth:`Watchers.of`)."""
        return self.watchers.of(store_url)

    def delete_watcher(self, name: str) -> None:
        """Delete the watcher VM ``name`` (nothing when it is gone)."""
        self.watchers.delete(name)

    def held_keys(self) -> list[tuple[str, str]]:
        """The jobs whose key secret exists in the project, with their owner label (for ``nbburst gc``)."""
        return self.key_secrets.held()

    def release_key(self, job_id: str) -> None:
        """Delete job ``job_id``'s key secret."""
        self.key_secrets.delete(job_id)

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
        since = gce_api.timestamp(inst.last_start_timestamp) - 1
        if self.api.operation_types(zone, inst, since) & set(_PREEMPTION_OPS):
            return None  # preempted or ended for maintenance: a relaunch, not a failure
        console = self.console(name)
        last_boot = console[console.rfind("nbburst-startup: begin") :] if "nbburst-startup: begin" in console else ""
        if not last_boot:
            return None  # our script never ran (or the console is gone): nothing to blame it on
        said = re.findall(r"nbburst-startup: (.*)", last_boot)
        if said and said[-1].startswith(IAM_WAIT):
            return None  # stopped while it waited for its access to propagate (vm/vmlib.py's IamWait): not its fault
        exited = re.findall(r"nbburst-startup: agent exited with status (\d+)", last_boot)
        if "nbburst-startup: agent starting" in last_boot and not (exited and exited[-1] in ("2", "3")):
            return None
        return (
            f"the machine {name} stopped before the nbburst agent could run the job (a boot failure, not a "
            f"preemption). Last lines of its serial console:\n{gce_api.console_tail(last_boot)}"
        )

    def preempt(self, name: str, grace_s: float) -> None:
        found = self._get(name)
        if found is None:
            raise UsageError(f"machine {name} does not exist (the job is not running)")
        self.api.preempt(found[1], name, grace_s)

    def console(self, name: str) -> str:
        found = self._get(name)
        if found is None:
            return ""
        return self.api.serial_output(found[1], name)[0]

    # -- doctor ---------------------------------------------------------------------------------------
    def doctor(self, resources: Resources | None = None) -> list[Check]:
        """Credentials, project and zone, the Compute and Storage APIs, the bucket, the spot and standard CPU
        quota for ``resources`` (default: the default machine), and the image (see gce_doctor)."""
        checks = gce_doctor.doctor(self.context, resources)
        try:
            checks.append(self.watchers.check(self.context.store_for(config.store_url(self.settings, "gce"))))
        except Exception as exc:  # the checks above say why Compute Engine cannot be reached
            checks.append(Check("watcher", False, f"not checked: {type(exc).__name__}: {exc}", warning=True))
        return checks
