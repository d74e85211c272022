"""Images: the one a job boots by default, and ``nbburst image build``, which bakes this notebook's environment.

**The default image** (:data:`DEFAULT_IMAGE_PROJECT`/:data:`DEFAULT_IMAGE_FAMILY`): ``debian-12`` from
``debian-cloud``, a stock public image. A job's VM needs nothing from it but ``python3`` (any version: it
only runs the bootstrap, with the standard library), ``tar``, ``gzip`` and ``cp``: the bootstrap gets the
notebook's Python and packages with uv (see :mod:`nbburst.machines.gce.vm`). Debian 12's system Python is
3.11, the notebook Python of most users (no standalone Python to download then), the image is small and
boots fast, has no snap daemons, and is supported until 2028.

**A baked image** boots faster still: the startup script finds the venv, sees that it holds the job's
nbburst wheel, and starts the agent at once; the agent finds the notebook's packages at the notebook's
versions and installs nothing. What it holds (the contract with the job's startup script):

* ``/var/lib/nbburst/venv``: a venv of the notebook's Python ``X.Y`` (the image's own when it is that
  version, else a standalone one uv installed under ``/var/lib/nbburst/python``) holding the notebook's
  packages at its versions, its local packages and nbburst's wheel (``.nbburst-wheel`` holds the wheel's
  SHA-256: a job with the same nbburst skips its install); the image is labelled ``python=X-Y`` (which
  :meth:`~nbburst.machines.gce.machines.GCEMachines.plan` checks) and ``nbburst=<version>``;
* ``/var/lib/nbburst/image.json``: what was baked, and when.

The packages are resolved by the rules a job's environment follows (:func:`nbburst.protocol.env.resolve`):
local versions of PyTorch builds from PyTorch's index, other local versions without their local part,
local packages as wheels of their files, conda-only and Colab-only distributions left out and listed.

How, in order (everything that can be refused is refused in :func:`plan`,
which reads and creates nothing; ``--dry-run`` stops there):

1. ``plan``: the packages (this Python's distributions, or a requirements file, plus what nbburst's agent
   needs), the base image (default: :data:`DEFAULT_IMAGE_FAMILY`, or for the notebook's Python an
   image whose ``python3`` is that version), the zone, machine type and quota;
2. the nbburst wheel of this process and the wheels of the local packages (:mod:`nbburst.protocol.dist`)
   are stored in the bucket, content-addressed (``blobs/<sha256>``, shared with jobs);
3. a builder VM (on-demand; labels ``nbburst-image-build=<family>`` and
   ``nbburst-owner``; ``maxRunDuration`` then DELETE, so an abandoned builder
   ends itself) runs :func:`build_script` (``vm/build.sh``): it makes the venv, installs the packages
   and the wheels, checks that the agent imports, prints ``nbburst-image-build: SUCCESS`` to the serial
   console and powers off;
4. once the builder is TERMINATED, ``images.insert`` makes the image from its
   boot disk (name ``<family>-<yyyymmdd-hhmmss>``, in the family), waited on
   with our own GlobalOperationsClient (:meth:`ComputeAPI.wait`);
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
from pathlib import Path
from typing import Any

from ... import __version__, config
from ...errors import BurstError, UsageError
from ...protocol import dist, env
from ...protocol.durations import format_duration, parse_duration
from ...protocol.env import Local, Pin, normalise
from ...protocol.job import Resources
from . import quota as gce_quota
from . import vm
from .api import boot_disk, console_tail, instance_metadata, label, operation_errors
from .context import DEFAULT_IMAGE_FAMILY, DEFAULT_IMAGE_PROJECT, GCEContext

DEFAULT_MACHINE_TYPE = "e2-standard-4"
DEFAULT_TIMEOUT = "1h"
#: Public images whose ``python3`` is the notebook's Python: a build from one needs no standalone Python.
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
    """``3.11`` -> ``3-11`` (the image label :func:`nbburst.machines.gce.api.python_of_labels` reads)."""
    return (version or python_version()).replace(".", "-")


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


def _resolved(requirements_file: str | None) -> tuple[list[Pin], list[str], dict[str, str], list[Local]]:
    """(pins, requirement lines, ``{name: why not baked}``, local packages that travel as wheels)."""
    installed = env.distributions()
    deps = dist.machine_requirements()
    if requirements_file:
        lines = read_requirements(requirements_file)
        named = {
            normalise(m.group(1)) for line in lines if not line.startswith("-") for m in [_REQ_NAME.match(line)] if m
        }
        pins = [env.resolve(n, v, installed.get(n)) for n, v in deps.items() if n not in named]
        return [p for p in pins if isinstance(p, Pin)], lines, {}, []
    pins: list[Pin] = []
    local: list[Local] = []
    skipped: dict[str, str] = {}
    for name, info in sorted(installed.items()):
        if name == "nbburst":
            continue  # it comes as its wheel
        if name in NOT_BAKED and name not in deps:
            skipped[name] = "kernel, Jupyter, build or test tool: not needed on the VM"
            continue
        item = env.resolve(name, info.version, info)
        if isinstance(item, Pin):
            pins.append(item)
        elif isinstance(item, Local):
            local.append(item)
        else:
            skipped[name] = item.why
    return pins, [], skipped, local


def packages_to_bake(requirements_file: str | None = None) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(``{name: version}`` pins, requirement lines, ``{name: why skipped}``).

    Without a requirements file: every distribution of this Python at the version :func:`nbburst.protocol.env.resolve`
    gives it, except those in :data:`NOT_BAKED` and those no index has. With one: its lines as they are.
    Both add what nbburst's agent needs (at the versions installed here; a package the file names is left to
    the file). Local packages travel as wheels (:attr:`BuildPlan.local`)."""
    pins, lines, skipped, _ = _resolved(requirements_file)
    return {p.name: p.version for p in pins}, lines, skipped


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
    groups: list[dict[str, Any]]
    local: list[Local]
    wheel_file: str
    wheel_blob: str  # blobs/<address>, as dist.upload_wheel stores it
    wheel_sha256: str
    wheel_size: int
    store_url: str
    disk_gb: int
    timeout_s: float
    owner: str
    labels: dict[str, str] = field(default_factory=dict)
    wheels: list[dict[str, Any]] = field(default_factory=list)  # the local packages' wheels, once stored

    @property
    def wheel_url(self) -> str:
        return f"{self.store_url.rstrip('/')}/{self.wheel_blob}"

    def describe(self) -> str:
        source = "the requirements file" if self.requirements else "this notebook's environment"
        listed = [r["requirement"] for g in self.groups for r in g["requirements"]] + list(self.requirements)
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
        if self.local:
            lines.append(
                "local:      " + ", ".join(f"{p.name}=={p.version} (a wheel of its files)" for p in self.local)
            )
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
            "groups": self.groups,
            "requirements": self.requirements,
            "store": self.store_url,
            "wheels": self.wheels,
            "wheel": {"url": self.wheel_url, "file": self.wheel_file, "sha256": self.wheel_sha256},
        }


def _resolve_base(
    context: GCEContext, base_image: str | None, base_family: str | None, base_project: str | None, python: str
) -> tuple[str, str | None, str]:
    """(``projects/P/global/images/NAME``, its python label or None, where it came from)."""
    if base_image and base_family:
        raise UsageError("--base-image and --base-family: give one of them")
    if base_image:
        m = re.search(r"(?:projects/([^/]+)/)?global/images/([^/]+)$", base_image)
        project, name, family = (
            (m.group(1) or base_project or context.project, m.group(2), None)
            if m
            else (base_project or context.project, base_image, None)
        )
        source = "--base-image"
    elif base_family:
        project, name, family, source = base_project or context.project, None, base_family, "--base-family"
    else:
        project, family = DEFAULT_BASES.get(python, (DEFAULT_IMAGE_PROJECT, DEFAULT_IMAGE_FAMILY))
        name, source = None, f"the default for Python {python}:"
    url, image_python, _ = context.api.lookup_image(project, family or name, bool(family), "base image")
    if family:
        source += f" {project}/{family}"
    return url, image_python, source


def plan(
    context: GCEContext,
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
    store_url = context.check_store()
    chosen_zone = context.zones_for(Resources(zone=zone))[0]
    machine_type = machine_type or DEFAULT_MACHINE_TYPE
    machine = context.api.machine_type(chosen_zone, machine_type)
    if machine is None:
        raise UsageError(f"--machine-type {machine_type}: not offered in zone {chosen_zone}")
    base, base_python, base_source = _resolve_base(context, base_image, base_family, base_project, python)
    if base_python and base_python != python:
        raise UsageError(
            f"the base image {base} is labelled Python {base_python}, but this notebook runs Python "
            f"{python}; choose a base image with Python {python}"
        )
    problem = context.api.quota_problem(chosen_zone, gce_quota.Need(machine, spot=False))
    if problem:
        raise UsageError(f"the builder VM: {problem}")
    pins, lines, skipped, local = _resolved(requirements)
    wheel = dist.wheel_info()
    stamp = _dt.datetime.fromtimestamp(time.time() if now is None else now, _dt.timezone.utc)
    return BuildPlan(
        project=context.project,
        zone=chosen_zone,
        family=family,
        image_name=f"{family}-{stamp:%Y%m%d-%H%M%S}",
        base_image=base,
        base_source=base_source,
        machine_type=machine.name,
        python=python,
        packages={p.name: p.version for p in pins},
        requirements=lines,
        skipped=skipped,
        groups=env.install_groups(pins),
        local=local,
        wheel_file=wheel["file"],
        wheel_blob=wheel["blob"],
        wheel_sha256=wheel["sha256"],
        wheel_size=wheel["size"],
        store_url=store_url,
        disk_gb=int(context.settings.disk_gb),
        timeout_s=timeout_s,
        owner=label(config.owner(context.settings)),
        labels={"python": python_label(python), "nbburst": label(__version__)},
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
    """Runs a :class:`BuildPlan` through the gce backend's context: its Compute layer (endpoint, credentials,
    retries), bucket, network and account."""

    #: Seconds between looks at the builder while it works.
    poll_s = 2.0
    #: maxRunDuration of the builder = the build's timeout + this margin (then Compute Engine deletes it).
    run_margin_s = 600.0
    image_timeout_s = 1800.0

    def __init__(self, context: GCEContext, say: Callable[[str], None] = print):
        self.context = context
        self.api = context.api
        self.say = say
        self.builder: str | None = None

    # the builder VM ------------------------------------------------------------------------------
    def builder_name(self, plan: BuildPlan) -> str:
        return f"nbburst-image-build-{plan.image_name[-15:]}-{uuid.uuid4().hex[:4]}"

    def instance_resource(self, plan: BuildPlan, name: str) -> Any:
        from google.cloud import compute_v1

        items = {"startup-script": build_script(plan.python), SPEC_KEY: json.dumps(plan.spec(), sort_keys=True)}
        return compute_v1.Instance(
            name=name,
            description=f"nbburst image build of {plan.image_name} (deleted when the build ends)",
            machine_type=f"zones/{plan.zone}/machineTypes/{plan.machine_type}",
            labels={"nbburst-image-build": label(plan.family), "nbburst-owner": plan.owner},
            metadata=instance_metadata(items),
            disks=[boot_disk(plan.zone, plan.base_image, plan.disk_gb)],
            network_interfaces=[self.context.network_interface(plan.zone)],
            scheduling=compute_v1.Scheduling(
                provisioning_model="STANDARD",
                on_host_maintenance="MIGRATE",
                automatic_restart=True,
                instance_termination_action="DELETE",
                max_run_duration=compute_v1.Duration(seconds=int(plan.timeout_s + self.run_margin_s)),
            ),
            service_accounts=self.context.service_accounts(),
        )

    def _upload_wheels(self, plan: BuildPlan) -> None:
        store = self.context.store_for(plan.store_url)
        if dist.upload_wheel(store)["sha256"] != plan.wheel_sha256:
            raise BurstError("nbburst's files changed since the plan was made; run the build again")
        local = dist.Environment(plan.python, "", local=list(plan.local))
        plan.wheels = dist.upload_local(store, local)
        for item in local.unavailable:
            self.say(f"not baked: {item.name} ({item.why})")

    def _create_builder(self, plan: BuildPlan, name: str) -> None:
        from google.api_core import exceptions as gexc

        what = f"creating the builder VM {name} in {plan.zone}"
        try:
            op = self.api.insert_instance(plan.zone, self.instance_resource(plan, name), what)
        except (gexc.Forbidden, gexc.BadRequest, gexc.NotFound) as exc:
            raise BurstError(f"{what}: {exc.message}") from None
        codes, message = operation_errors(self.api.wait(op, what, zone=plan.zone))
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")

    def _wait_until_off(self, plan: BuildPlan, name: str) -> str:
        """Follow the builder until it is TERMINATED; its whole serial console."""
        from google.api_core import exceptions as gexc

        deadline = time.monotonic() + plan.timeout_s
        console, start, partial = "", 0, ""
        while True:
            try:
                inst = self.api.instance(plan.zone, name, "describing the builder VM")
            except gexc.NotFound:
                raise ImageBuildFailed(
                    f"the builder VM {name} disappeared before the build ended (deleted, or "
                    f"over its maximum run time). Last lines of its serial console:\n"
                    f"{console_tail(console)}"
                ) from None
            text, start = self.api.serial_output(plan.zone, name, start, "reading the builder's serial console")
            console += text
            partial += text
            *done, partial = partial.split("\n")
            for line in done:
                if line.startswith("nbburst-image-build:"):
                    self.say("  " + re.sub(r" t=[0-9.]+$", "", line.removeprefix("nbburst-image-build: ")))
            if inst.status in ("TERMINATED", "STOPPED"):
                text, start = self.api.serial_output(plan.zone, name, start, "reading the builder's serial console")
                return console + text
            if time.monotonic() > deadline:
                raise ImageBuildFailed(
                    f"the build did not finish within {format_duration(plan.timeout_s)} "
                    f"(--timeout). Last lines of the builder's serial console:\n"
                    f"{console_tail(console)}"
                )
            time.sleep(self.poll_s)

    def _boot_disk(self, plan: BuildPlan, name: str) -> str:
        inst = self.api.instance(plan.zone, name, "describing the builder VM")
        boot = [d for d in inst.disks if d.boot] or list(inst.disks)
        if not boot or not boot[0].source:
            raise BurstError(f"the builder VM {name} has no boot disk to make the image from")
        source = boot[0].source
        found = re.search(r"projects/[^/]+/zones/[^/]+/disks/[^/]+$", source)
        return found.group(0) if found else source

    def _create_image(self, plan: BuildPlan, disk: str) -> Any:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

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
        what = f"creating the image {plan.image_name}"
        try:
            op = self.api.insert_image(resource, what)
        except gexc.Conflict:
            raise UsageError(f"{what}: an image with this name exists already in project {self.api.project}") from None
        except (gexc.Forbidden, gexc.BadRequest, gexc.NotFound) as exc:
            raise BurstError(f"{what}: {exc.message}") from None
        codes, message = operation_errors(self.api.wait(op, what, timeout_s=self.image_timeout_s))
        if codes:
            raise BurstError(f"{what}: {message or ', '.join(codes)}")
        return self.api.image(plan.image_name)

    def _delete_builder(self, plan: BuildPlan, name: str) -> None:
        self.say(f"deleting the builder VM {name}")
        what = f"deleting VM {name}"
        try:
            op = self.api.delete_instance(plan.zone, name, what)
            if op is not None:
                self.api.wait(op, what, zone=plan.zone)
        except Exception as exc:  # never hide the build's own outcome behind this one
            self.say(
                f"nbburst: could not delete the builder VM {name} ({exc}); delete it with `gcloud compute "
                f"instances delete {name} --zone {plan.zone}` (it deletes itself after "
                f"{format_duration(plan.timeout_s + self.run_margin_s)} anyway)"
            )

    def build(self, plan: BuildPlan) -> BuiltImage:
        t0 = time.monotonic()
        self._upload_wheels(plan)
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
    context = GCEContext(burst.settings)
    the_plan = plan(
        context,
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
    builder = ImageBuilder(context, say=lambda line: print(line, flush=True))
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


def build_script(python: str) -> str:
    """The builder's startup script for Python ``python`` (``3.11``)."""
    if not re.fullmatch(r"\d+\.\d+", python):
        raise ValueError(f"not a Python minor version: {python!r}")
    return vm.script("build.sh", "vmlib.py", "bake.py").replace("__PYTHON__", python)


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
