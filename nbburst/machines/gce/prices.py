"""Prices that are true today: a region's Compute Engine list prices from the Cloud Billing Catalog API.

The dated table of :mod:`nbburst.protocol.pricing` is a snapshot, and spot prices move (Google may change
them once a day). So before the adapter ranks machine types it reads, for the job's region, the on-demand
and spot prices of vCPUs and memory (predefined and custom machine types), GPUs and persistent disks from
the public Catalog (``CloudCatalogClient.list_skus(parent="services/6F81-5844-456A")``, every page, in
USD), keeps them a day in nbburst's state folder, and hands them to :func:`pricing.table_for` as live
prices. When the Catalog cannot be read (the Cloud Billing API not enabled in the project, no credentials,
unreachable, google-cloud-billing missing) the dated table is used, with a note that says so and why:
prices never stop a plan. ``c.NBBurst.live_prices = False`` turns the reading off.

Reading a SKU (the Catalog's documented shape): ``category.resourceFamily`` (``Compute``, ``Storage``),
``category.usageType`` (``OnDemand``; ``Preemptible`` = spot), ``serviceRegions`` (the regions it is
sold in) and the latest ``pricingInfo[].pricingExpression``: ``tieredRates[].unitPrice`` (``units`` +
``nanos`` / 1e9) per ``usageUnit`` (``h``, ``GiBy.h``, ``GiBy.mo``). The description says what is
priced: ``[Spot Preemptible ]<SERIES>[ AMD|Arm][ Custom][ Predefined] Instance Core|Ram running in
<location>`` (``Custom Instance Core`` = N1 custom, ``Compute optimized Core`` = C2), ``Nvidia <GPU> GPU
[attached to Spot Preemptible VMs ]running in ...``, ``Balanced PD|SSD backed PD|Storage PD Capacity in
...``. Commitments, sole tenancy, extended memory, regional disks and the rest do not match and are
passed over.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ... import config
from ...errors import UsageError
from ...protocol import pricing

log = logging.getLogger("nbburst.gce")

#: The Catalog's name of Compute Engine.
COMPUTE_SERVICE = "services/6F81-5844-456A"
#: A table's ``source`` when its prices were read from the Catalog.
SOURCE = "Cloud Billing Catalog"
GOOGLE_ENDPOINT = "cloudbilling.googleapis.com"

_MACHINE = re.compile(
    r"^(?:Spot )?(?:Preemptible )?"
    r"(?:(?P<series>[A-Z][A-Z0-9]*)(?: AMD| Arm| Intel)? |(?P<c2>Compute optimized) )?"
    r"(?P<custom>Custom )?(?:Predefined )?(?:Instance )?(?P<part>Core|Ram|RAM) running in "
)
_GPU = re.compile(r"^Nvidia (?P<model>.+?) GPU (?:attached to (?:Spot )?Preemptible VMs )?running in ")
_DISK = re.compile(r"^(?P<kind>Balanced PD|SSD backed PD|Storage PD) Capacity in ")
_DISKS = {"Balanced PD": "pd-balanced", "SSD backed PD": "pd-ssd", "Storage PD": "pd-standard"}
#: GPU models whose accelerator type is not ``nvidia-`` + the model in lower case with dashes.
_GPU_TYPES = {"Tesla A100 80GB": "nvidia-a100-80gb", "H100 80GB Mega": "nvidia-h100-mega-80gb"}
_HOURS = {"h": 1.0, "d": 24.0, "mo": pricing.HOURS_PER_MONTH}
_GIB = {"MiBy": 1 / 1024, "GiBy": 1.0, "TiBy": 1024.0}
_USAGES = ("OnDemand", "Preemptible")


def _expression(sku: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pricing expression of the SKU's latest pricing (``pricingInfo`` is in chronological order)."""
    infos = sku.get("pricingInfo") or []
    return (infos[-1].get("pricingExpression") or {}) if infos else {}


def unit_price(sku: Mapping[str, Any]) -> float | None:
    """USD per ``usageUnit`` of the SKU's latest pricing: its first tier that is not free (0 if all are)."""
    prices = [_usd(tier.get("unitPrice") or {}) for tier in _expression(sku).get("tieredRates") or []]
    return next((p for p in prices if p > 0), 0.0 if prices else None)


def _usd(money: Mapping[str, Any]) -> float:
    return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9


def per_hour(price: float, unit: str, sized: bool) -> float | None:
    """A price per ``unit`` (``h``, ``GiBy.h``, ``GiBy.mo``...) as USD per hour (per GiB-hour when ``sized``);
    None for a unit of another kind."""
    size, _, span = unit.rpartition(".")
    if span not in _HOURS or bool(size) != sized or (size and size not in _GIB):
        return None
    return price / (_GIB.get(size, 1.0) * _HOURS[span])


def _what(sku: Mapping[str, Any]) -> tuple[str, str, str, bool] | None:
    """(kind, name, key, sized) of a SKU nbburst prices, e.g. ("families", "n2", "spot_custom_vcpu", False)."""
    category = sku.get("category") or {}
    description = sku.get("description") or ""
    spot = "spot_" if category.get("usageType") == "Preemptible" else ""
    if category.get("resourceFamily") == "Compute":
        m = _MACHINE.match(description)
        if m and (m["series"] or m["c2"] or m["custom"]):
            family = m["series"].lower() if m["series"] else "c2" if m["c2"] else "n1"
            part = "vcpu" if m["part"] == "Core" else "gb"
            return "families", family, spot + ("custom_" if m["custom"] else "") + part, part == "gb"
        m = _GPU.match(description)
        if m:
            model = m["model"]
            return "gpus", _GPU_TYPES.get(model) or "nvidia-" + model.lower().replace(" ", "-"), spot + "hour", False
    if category.get("resourceFamily") == "Storage" and not spot:
        m = _DISK.match(description)
        if m:
            return "disks", _DISKS[m["kind"]], "gb_month", True
    return None


def region_prices(skus: Iterable[Mapping[str, Any]], region: str) -> dict[str, Any]:
    """The prices of ``region`` among Catalog SKUs (REST JSON shape), in the table's shape:
    ``{"families": {"n2": {"vcpu", "gb", "spot_vcpu", ..., "custom_vcpu"...}}, "gpus": {...}, "disks": {...}}``.

    Where several SKUs price the same thing, a ``Spot`` one wins over a legacy ``Preemptible`` one."""
    found: dict[tuple[str, str, str], tuple[bool, float]] = {}
    for sku in skus:
        if (
            region not in (sku.get("serviceRegions") or [])
            or (sku.get("category") or {}).get("usageType") not in _USAGES
        ):
            continue
        what, price = _what(sku), unit_price(sku)
        if what is None or price is None:
            continue
        kind, name, key, sized = what
        hourly = per_hour(price, _expression(sku).get("usageUnit") or "", sized)
        if hourly is None:
            continue
        value = hourly * pricing.HOURS_PER_MONTH if key == "gb_month" else hourly
        preferred = "Spot " in (sku.get("description") or "")
        if (kind, name, key) not in found or (preferred and not found[(kind, name, key)][0]):
            found[(kind, name, key)] = (preferred, round(value, 9))
    out: dict[str, Any] = {}
    for (kind, name, key), (_, value) in sorted(found.items()):
        out.setdefault(kind, {}).setdefault(name, {})[key] = value
    return out


def catalog_skus(client: Any, region: str, timeout: float) -> list[dict[str, Any]]:
    """Every Compute Engine SKU sold in ``region`` that may be a price of ours, through all pages, as REST JSON."""
    from google.cloud import billing_v1

    pages = client.list_skus(request={"parent": COMPUTE_SERVICE, "currency_code": "USD"}, timeout=timeout)
    return [
        billing_v1.Sku.to_dict(sku, preserving_proto_field_name=False)
        for sku in pages
        if region in sku.service_regions and sku.category.usage_type in _USAGES
    ]


def _reason(exc: BaseException, endpoint: str) -> str:
    """Why the Catalog could not be read, in a line a user can act on."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(exc, ImportError):
        return "google-cloud-billing is not installed (pip install google-cloud-billing)"
    if isinstance(exc, (auth_exc.DefaultCredentialsError, auth_exc.RefreshError, UsageError)):
        return "no Google Cloud credentials for the Cloud Billing API"
    if isinstance(exc, gexc.GoogleAPICallError):
        message = re.sub(r"^[A-Z]+ \S+: ", "", " ".join(str(exc.message or "").split()))[:300]  # not "GET url: "
        if exc.code == 403 and ("SERVICE_DISABLED" in str(exc.reason) or "disabled" in message):
            return f"the Cloud Billing API is not enabled ({message})"
        return f"the Cloud Billing Catalog API answered {exc.code}: {message}"
    detail = str(exc)
    cause = re.search(r"\[Errno -?\d+\] [^\"')]+", detail)  # "[Errno 111] Connection refused" deep in a requests error
    detail = cause[0] if cause else f"{type(exc).__name__}: {detail[:200]}"
    return f"cannot reach the Cloud Billing Catalog API at {endpoint or GOOGLE_ENDPOINT} ({detail})"


class LivePrices:
    """Today's prices for the adapter: read once a day per region and endpoint, the dated table otherwise.

    ``credentials`` gives the credentials to read with (called only when a read is due); with an endpoint
    (an emulator) they are the adapter's anonymous ones.
    """

    #: How long prices read from the Catalog are reused (the Catalog's prices change at most daily).
    ttl_s = 86400.0
    #: How long a failed read is remembered before the Catalog is asked again (in this process).
    retry_after_s = 600.0
    #: Seconds for each page request.
    timeout_s = 60.0

    def __init__(self, settings: config.NBBurst, credentials: Callable[[], Any]):
        self.settings = settings
        self.credentials = credentials
        self.endpoint = (settings.billing_endpoint or settings.compute_endpoint or "").rstrip("/")
        self._failed: dict[str, tuple[float, str]] = {}

    def table(self, region: str) -> dict[str, Any]:
        """The price table to plan with in ``region``: live prices under the user's overrides, or the dated
        table with a note saying why live prices are unavailable (none when they are turned off)."""
        return pricing.table_for(self.settings, self.live(region) if self.settings.live_prices else None)

    def live(self, region: str) -> dict[str, Any]:
        """The live part of :meth:`table`: from the cache, else from the Catalog, else why not."""
        cached = self._cached(region)
        if cached is not None:
            return cached
        failed = self._failed.get(region)
        if failed and time.time() - failed[0] < self.retry_after_s:
            return pricing.unavailable(failed[1])
        try:
            prices = region_prices(catalog_skus(self._client(), region, self.timeout_s), region)
        except Exception as exc:  # a price list never stops a plan: the dated table stands in, saying why
            reason = _reason(exc, self.endpoint)
            log.info("live prices for %s unavailable: %s", region, reason)
            self._failed[region] = (time.time(), reason)
            return pricing.unavailable(reason)
        if not prices.get("families"):
            reason = f"the Catalog lists no Compute Engine machine prices in {region}"
            self._failed[region] = (time.time(), reason)
            return pricing.unavailable(reason)
        self._failed.pop(region, None)
        return self._store(region, prices)

    def _client(self) -> Any:
        from google.cloud import billing_v1

        options = {"api_endpoint": self.endpoint} if self.endpoint else None
        return billing_v1.CloudCatalogClient(credentials=self.credentials(), transport="rest", client_options=options)

    # -- the cache: one file per region and endpoint in the state folder ----------------------------------
    def _path(self, region: str) -> Path:
        where = hashlib.sha256((self.endpoint or GOOGLE_ENDPOINT).encode()).hexdigest()[:12]
        return config.state_dir(self.settings) / "prices" / f"{region}-{where}.json"

    def _cached(self, region: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._path(region).read_text())
            fresh = 0 <= time.time() - float(data["read_at"]) < self.ttl_s
            return self._live(region, data) if fresh else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _store(self, region: str, prices: dict[str, Any]) -> dict[str, Any]:
        data = {
            "read_at": time.time(),
            "endpoint": self.endpoint or GOOGLE_ENDPOINT,
            "region": region,
            "prices": prices,
        }
        path = self._path(region)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, path)
        except OSError as exc:  # read again next time
            log.info("cannot keep live prices in %s: %s", path, exc)
        return self._live(region, data)

    @staticmethod
    def _live(region: str, data: dict[str, Any]) -> dict[str, Any]:
        as_of = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(data["read_at"])))
        return {"as_of": as_of, "source": SOURCE, "regions": {region: data["prices"]}}
