"""The watcher: one small standard VM per Store that relaunches its preempted jobs while no notebook runs.

A kernel waiting on a cell and the Jupyter server relaunch a preempted job at once (the fast path), but a
detached job outlives them: the laptop closes, the kernel stops. So every submission on the gce backend makes
sure a watcher runs for its Store (:meth:`Watchers.ensure`), on Google's side:

* a standard VM (never spot: it must outlive the jobs' preemptions) of ``c.NBBurst.watcher_machine_type``
  (e2-small), named from a hash of the Store's URL (``nbburst-watch-<hash>``) so that there is one per Store:
  a create finds it there already (409) when one runs. Labels ``nbburst-watcher=<hash>`` and
  ``nbburst-owner``, and not ``nbburst=1``: it is no job's machine (``nbburst gc`` judges it apart);
* its startup script (``vm/watch.sh``) installs the client's nbburst wheel and runs
  ``python -m nbburst.client.supervision.watchervm``: the same supervision loop as every other host,
  against the gs:// Store, as the VMs' service account. It reads each job's key from the job's Secret Manager
  secret (which grants that account access) and acts only on jobs whose key it could read;
* it deletes its own VM once it has seen no unfinished job for ``c.NBBurst.watcher_idle``, and carries a hard
  limit (``scheduling.maxRunDuration``, then DELETE) of the time limit of the job it was made for plus the
  idle period and an hour, so it is never left running for long; a later job whose time limit outlasts it
  replaces it (as one that is off: it could not delete its VM).

A watcher that decides to leave says so first in the Store (``watchers/<name>.json``: ``leaving``) and looks at
the jobs once more; a submission that finds the watcher leaving waits until it is gone and makes a new one. So
a job submitted while the watcher ends is never left without one. The Lease of each job
(client/supervision/supervisor.py) keeps the watcher and the fast path from relaunching the same attempt twice.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

from ... import config
from ...errors import BurstError
from ...protocol import dist
from ...protocol.durations import parse_duration
from ...protocol.job import Resources
from ...store import NotFound, Store
from ..base import Check
from . import api as gce_api
from . import vm
from .context import GCEContext

LABEL = "nbburst-watcher"
PREFIX = "nbburst-watch-"
#: Instance metadata: the Store it watches, the nbburst wheel to install, the client's settings.
ROOT_KEY = "nbburst-watch-root"
WHEEL_KEY = "nbburst-watch-wheel"
SETTINGS_KEY = "nbburst-watch-settings"
#: Where in the Store a watcher says whether it is watching or leaving.
STATE_PREFIX = "watchers/"
#: Settings of the client that do not travel to the watcher (its own folders, a file of this computer).
LOCAL_SETTINGS = frozenset({"root", "state_dir", "price_file", "bucket"})
#: Added to the longest job time limit: boots, the idle period, the last relaunch.
MARGIN_S = 3600.0
MAX_RUN_S = 120 * 86400  # the longest maxRunDuration Compute Engine takes
WAIT_GONE_S = 60.0  # a leaving watcher deletes its VM within a round of saying so


def digest(store_url: str) -> str:
    """The hash that names the watcher of ``store_url`` (and labels it)."""
    return hashlib.sha256(store_url.encode()).hexdigest()[:16]


def watcher_name(store_url: str) -> str:
    """The name of the watcher VM of ``store_url``: one per Store."""
    return PREFIX + digest(store_url)


def state_key(name: str) -> str:
    """The Store object in which watcher ``name`` says whether it is watching or leaving."""
    return f"{STATE_PREFIX}{name}.json"


def say_state(store: Store, name: str, state: str, refused: str = "") -> None:
    """Record that watcher ``name`` is ``watching`` or ``leaving`` (written by the watcher itself), and whether it
    can relaunch jobs: ``refused``, the refusal (403) a relaunch got from Compute Engine, says it cannot."""
    record = {"vm": name, "state": state, "at": time.time(), "can_relaunch": not refused, "refused": refused}
    store.put(state_key(name), json.dumps(record).encode())


def refusal(store: Store, name: str) -> str:
    """Why watcher ``name`` cannot relaunch jobs, as it said (with the fix); "" when it can, or said nothing."""
    try:
        record = json.loads(store.get(state_key(name)))
    except (NotFound, ValueError):
        return ""
    return "" if record.get("can_relaunch", True) else str(record.get("refused") or "")


def cannot_relaunch(error: str, account: str) -> str:
    """What a watcher whose relaunch was refused says: the refusal and the roles its account needs
    (https://cloud.google.com/compute/docs/access/iam: Compute Instance Admin (v1) to create and start VMs, and
    Service Account User to run them as a service account)."""
    return (
        f"the watcher cannot relaunch: {error}; fix: grant roles/compute.instanceAdmin.v1 and Service Account User "
        f"(roles/iam.serviceAccountUser) to {account or 'the watcher VM service account'}"
    )


def leaving(store: Store, name: str) -> bool:
    """Whether watcher ``name`` said it is leaving (it deletes its VM once its last look found no job)."""
    try:
        return json.loads(store.get(state_key(name))).get("state") == "leaving"
    except (NotFound, ValueError):
        return False


def settings_for_watcher(settings: config.NBBurst) -> dict[str, str]:
    """The client's settings that differ from the defaults, as ``NBBURST_*`` values for the watcher's program."""
    out = {}
    for name, entry in config.describe(settings).items():
        if entry["source"] != "default" and name not in LOCAL_SETTINGS:
            value = entry["value"]
            out[config.ENV_PREFIX + name.upper()] = json.dumps(value) if isinstance(value, dict) else str(value)
    return out


def wheel_for_watcher(store: Store) -> dict[str, Any]:
    """The client's nbburst wheel, uploaded to ``store`` (once), and the distributions it needs."""
    from importlib import metadata

    names = (re.match(r"[A-Za-z0-9._-]+", r) for r in metadata.requires("nbburst") or [] if "extra ==" not in r)
    return {**dist.upload_wheel(store), "requires": sorted({m.group(0) for m in names if m})}


def _ends_before(inst: Any, time_limit_s: float) -> bool:
    """Whether the running watcher ``inst`` reaches its hard limit before a job of ``time_limit_s`` from now could
    end (by this computer's clock: the margin is an hour)."""
    limit = inst.scheduling.max_run_duration.seconds if inst.scheduling.max_run_duration else 0
    started = gce_api.timestamp(inst.last_start_timestamp or inst.creation_timestamp)
    return inst.status == "RUNNING" and bool(limit) and bool(started) and started + limit < time.time() + time_limit_s


class Watchers:
    """The watcher VMs of one project, through the gce backend's ``context`` (its Compute API, settings, image and
    account)."""

    def __init__(self, context: GCEContext):
        self.context = context

    @property
    def settings(self) -> config.NBBurst:
        return self.context.settings

    def find(self, name: str) -> tuple[Any, str] | None:
        """(instance, zone) of the watcher ``name``, in any zone; None when it does not exist."""
        found = self.context.api.instances_where(f'name = "{name}"')
        return found[0] if found else None

    def list(self) -> list[tuple[Any, str]]:
        """(instance, zone) of every watcher VM of the project."""
        return self.context.api.instances_where(f"labels.{LABEL}:*")

    def of(self, store_url: str) -> list[str]:
        """Names of the watcher VMs that watch ``store_url``."""
        return [
            inst.name
            for inst, _ in self.list()
            if {i.key: i.value for i in inst.metadata.items}.get(ROOT_KEY) == store_url
        ]

    def ensure(self, store: Store, time_limit_s: float) -> str:
        """Make sure the watcher of ``store`` runs; what was done: ``created``, ``replaced`` or ``running``.

        ``time_limit_s``: the time limit of the job it is made for. A watcher whose hard limit ends before it, or
        that is off (it could not delete its VM, or stopped), is replaced by one with this client's nbburst,
        settings and a limit long enough."""
        name = watcher_name(store.url)
        deadline = time.monotonic() + WAIT_GONE_S
        replaced = False
        while time.monotonic() < deadline:
            found = self.find(name)
            if found is None:
                if self._create(store, name, time_limit_s):
                    return "replaced" if replaced else "created"
                continue  # made by another submission meanwhile: look at it
            inst, zone = found
            if inst.status in ("TERMINATED", "STOPPED", "SUSPENDED") or _ends_before(inst, time_limit_s):
                what = f"replacing the watcher VM {name} ({inst.status})"
                op = self.context.api.delete_instance(zone, name, what)
                if op is not None:
                    self.context.api.wait(op, what, zone=zone)
                replaced = True
            elif inst.status in ("STOPPING", "SUSPENDING") or leaving(store, name):
                time.sleep(1.0)  # it is ending: a new one once it is gone
            else:
                return "running"
        raise BurstError(f"the watcher VM {name} did not end in {WAIT_GONE_S:.0f} s; `nbburst gc` removes it")

    def _create(self, store: Store, name: str, time_limit_s: float) -> bool:
        """Insert the watcher VM; False when it exists already (409)."""
        from google.api_core import exceptions as gexc

        zone = self.context.zones_for(Resources())[0]
        what = f"creating the watcher VM {name} in {zone}"
        resource = self.resource(store, name, zone, time_limit_s)
        try:
            op = self.context.api.insert_instance(zone, resource, what)
        except gexc.Conflict:
            return False
        say_state(store, name, "watching")  # ours: a leaving record of an earlier one is stale
        codes, message = gce_api.operation_errors(self.context.api.wait(op, what, zone=zone))
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")
        return True

    def resource(self, store: Store, name: str, zone: str, time_limit_s: float) -> Any:
        """The watcher VM: standard, small, deleted at its hard limit, running ``vm/watch.sh``."""
        from google.cloud import compute_v1

        idle = parse_duration(self.settings.watcher_idle, "watcher_idle")
        image = self.context.image_for(Resources())[0]
        items = {
            ROOT_KEY: store.url,
            WHEEL_KEY: json.dumps(wheel_for_watcher(store)),
            SETTINGS_KEY: json.dumps(self.watcher_settings(zone)),
            "startup-script": vm.watcher_script(),
        }
        return compute_v1.Instance(
            name=name,
            description=f"nbburst watcher of {store.url}: relaunches its preempted jobs",
            machine_type=f"zones/{zone}/machineTypes/{self.settings.watcher_machine_type}",
            labels={LABEL: digest(store.url), "nbburst-owner": gce_api.label(config.owner(self.settings))},
            metadata=gce_api.instance_metadata(items),
            disks=[self.context.boot_disk(zone, self.settings.watcher_machine_type, image)],
            network_interfaces=[self.context.network_interface(zone)],
            scheduling=compute_v1.Scheduling(
                provisioning_model="STANDARD",
                instance_termination_action="DELETE",
                max_run_duration=compute_v1.Duration(seconds=int(min(time_limit_s + idle + MARGIN_S, MAX_RUN_S))),
                on_host_maintenance="MIGRATE",
                automatic_restart=True,
            ),
            service_accounts=self.context.service_accounts(),
        )

    def watcher_settings(self, zone: str) -> dict[str, str]:
        """:func:`settings_for_watcher`, with the project, zone and service account this client found by itself
        (on a Vertex AI Workbench instance: its own), which the watcher's relaunches need too."""
        out = settings_for_watcher(self.settings)
        out.setdefault(config.ENV_PREFIX + "PROJECT", self.context.project)
        out.setdefault(config.ENV_PREFIX + "ZONE", zone)
        out.setdefault(config.ENV_PREFIX + "SERVICE_ACCOUNT", self.context.service_account_email())
        return out

    def delete(self, name: str) -> None:
        """Delete the watcher VM ``name`` (nothing when it is gone)."""
        found = self.find(name)
        if found is not None:
            self.context.api.delete_instance(found[1], name, f"deleting the watcher VM {name}")

    def check(self, store: Store) -> Check:
        """For ``nbburst doctor``: whether the Store's watcher runs, what it is, and whether it can relaunch."""
        name = watcher_name(store.url)
        if not self.settings.watcher:
            return Check(
                "watcher",
                False,
                "off (c.NBBurst.watcher = False): a detached job is relaunched only while a notebook, the Jupyter "
                "server or `nbburst supervise` runs",
                fix="c.NBBurst.watcher = True",
                warning=True,
            )
        refused = refusal(store, name)
        if refused:
            return Check("watcher", False, refused, fix="grant the roles it names, then submit a job")
        found = self.find(name)
        now = f"{name} is {found[0].status} in {found[1]}" if found else f"none runs; the next job starts {name}"
        return Check(
            "watcher",
            True,
            f"{now} (a standard {self.settings.watcher_machine_type} VM that relaunches preempted jobs with the "
            f"laptop closed; it deletes itself after {self.settings.watcher_idle} without unfinished jobs)",
        )
