"""Compute Engine prices and cost arithmetic.

A dated table of list prices in USD for the machine families and GPUs nbburst
launches: per vCPU-hour and per GB-hour of memory, spot and on-demand; GPUs
per hour; the pd-balanced boot disk per GB-month. Prices of other regions are
the us-central1 price times a regional factor unless a region has its own
entries. Spot prices move (Google may change them once a day); treat the
numbers as estimates and override them where it matters:

- ``c.NBBurst.prices = {...}`` (or ``%burst config prices={"...": ...}``), or
- ``c.NBBurst.price_file = "/path/prices.json"``,

both deep-merged over :data:`DEFAULT_TABLE` (same shape). For example, a
negotiated discount on N2 in europe-west4::

    {"regions": {"europe-west4": {"families": {"n2": {"vcpu": 0.03, "gb": 0.004,
                                                      "spot_vcpu": 0.008, "spot_gb": 0.001}}}}}

Today's prices: the Compute Engine adapter reads a region's list prices from
Google's Cloud Billing Catalog (``nbburst.machines.gce.prices``) and passes them
to :func:`table` as ``live``: they stand in for the dated table in that region,
and the overrides above still win over them. A family may carry custom machine
type prices (``custom_vcpu``, ``custom_gb``, ``spot_custom_...``); without them a
custom type costs :data:`CUSTOM_PREMIUM` times the predefined price.

Nothing here talks to the network: the table is data, the functions are
arithmetic, so the Compute Engine adapter can rank machine types offline.
"""

from __future__ import annotations

import copy
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import backends

#: The month the built-in table was compiled from Google Cloud's public price list.
PRICES_AS_OF = "2026-11"
#: Hours in a billing month, for per-GB-month disk prices.
HOURS_PER_MONTH = 730.0
DEFAULT_REGION = "us-central1"
#: Where the built-in table's prices come from (a table's ``source``).
DATED_TABLE = "dated table"
#: Custom machine types cost about 5 % more per vCPU and GB than predefined ones (when no custom price is known).
CUSTOM_PREMIUM = 1.05
#: The parts of a table that hold prices by name.
KINDS = ("families", "gpus", "disks")

# us-central1, USD. vcpu/gb: on-demand per vCPU-hour and per GB-hour of memory;
# spot_vcpu/spot_gb: the spot (preemptible) prices of the same.
DEFAULT_TABLE: dict[str, Any] = {
    "as_of": PRICES_AS_OF,
    "source": DATED_TABLE,
    "currency": "USD",
    "families": {
        "e2": {"vcpu": 0.021811, "gb": 0.002923, "spot_vcpu": 0.006543, "spot_gb": 0.000877},
        "n2": {"vcpu": 0.031611, "gb": 0.004237, "spot_vcpu": 0.007650, "spot_gb": 0.001025},
        "n2d": {"vcpu": 0.027502, "gb": 0.003686, "spot_vcpu": 0.004560, "spot_gb": 0.000611},
        "c2d": {"vcpu": 0.029563, "gb": 0.003959, "spot_vcpu": 0.006970, "spot_gb": 0.000934},
        "c3": {"vcpu": 0.034650, "gb": 0.003938, "spot_vcpu": 0.006930, "spot_gb": 0.000788},
        "n1": {"vcpu": 0.031611, "gb": 0.004237, "spot_vcpu": 0.006655, "spot_gb": 0.000892},
        "g2": {"vcpu": 0.024988, "gb": 0.002927, "spot_vcpu": 0.009995, "spot_gb": 0.001171},
        "a2": {"vcpu": 0.031611, "gb": 0.004237, "spot_vcpu": 0.006655, "spot_gb": 0.000892},
    },
    "gpus": {
        "nvidia-tesla-t4": {"hour": 0.35, "spot_hour": 0.14},
        "nvidia-l4": {"hour": 0.5603, "spot_hour": 0.2240},
        "nvidia-tesla-a100": {"hour": 2.933908, "spot_hour": 1.1},
    },
    "disks": {
        "pd-balanced": {"gb_month": 0.10},
    },
    # Region -> {"factor": multiplier of the us-central1 prices, optional "families"/"gpus"/"disks"
    # with the region's own entries}.
    "regions": {
        "us-central1": {"factor": 1.0},
        "us-east1": {"factor": 1.0},
        "europe-west4": {"factor": 1.10, "disks": {"pd-balanced": {"gb_month": 0.11}}},
        "asia-southeast1": {"factor": 1.231, "disks": {"pd-balanced": {"gb_month": 0.11}}},
    },
}

# GPUs that come with the machine type (accelerator-optimized families): type pattern -> (gpu, count).
_BUILTIN_GPUS: list[tuple[re.Pattern[str], str, Any]] = [
    (re.compile(r"^a2-(?:highgpu|megagpu|ultragpu)-(\d+)g$"), "nvidia-tesla-a100", None),
    (re.compile(r"^g2-standard-(\d+)$"), "nvidia-l4", {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}),
]


@dataclass
class Breakdown:
    """Hourly price of one machine, by component; ``on_demand`` is the same machine at on-demand prices."""

    vcpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    disk: float = 0.0
    spot: bool = False
    region: str = DEFAULT_REGION
    family: str = ""
    on_demand: float = 0.0  # total $/h of the same machine, on-demand
    as_of: str = PRICES_AS_OF
    source: str = DATED_TABLE  # where the prices come from: the dated table, or the Cloud Billing Catalog
    local: bool = False
    notes: list[str] = field(default_factory=list)  # what was estimated (unknown family, region, GPU)

    @property
    def total(self) -> float:
        return self.vcpu + self.memory + self.gpu + self.disk

    @property
    def saving(self) -> float:
        """Fraction saved versus on-demand (0.7 = 70 % cheaper)."""
        return 0.0 if self.on_demand <= 0 else max(0.0, 1.0 - self.total / self.on_demand)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total"] = round(self.total, 6)
        data["saving"] = round(self.saving, 4)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Breakdown:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


# -- the table -----------------------------------------------------------------------------


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _scaled(rates: dict[str, Any], factor: float) -> dict[str, float]:
    return {k: float(v) * factor for k, v in rates.items() if isinstance(v, (int, float))}


def table(
    overrides: dict[str, Any] | None = None, price_file: str | None = None, live: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The built-in table with ``live`` prices, then ``price_file``, then ``overrides`` merged over it.

    ``live`` is a table of the same shape whose prices sit in ``regions`` (what the Cloud Billing Catalog
    said for a region), with its own ``as_of``, ``source`` and, when it could not be read, a ``note``.
    An override of the base (us-central1) prices applies to a live region as it applies to the dated
    table there (times the region's factor), so what the user set still wins over what was read.
    """
    merged = copy.deepcopy(DEFAULT_TABLE)
    user: dict[str, Any] = {}
    if price_file:
        try:
            _merge(user, json.loads(Path(price_file).expanduser().read_text()))
        except (OSError, ValueError) as exc:
            from ..errors import UsageError

            raise UsageError(f"price_file: cannot read {price_file!r} as JSON prices: {exc}") from None
    if overrides:
        _merge(user, overrides)
    if live:
        live = copy.deepcopy(live)
        for region, own in live.get("regions", {}).items():
            factor = float(merged["regions"].get(region, {}).get("factor", 1.0))
            for kind in KINDS:
                for name, rates in user.get(kind, {}).items():
                    own.setdefault(kind, {}).setdefault(name, {}).update(_scaled(rates, factor))
        _merge(merged, live)
    return _merge(merged, user)


def table_for(settings: Any, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """The effective table for an :class:`nbburst.config.NBBurst` (its ``prices``/``price_file``), over ``live``."""
    return table(getattr(settings, "prices", None) or None, getattr(settings, "price_file", None) or None, live)


def price_source(prices: dict[str, Any]) -> str:
    """Where a table's prices come from, in words for a plan: its note when live prices were unavailable."""
    return prices.get("note") or f"prices from the {prices.get('source', DATED_TABLE)} ({prices.get('as_of')})"


def unavailable(reason: str) -> dict[str, Any]:
    """What to pass as ``live`` when live prices could not be read: the dated table, saying so and why."""
    return {"note": f"prices from the {DATED_TABLE} ({PRICES_AS_OF}), live prices unavailable: {reason}"}


def region_of(zone_or_region: str | None) -> str:
    """``us-central1-a`` -> ``us-central1``; a region stays itself; None -> the default region."""
    if not zone_or_region:
        return DEFAULT_REGION
    parts = zone_or_region.rsplit("/", 1)[-1].split("-")
    return "-".join(parts[:2]) if len(parts) >= 3 else "-".join(parts)


def family_of(machine_type: str | None) -> str:
    """``n2-standard-64`` -> ``n2``; ``custom-8-16384`` (N1 custom) -> ``n1``."""
    if not machine_type:
        return ""
    head = machine_type.split("-", 1)[0].lower()
    return "n1" if head == "custom" else head


def is_custom(machine_type: str | None) -> bool:
    """``n2-custom-8-16384``, ``custom-8-16384`` (N1): a custom machine type."""
    return bool(re.match(r"^(?:[a-z0-9]+-)?custom-", machine_type or ""))


def builtin_gpus(machine_type: str | None) -> tuple[str | None, int]:
    """GPUs included in an accelerator-optimized machine type (``a2-highgpu-2g`` -> A100 x2)."""
    for pattern, gpu, counts in _BUILTIN_GPUS:
        m = pattern.match(machine_type or "")
        if m:
            n = int(m.group(1))
            return gpu, (counts.get(n, 1) if counts else n)
    return None, 0


def families(prices: dict[str, Any] | None = None) -> list[str]:
    return sorted((prices or DEFAULT_TABLE)["families"])


def _entry(prices: dict[str, Any], kind: str, name: str, region: str, notes: list[str]) -> dict[str, float] | None:
    regions = prices.get("regions", {})
    reg = regions.get(region)
    if reg is None:
        notes.append(f"no prices for region {region}; used {DEFAULT_REGION}")
        reg = regions.get(DEFAULT_REGION, {"factor": 1.0})
    own = reg.get(kind, {}).get(name)
    base = prices.get(kind, {}).get(name)
    if own is None and base is None:
        return None
    if own is None and "factor" not in reg:  # a region known only from live prices, which lack this one
        notes.append(f"no price for {name} in {region}; used the {DEFAULT_REGION} price of the {DATED_TABLE}")
    # the region's own prices win, key by key, over the base prices times the region's factor
    return {**_scaled(base or {}, float(reg.get("factor", 1.0))), **_scaled(own or {}, 1.0)}


def hourly(
    family: str,
    cores: float,
    memory_gb: float,
    gpu: str | None = None,
    gpu_count: int = 0,
    spot: bool = True,
    region: str | None = None,
    disk_gb: float = 0.0,
    prices: dict[str, Any] | None = None,
    disk_type: str = "pd-balanced",
    custom: bool = False,
) -> Breakdown:
    """The hourly price of a machine of ``family`` (``n2``, or a full type like ``n2-standard-8``);
    ``custom`` for a custom machine type of that family.

    Unknown families are priced like N2 and unknown GPUs cost 0, each with a note,
    so a cost estimate never stops a job.
    """
    prices = prices or DEFAULT_TABLE
    region = region_of(region)
    notes: list[str] = []
    fam = family_of(family) if "-" in (family or "") else (family or "").lower()
    rates = _entry(prices, "families", fam, region, notes)
    if rates is None:
        notes.append(f"no prices for machine family {fam or '?'}; priced like n2")
        rates = _entry(prices, "families", "n2", region, notes) or {}
    gpu_rates = {}
    if gpu and gpu_count:
        gpu_rates = _entry(prices, "gpus", gpu, region, notes) or {}
        if not gpu_rates:
            notes.append(f"no price for GPU {gpu}; counted as $0")
    disk_rates = _entry(prices, "disks", disk_type, region, notes) if disk_gb else {}
    disk = (disk_rates or {}).get("gb_month", 0.0) * disk_gb / HOURS_PER_MONTH

    def rate(pre: str, part: str) -> float:
        plain = rates.get(pre + part, rates.get(part, 0.0))
        if not custom:
            return plain
        if pre + "custom_" + part in rates:
            return rates[pre + "custom_" + part]
        notes.append(f"custom machine types priced {round((CUSTOM_PREMIUM - 1) * 100)} % above predefined")
        return plain * CUSTOM_PREMIUM

    def parts(use_spot: bool) -> tuple[float, float, float]:
        pre = "spot_" if use_spot else ""
        return (
            cores * rate(pre, "vcpu"),
            memory_gb * rate(pre, "gb"),
            gpu_count * gpu_rates.get(pre + "hour", gpu_rates.get("hour", 0.0)),
        )

    vcpu, mem, gpu_cost = parts(spot)
    od = sum(parts(False)) + disk
    return Breakdown(
        vcpu=vcpu,
        memory=mem,
        gpu=gpu_cost,
        disk=disk,
        spot=spot,
        region=region,
        family=fam,
        on_demand=od,
        as_of=str(prices.get("as_of", PRICES_AS_OF)),
        source=str(prices.get("source", DATED_TABLE)),
        notes=list(dict.fromkeys([prices["note"], *notes] if prices.get("note") else notes)),
    )


def local() -> Breakdown:
    """The local backend: free."""
    return Breakdown(region="local", family="local", local=True, source="")


def for_plan(
    plan: dict[str, Any] | None, backend: str = "gce", disk_gb: float = 0.0, prices: dict[str, Any] | None = None
) -> Breakdown:
    """The hourly breakdown of a job's :class:`~nbburst.machines.base.Plan` (as a dict)."""
    plan = plan or {}
    if not backends.is_remote(backend) or plan.get("machine_type") == "local":
        return local()
    machine_type = plan.get("machine_type") or ""
    gpu, count = plan.get("gpu"), int(plan.get("gpu_count") or 0)
    if not gpu:
        gpu, count = builtin_gpus(machine_type)
    disk_gb = float((plan.get("extra") or {}).get("disk_gb", disk_gb) or 0.0)
    return hourly(
        family_of(machine_type),
        float(plan.get("cores") or 0),
        float(plan.get("memory_gb") or 0.0),
        gpu,
        count,
        bool(plan.get("spot", True)),
        plan.get("zone"),
        disk_gb,
        prices,
        custom=is_custom(machine_type),
    )


def cost(breakdown: Breakdown, seconds: float) -> dict[str, Any]:
    """What ``seconds`` on the machine cost, by component, and the saving versus on-demand."""
    hours = max(0.0, seconds) / 3600.0
    out = {
        "vcpu": breakdown.vcpu * hours,
        "memory": breakdown.memory * hours,
        "gpu": breakdown.gpu * hours,
        "disk": breakdown.disk * hours,
    }
    total = sum(out.values())
    on_demand = breakdown.on_demand * hours
    out = {k: round(v, 9) for k, v in out.items()}  # a short job on a small machine costs millionths
    out.update(
        {
            "total": round(total, 9),
            "on_demand": round(on_demand, 9),
            "saving": round(max(0.0, on_demand - total), 9),
            "per_hour": round(breakdown.total, 6),
            "seconds": round(max(0.0, seconds), 3),
            "spot": breakdown.spot,
            "region": breakdown.region,
            "local": breakdown.local,
            "as_of": breakdown.as_of,
            "source": breakdown.source,
            "notes": list(breakdown.notes),
        }
    )
    return out


def usd(amount: float | None) -> str:
    """``$0.0042``, ``$0.7588``, ``$12.50``: cents from a dollar up, four decimals below."""
    if amount is None:
        return "-"
    if amount == 0:
        return "$0.00"
    return f"${amount:.4f}" if abs(amount) < 1 else f"${amount:,.2f}"


# -- jobs ----------------------------------------------------------------------------------


def price_plan(plan: Any, backend: str, settings: Any = None, prices: dict[str, Any] | None = None) -> Any:
    """Fill a :class:`~nbburst.machines.base.Plan`'s prices (if the adapter left them empty) and
    record the hourly breakdown in ``plan.extra["pricing"]``, so the job's cost can be computed
    later (by the agent, the CLI, the server) without the price table. ``prices``: the table the
    adapter planned with (live prices), else the settings' table."""
    if prices is None and settings is not None:
        prices = table_for(settings)
    disk_gb = float(getattr(settings, "disk_gb", 0) or 0) if backends.is_remote(backend) else 0.0
    breakdown = for_plan(plan.to_dict(), backend, disk_gb=disk_gb, prices=prices)
    if plan.price_per_hour is None:
        plan.price_per_hour = round(breakdown.total, 6)
    if plan.on_demand_price_per_hour is None:
        plan.on_demand_price_per_hour = round(breakdown.on_demand, 6)
    plan.extra.setdefault("pricing", breakdown.to_dict())
    return plan


def breakdown_of(plan: dict[str, Any] | None, backend: str = "gce") -> Breakdown:
    """The hourly breakdown recorded at submission, or one computed from the plan now."""
    plan = plan or {}
    if not backends.is_remote(backend) or plan.get("machine_type") == "local":
        return local()
    recorded = (plan.get("extra") or {}).get("pricing")
    if recorded:
        return Breakdown.from_dict(recorded)
    breakdown = for_plan(plan, backend)
    if plan.get("price_per_hour") is not None and breakdown.total > 0:  # the adapter's own figure wins
        scale = float(plan["price_per_hour"]) / breakdown.total
        breakdown.vcpu, breakdown.memory = breakdown.vcpu * scale, breakdown.memory * scale
        breakdown.gpu, breakdown.disk = breakdown.gpu * scale, breakdown.disk * scale
    if plan.get("on_demand_price_per_hour") is not None:
        breakdown.on_demand = float(plan["on_demand_price_per_hour"])
    return breakdown


def machine_seconds(created: float, statuses: list[Any], ended: float | None = None, now: float | None = None) -> float:
    """Seconds of machine time over all attempts: each from its machine's launch (``Status.launched``;
    without it attempt 1 from submission, later ones from their start) to its last heartbeat, the
    last one to the job's end (or now while it runs)."""
    now = time.time() if now is None else now
    ordered = sorted(statuses, key=lambda s: s.attempt)
    total = 0.0
    for i, status in enumerate(ordered):
        start = getattr(status, "launched", 0.0) or (created if status.attempt <= 1 else status.started)
        last = i == len(ordered) - 1
        state = getattr(status.state, "value", status.state)
        if last and ended is not None:
            end = ended
        elif last and state in ("PROVISIONING", "RUNNING"):
            end = now
        else:
            end = status.heartbeat
        total += max(0.0, end - start)
    return total


def machine_count(spec: Any) -> int:
    """The machines a job runs at once: its own and its ``--workers`` (same type, launched and ended with it)."""
    resources = getattr(spec, "resources", None)
    return 1 + int(getattr(resources, "workers", 0) or 0)


def job_cost(spec: Any, statuses: list[Any], ended: float | None = None, now: float | None = None) -> dict[str, Any]:
    """:func:`cost` of a job (a :class:`~nbburst.protocol.job.JobSpec`) so far, or in total once ``ended``: the
    machine time of its attempts, times its machines (a worker machine lives as long as the job's)."""
    breakdown = breakdown_of(spec.plan, spec.backend)
    count = machine_count(spec)
    return cost(breakdown, machine_seconds(spec.created, statuses, ended, now) * count) | {"machines": count}
