"""Configuration: traitlets first, then ``NBBURST_*`` variables, then ``%burst config``.

Per-cell flags come last and are not configuration: they live in
:class:`nbburst.options.Options`. Every effective value remembers where it came
from, because "why is it using that bucket?" is the first question a user asks.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, Unicode
from traitlets.config import Config, Configurable

from .errors import UsageError
from .protocol import backends
from .protocol.budget import parse_budget
from .protocol.durations import parse_duration

ENV_PREFIX = "NBBURST_"


def _data_dir() -> str:
    import platformdirs

    return platformdirs.user_data_dir("nbburst", appauthor=False)


class NBBurst(Configurable):
    """Settings of nbburst, set with ``c.NBBurst.<name> = ...`` in a Jupyter or IPython config file."""

    backend = Enum(
        list(backends.names()), default_value="local", help="Where cells run: " + ", ".join(backends.names()) + "."
    ).tag(config=True)
    root = Unicode(
        "",
        help="Store URL: a folder, file://..., or gs://bucket/prefix. "
        "Default: a folder in the user data dir (local), gs://BUCKET/nbburst (gce).",
    ).tag(config=True)
    bucket = Unicode("", help="GCS bucket for the gce backend, when root is not set.").tag(config=True)
    state_dir = Unicode("", help="Local folder for signing keys and local machines. Default: the user data dir.").tag(
        config=True
    )
    project = Unicode("", help="Google Cloud project (default: from the metadata server or ADC).").tag(config=True)
    zone = Unicode("", help="Compute Engine zone, or 'auto' to try the zones of the region.").tag(config=True)
    service_account = Unicode("", help="Service account e-mail for VMs (default: the project's default).").tag(
        config=True
    )
    scopes = Unicode(
        "https://www.googleapis.com/auth/cloud-platform",
        help="OAuth scopes of the VMs' service account, comma-separated. Without a compute scope "
        "a finished VM powers itself off and the client deletes it.",
    ).tag(config=True)
    image = Unicode("", help="VM image (projects/P/global/images/NAME).").tag(config=True)
    image_family = Unicode("", help="VM image family, used when image is not set.").tag(config=True)
    image_project = Unicode("", help="Project of image_family (default: project).").tag(config=True)
    gpu_image_family = Unicode(
        "common-cu129-ubuntu-2404-nvidia-580",
        help="VM image family of --gpu jobs without --image/--image-family: one with an NVIDIA driver "
        "(default: a Deep Learning VM family, CUDA 12.9 and driver 580 on Ubuntu 24.04).",
    ).tag(config=True)
    gpu_image_project = Unicode("deeplearning-platform-release", help="Project of gpu_image_family.").tag(config=True)
    network = Unicode("", help="VPC network for VMs (default: default).").tag(config=True)
    subnetwork = Unicode("", help="Subnetwork for VMs.").tag(config=True)
    external_ip = Bool(
        True,
        help="gce: give VMs an external IP address. Off (where an organisation policy forbids them, or to save "
        "IN_USE_ADDRESSES quota) they reach Google's APIs through Private Google Access on their subnetwork and "
        "packages through Cloud NAT or an index mirror.",
    ).tag(config=True)
    package_index = Unicode(
        "",
        help="gce: the package index (a PyPI mirror's simple URL) the VMs install from, uv's default index and "
        "pip's index URL on the VM (default: PyPI). VMs without an external IP need it unless their network has "
        "Cloud NAT.",
    ).tag(config=True)
    disk_gb = Int(50, help="Boot disk size of VMs in GB.").tag(config=True)
    compute_endpoint = Unicode("", help="Compute Engine API endpoint (an emulator in tests).").tag(config=True)
    secretmanager_endpoint = Unicode("", help="Secret Manager API endpoint (an emulator in tests).").tag(config=True)
    timeout = Unicode("24h", help="Default hard time limit of a job (90s, 30m, 2h).").tag(config=True)
    max_restarts = Int(10, help="How often a preempted job is relaunched before it fails.").tag(config=True)
    fallback_on_demand = Bool(False, help="Relaunch on a standard VM when spot capacity is out.").tag(config=True)
    budget = Unicode("", help="Default dollar cap of a job's machines, relaunches included (2.50; empty: none).").tag(
        config=True
    )
    files_limit_gb = Float(
        1.0,
        help="Files a cell wrote in its working folder come back to the notebook's folder up to this many GB "
        "in all; above it they stay in the Store (`nbburst download JOB`).",
    ).tag(config=True)
    background_supervisor = Bool(
        True,
        help="Local backend: a submission starts a background supervisor (one per Store) that relaunches "
        "preempted jobs while no notebook waits for them, and exits once they have all ended.",
    ).tag(config=True)
    watcher = Bool(
        True,
        help="gce: a submission makes sure a watcher runs for its Store: a small standard VM that relaunches "
        "preempted jobs while no notebook runs (the laptop may be closed), and deletes itself once none is left.",
    ).tag(config=True)
    watcher_machine_type = Unicode("e2-small", help="gce: machine type of the watcher VM.").tag(config=True)
    watcher_idle = Unicode(
        "10m", help="gce: the watcher VM deletes itself once it has seen no unfinished job for this long."
    ).tag(config=True)
    watcher_interval = Float(10.0, help="gce: seconds between the watcher's rounds over the Store's jobs.").tag(
        config=True
    )
    owner = Unicode("", help="Owner label on machines (default: the user name).").tag(config=True)
    poll_interval = Float(0.25, help="Seconds between status polls while a cell waits.").tag(config=True)
    view_after = Float(
        0.5,
        help="Seconds a cell on a warm session runs before its live view is shown; one that ends sooner shows "
        "only its own output, as a plain cell does.",
    ).tag(config=True)
    prices = Dict(help="Price overrides merged over nbburst.protocol.pricing.DEFAULT_TABLE (same shape).").tag(
        config=True
    )
    price_file = Unicode("", help="JSON file of price overrides (same shape as prices).").tag(config=True)
    live_prices = Bool(
        True,
        help="gce: read today's list prices from the Cloud Billing Catalog API (kept a day in state_dir); "
        "off, or when the API cannot be read, the dated table.",
    ).tag(config=True)
    billing_endpoint = Unicode(
        "",
        help="Cloud Billing Catalog API endpoint for live prices (default: compute_endpoint when set, "
        "since the emulator serves both; else Google's).",
    ).tag(config=True)

    def __init__(self, **kwargs: Any):
        self._sources: dict[str, str] = {}
        super().__init__(**kwargs)


TRAITS = [name for name in NBBurst.class_trait_names(config=True)]


def _load_config_files() -> Config:
    """``nbburst_config.py`` / ``.json`` from the Jupyter config path, like other Jupyter apps."""
    try:
        from jupyter_core.paths import jupyter_config_path
        from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader
    except ImportError:
        return Config()
    merged = Config()
    for folder in reversed(jupyter_config_path()):
        loaders = ((PyFileConfigLoader, "nbburst_config.py"), (JSONFileConfigLoader, "nbburst_config.json"))
        for loader_cls, fname in loaders:
            if os.path.exists(os.path.join(folder, fname)):
                merged.merge(loader_cls(fname, path=folder).load_config())
    return merged


def _coerce(name: str, raw: str) -> Any:
    trait = NBBurst.class_traits()[name]
    try:
        if isinstance(trait, Bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(trait, Int):
            return int(raw)
        if isinstance(trait, Float):
            return float(raw)
        if isinstance(trait, Dict):
            return json.loads(raw)
    except ValueError:
        raise UsageError(f"{name}: {raw!r} is not a valid {type(trait).__name__.lower()}") from None
    return raw


def load(shell_config: Config | None = None, session: dict[str, Any] | None = None) -> NBBurst:
    """The effective settings, each value tagged with its source (see :func:`describe`)."""
    cfg = _load_config_files()
    if shell_config is not None and "NBBurst" in shell_config:
        cfg.merge(Config({"NBBurst": shell_config["NBBurst"]}))
    settings = NBBurst(config=cfg)
    for name in TRAITS:
        if name in cfg.get("NBBurst", {}):
            settings._sources[name] = "config file"
    for name in TRAITS:
        raw = os.environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            setattr(settings, name, _coerce(name, raw))
            settings._sources[name] = f"${ENV_PREFIX}{name.upper()}"
    for name, value in (session or {}).items():
        set_value(settings, name, value, "%burst config")
    _check(settings)
    return settings


def set_value(settings: NBBurst, name: str, value: Any, source: str) -> None:
    if name not in TRAITS:
        raise UsageError(f"unknown setting {name!r}; known settings: {', '.join(sorted(TRAITS))}")
    if isinstance(value, str):
        value = _coerce(name, value)
    try:
        setattr(settings, name, value)
    except Exception as exc:  # traitlets' TraitError has the detail
        raise UsageError(f"{name}: {exc}") from None
    settings._sources[name] = source
    _check(settings)


def _check(settings: NBBurst) -> None:
    parse_duration(settings.timeout, "timeout")
    parse_duration(settings.watcher_idle, "watcher_idle")
    parse_budget(settings.budget)


def describe(settings: NBBurst) -> dict[str, dict[str, Any]]:
    """``{name: {"value": ..., "source": ...}}`` with defaults filled in."""
    out = {}
    for name in sorted(TRAITS):
        out[name] = {"value": getattr(settings, name), "source": settings._sources.get(name, "default")}
    out["root"]["value"] = store_url(settings)
    out["state_dir"]["value"] = str(state_dir(settings))
    out["owner"]["value"] = owner(settings)
    return out


def state_dir(settings: NBBurst) -> Path:
    return Path(settings.state_dir or _data_dir()).expanduser()


def owner(settings: NBBurst) -> str:
    try:
        return settings.owner or getpass.getuser()
    except Exception:
        return "unknown"


def store_url(settings: NBBurst, backend: str | None = None) -> str:
    """The Store root for ``backend``: a GCS bucket is needed once a machine is remote."""
    if settings.root:
        return settings.root
    if backends.is_remote(backend or settings.backend):
        if not settings.bucket:
            raise UsageError(
                "the gce backend needs a bucket: set c.NBBurst.bucket, $NBBURST_BUCKET, "
                "or `%burst config bucket=NAME` (or a full root=gs://BUCKET/PREFIX)"
            )
        return f"gs://{settings.bucket}/nbburst"
    return str(Path(_data_dir()) / "store")


def to_json(settings: NBBurst) -> str:
    return json.dumps(describe(settings), indent=1, default=str)
