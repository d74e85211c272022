"""A stand-in for the Cloud Billing Catalog API: Compute Engine's SKUs as ``services.skus.list`` serves them.

The Compute emulator answers ``GET /v1/services/{service}/skus`` with this catalog, so the real
google-cloud-billing client reaches it like the real API::

    CloudCatalogClient(credentials=AnonymousCredentials(), transport="rest",
                       client_options={"api_endpoint": emulator.endpoint})

What it keeps from the API reference (``cloudbilling`` v1: ``Sku``, ``Category``, ``PricingInfo``,
``PricingExpression``, ``TierRate``, ``Money``, ``GeoTaxonomy``): every field, its JSON name and type
(``units`` is an int64, so a string; ``nanos`` an int32), paging with ``pageSize`` (default and most
5000) and an opaque ``pageToken``, and Google's JSON errors (``PERMISSION_DENIED`` with an ``ErrorInfo``
of reason ``SERVICE_DISABLED`` when the API is not enabled). The SKUs follow Compute Engine's own
descriptions: ``N2 Instance Core running in Americas``, ``Spot Preemptible N2 Custom Instance Ram running
in Netherlands``, ``N1 Predefined Instance Core ...`` (resource group ``N1Standard``), ``Custom Instance
Core ...`` (N1 custom), ``Nvidia L4 GPU attached to Spot Preemptible VMs running in ...``, ``Balanced PD
Capacity in ...`` per GiB-month; with, beside them, SKUs a price reader must pass over (commitments, sole
tenancy, extended memory, regional disks, egress, licences, a region the emulator has not).
One SKU covers the regions of its location (``serviceRegions``); its description names the location.

The prices are illustrative, close to the public list prices, not an authoritative copy. Test controls
(in-process): :meth:`Catalog.set_price`, :meth:`Catalog.refuse` (and ``refuse(None)``), ``page_size``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import threading
from typing import Any

from nbburst.testing.compute import catalog as cat
from nbburst.testing.compute.resources import ComputeError

COMPUTE_SERVICE_ID = "6F81-5844-456A"
MAX_PAGE_SIZE = 5000

#: Location in SKU descriptions -> (regions of the emulator it covers, price factor over the Americas).
LOCATIONS: dict[str, tuple[list[str], float]] = {
    "Americas": (["us-central1", "us-east1"], 1.0),
    "Netherlands": (["europe-west4"], 1.1),
}

# Machine series as Compute Engine's SKUs name them -> Americas USD prices:
# (vCPU-hour, GiB-hour, spot vCPU-hour, spot GiB-hour), and the same for its custom machine types.
_SERIES: dict[str, tuple[tuple[float, float, float, float], tuple[float, float, float, float] | None]] = {
    "E2": ((0.021811, 0.002923, 0.006543, 0.000877), (0.022890, 0.003067, 0.006867, 0.000920)),
    "N2": ((0.031611, 0.004237, 0.007653, 0.001025), (0.033174, 0.004446, 0.008035, 0.001076)),
    "N2D AMD": ((0.027502, 0.003686, 0.004560, 0.000611), (0.028877, 0.003870, 0.004788, 0.000642)),
    "C2D AMD": ((0.029563, 0.003959, 0.006970, 0.000934), None),
    "C3": ((0.034650, 0.003938, 0.006930, 0.000788), None),
    "N1 Predefined": ((0.031611, 0.004237, 0.006655, 0.000892), None),
    "G2": ((0.024988, 0.002927, 0.009995, 0.001171), None),
    "A2": ((0.031611, 0.004237, 0.006655, 0.000892), None),
}
#: N1 custom machine types have SKUs of their own without a series name.
_N1_CUSTOM = (0.033174, 0.004446, 0.006990, 0.000937)
# GPUs as the SKUs name them -> Americas USD per GPU-hour (on-demand, spot).
_GPUS = {"Tesla T4": (0.35, 0.14), "L4": (0.5603, 0.2240), "Tesla A100": (2.933908, 1.1)}
# Persistent disks -> Americas USD per GiB-month.
_DISKS = {"Balanced PD": 0.10, "SSD backed PD": 0.17, "Storage PD": 0.04}

# usageUnit -> (usageUnitDescription, baseUnit, baseUnitDescription, baseUnitConversionFactor)
_UNITS = {
    "h": ("hour", "s", "second", 3600.0),
    "GiBy.h": ("gibibyte hour", "By.s", "byte-seconds", 3865470566400.0),
    "GiBy.mo": ("gibibyte month", "By.s", "byte-seconds", 2875910101401600.0),
    "GiBy": ("gibibyte", "By", "byte", 1073741824.0),
}
_GROUPS = {"Core": "CPU", "Ram": "RAM"}


def sku_id(description: str) -> str:
    """A stable id in the Catalog's form (``D041-B8A1-6E0B``)."""
    digest = hashlib.sha256(description.encode()).hexdigest().upper()
    return f"{digest[:4]}-{digest[4:8]}-{digest[8:12]}"


def money(usd: float) -> dict[str, Any]:
    """``Money`` as the JSON API writes it: whole ``units`` as a string, ``nanos`` the billionths."""
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}


def sku(
    description: str,
    group: str,
    usage: str,
    unit: str,
    usd: float | list[tuple[float, float]],
    regions: list[str],
    family: str = "Compute",
) -> dict[str, Any]:
    """One SKU of Compute Engine; ``usd`` is a price per ``unit`` or tiers of (start usage, price)."""
    unit_description, base, base_description, factor = _UNITS[unit]
    tiers = usd if isinstance(usd, list) else [(0.0, usd)]
    return {
        "name": f"services/{COMPUTE_SERVICE_ID}/skus/{sku_id(description)}",
        "skuId": sku_id(description),
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": family,
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": list(regions),
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "usageUnitDescription": unit_description,
                    "baseUnit": base,
                    "baseUnitDescription": base_description,
                    "baseUnitConversionFactor": factor,
                    "displayQuantity": 1,
                    "tieredRates": [{"startUsageAmount": start, "unitPrice": money(price)} for start, price in tiers],
                },
                "aggregationInfo": {
                    "aggregationLevel": "ACCOUNT",
                    "aggregationInterval": "DAILY",
                    "aggregationCount": 1,
                },
                "currencyConversionRate": 1,
                "effectiveTime": cat.rfc3339(),
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": _geo_type(regions), "regions": [] if regions == ["global"] else list(regions)},
    }


def _geo_type(regions: list[str]) -> str:
    if regions == ["global"]:
        return "GLOBAL"
    return "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL"


def _machine_skus(location: str, regions: list[str], factor: float) -> list[dict[str, Any]]:
    predefined = [(name, prices) for name, (prices, _) in _SERIES.items()]
    custom = [(f"{name} Custom", prices) for name, (_, prices) in _SERIES.items() if prices]
    out = []
    for series, (core, ram, spot_core, spot_ram) in [*predefined, *custom, ("Custom", _N1_CUSTOM)]:
        for part, od, spot in (("Core", core, spot_core), ("Ram", ram, spot_ram)):
            group = "N1Standard" if series == "N1 Predefined" else _GROUPS[part]
            unit = "h" if part == "Core" else "GiBy.h"
            name = f"{series} Instance {part} running in {location}"
            out.append(sku(name, group, "OnDemand", unit, od * factor, regions))
            out.append(sku(f"Spot Preemptible {name}", group, "Preemptible", unit, spot * factor, regions))
    return out


def _other_skus(location: str, regions: list[str], factor: float) -> list[dict[str, Any]]:
    out = []
    for name, (od, spot) in _GPUS.items():
        out.append(sku(f"Nvidia {name} GPU running in {location}", "GPU", "OnDemand", "h", od * factor, regions))
        out.append(
            sku(
                f"Nvidia {name} GPU attached to Spot Preemptible VMs running in {location}",
                "GPU",
                "Preemptible",
                "h",
                spot * factor,
                regions,
            )
        )
    for name, usd in _DISKS.items():
        group = "PDStandard" if name == "Storage PD" else "SSD"
        out.append(
            sku(f"{name} Capacity in {location}", group, "OnDemand", "GiBy.mo", usd * factor, regions, "Storage")
        )
    # What a price reader must pass over: same words, other things.
    out += [
        sku(f"Commitment v1: N2 Cpu in {location} for 1 Year", "CPU", "Commit1Yr", "h", 0.019915 * factor, regions),
        sku(f"N2 Sole Tenancy Instance Core running in {location}", "CPU", "OnDemand", "h", 0.0379 * factor, regions),
        sku(
            f"N2 Custom Extended Instance Ram running in {location}",
            "RAM",
            "OnDemand",
            "GiBy.h",
            0.0095 * factor,
            regions,
        ),
        sku(
            f"Regional Balanced PD Capacity in {location}",
            "SSD",
            "OnDemand",
            "GiBy.mo",
            0.2 * factor,
            regions,
            "Storage",
        ),
        sku(
            f"Network Internet Egress from {location} to Americas",
            "InternetEgress",
            "OnDemand",
            "GiBy",
            [(0.0, 0.0), (1.0, 0.12), (1024.0, 0.11)],
            regions,
            "Network",
        ),
        sku(
            f"Commitment v1: Nvidia L4 GPU running in {location} for 1 Year",
            "GPU",
            "Commit1Yr",
            "h",
            0.35 * factor,
            regions,
        ),
    ]
    return out


def default_skus() -> list[dict[str, Any]]:
    """The stand-in's catalog: every location's SKUs, a global licence SKU and one of a region it has not."""
    skus: list[dict[str, Any]] = []
    for location, (regions, factor) in LOCATIONS.items():
        skus += _machine_skus(location, regions, factor) + _other_skus(location, regions, factor)
    licence = "Licensing Fee for Windows Server 2022 Datacenter Edition (CPU cost)"
    skus.append(sku(licence, "Google", "OnDemand", "h", 0.046, ["global"], "License"))
    skus.append(sku("N2 Instance Core running in Taiwan", "CPU", "OnDemand", "h", 0.034773, ["asia-east1"]))
    return skus


class CatalogError(ComputeError):
    """An error of the Catalog API, in Google's JSON error shape (``status`` and ``details``)."""

    STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 503: "UNAVAILABLE"}

    def __init__(self, code: int, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(code, self.STATUS.get(code, "UNKNOWN"), message)
        self.details = details or []

    def payload(self) -> dict:
        error = {"code": self.code, "message": self.message, "status": self.reason}
        if self.details:
            error["details"] = self.details
        return {"error": error}


def service_disabled(project_number: int) -> CatalogError:
    """What the API answers a project that has not enabled it."""
    url = (
        f"https://console.developers.google.com/apis/api/cloudbilling.googleapis.com/overview?project={project_number}"
    )
    return CatalogError(
        403,
        f"Cloud Billing API has not been used in project {project_number} before or it is disabled. "
        f"Enable it by visiting {url} then retry.",
        [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "SERVICE_DISABLED",
                "domain": "googleapis.com",
                "metadata": {"service": "cloudbilling.googleapis.com", "consumer": f"projects/{project_number}"},
            }
        ],
    )


class Catalog:
    """The SKUs of Compute Engine, served a page at a time (see the module docstring)."""

    def __init__(self, project: str = "nbburst-test", skus: list[dict[str, Any]] | None = None):
        self.project = project
        self.skus: list[dict[str, Any]] = default_skus() if skus is None else list(skus)
        self.page_size = MAX_PAGE_SIZE
        self._refusal: CatalogError | None = None
        self._lock = threading.Lock()

    # -- test controls -----------------------------------------------------------------------------
    def set_price(self, description: str, usd: float) -> None:
        """Give the SKU ``description`` a new price (one tier), as a price change would."""
        with self._lock:
            for item in self.skus:
                if item["description"] == description:
                    expression = item["pricingInfo"][-1]["pricingExpression"]
                    expression["tieredRates"] = [{"startUsageAmount": 0, "unitPrice": money(usd)}]
                    return
        raise KeyError(f"no SKU {description!r} in the stand-in catalog")

    def refuse(self, code: int | None = 403, message: str = "") -> None:
        """Answer every request with an error: 403 = the API is not enabled in the project (Google's words),
        another code with ``message``; ``None`` serves again."""
        if code is None:
            self._refusal = None
        elif code == 403 and not message:
            self._refusal = service_disabled(cat.project_number(self.project))
        else:
            self._refusal = CatalogError(code, message or "The service is currently unavailable.")

    # -- the API -----------------------------------------------------------------------------------
    def list_skus(self, service: str, query: dict[str, str]) -> dict[str, Any]:
        """``services.skus.list``: one page of the service's SKUs and, unless it is the last, a nextPageToken."""
        if self._refusal is not None:
            raise self._refusal
        if service != COMPUTE_SERVICE_ID:
            raise CatalogError(404, f"Service services/{service} not found in the stand-in catalog.")
        if query.get("currencyCode", "USD") != "USD":
            raise CatalogError(400, "The stand-in catalog has prices in USD only.")
        try:
            size = int(query.get("pageSize") or 0) or self.page_size
        except ValueError:
            raise CatalogError(400, f"Invalid value for pageSize: {query['pageSize']!r}") from None
        size = max(1, min(size, self.page_size, MAX_PAGE_SIZE))
        offset = _offset(query.get("pageToken", ""))
        with self._lock:
            page = copy.deepcopy(self.skus[offset : offset + size])
            more = offset + size < len(self.skus)
        out: dict[str, Any] = {"skus": page}
        if more:
            out["nextPageToken"] = base64.urlsafe_b64encode(f"skus:{offset + size}".encode()).decode()
        return out


def _offset(token: str) -> int:
    if not token:
        return 0
    try:
        kind, _, value = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if kind == "skus":
            return int(value)
    except ValueError:
        pass
    raise CatalogError(400, "Invalid page token.")
