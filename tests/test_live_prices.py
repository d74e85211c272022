"""Prices that are true today: Catalog SKUs parsed into prices, the Catalog stand-in read through the real
google-cloud-billing client (paging, Google's own description of the API), the day-long cache, the dated
table with a visible note when the Catalog refuses or cannot be reached, and plans and finished jobs of
the gce backend priced from the Catalog."""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
import time

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import billing_v1

from nbburst import config
from nbburst.client.burst import Burst
from nbburst.machines.base import machine_name
from nbburst.machines.gce import prices as gce_prices
from nbburst.protocol import pricing
from nbburst.protocol.job import State
from nbburst.testing.compute.billing import sku
from nbburst.testing.discovery import Discovery

US = ["us-central1", "us-east1"]
N1 = "N1Standard"  # the resource group of N1 predefined cores and memory
#: Machine families as Compute Engine's SKU descriptions name them.
SERIES = {"e2": "E2", "n2": "N2", "n2d": "N2D AMD", "c2d": "C2D AMD", "c3": "C3", "n1": "N1 Predefined"}


def catalog_usd(emu, description: str) -> float:
    """The price the stand-in serves for the SKU ``description`` (units + nanos of its one tier)."""
    (item,) = [s for s in emu.billing.skus if s["description"] == description]
    price = item["pricingInfo"][-1]["pricingExpression"]["tieredRates"][0]["unitPrice"]
    return int(price["units"]) + price["nanos"] / 1e9


def billing_requests(emu) -> list[dict]:
    return [r for r in emu.request_log if r["path"].startswith("/v1/")]


def settings_for(emu, tmp_path, **kwargs) -> config.NBBurst:
    return config.NBBurst(compute_endpoint=emu.endpoint, state_dir=str(tmp_path / "state"), **kwargs)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_catalog_skus_of_several_families_become_prices():
    documented = {  # one SKU exactly as the API reference writes it: units a string, nanos an int
        "name": "services/6F81-5844-456A/skus/0D5D-6E23-4250",
        "skuId": "0D5D-6E23-4250",
        "description": "Nvidia Tesla A100 80GB GPU running in Americas",
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": "GPU",
            "usageType": "OnDemand",
        },
        "serviceRegions": ["us-central1"],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": "h",
                    "usageUnitDescription": "hour",
                    "baseUnit": "s",
                    "baseUnitDescription": "second",
                    "baseUnitConversionFactor": 3600,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": "3", "nanos": 927000000}}
                    ],
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-11-20T07:00:00Z",
            }
        ],
        "serviceProviderName": "Google",
    }
    skus = [
        documented,
        sku("E2 Instance Core running in Americas", "CPU", "OnDemand", "h", 0.021811, US),
        sku("E2 Instance RAM running in Americas", "RAM", "OnDemand", "GiBy.h", 0.002923, US),
        sku("Spot Preemptible E2 Instance Core running in Americas", "CPU", "Preemptible", "h", 0.0061, US),
        sku("E2 Custom Instance Core running in Americas", "CPU", "OnDemand", "h", 0.02289, US),
        sku("Spot Preemptible E2 Custom Instance Ram running in Americas", "RAM", "Preemptible", "GiBy.h", 0.00092, US),
        sku("N2 Instance Core running in Americas", "CPU", "OnDemand", "h", 0.031611, US),
        sku("Spot Preemptible N2 Instance Ram running in Americas", "RAM", "Preemptible", "GiBy.h", 0.001025, US),
        sku("N2 Custom Instance Ram running in Americas", "RAM", "OnDemand", "GiBy.h", 0.004446, US),
        sku("Spot Preemptible C2D AMD Instance Core running in Americas", "CPU", "Preemptible", "h", 0.00697, US),
        sku("N1 Predefined Instance Core running in Americas", N1, "OnDemand", "h", 0.031611, US),
        # a legacy preemptible SKU, then the spot one: spot wins
        sku("Preemptible N1 Predefined Instance Core running in Americas", N1, "Preemptible", "h", 0.00698, US),
        sku("Spot Preemptible N1 Predefined Instance Core running in Americas", N1, "Preemptible", "h", 0.0066, US),
        sku("Custom Instance Core running in Americas", "CPU", "OnDemand", "h", 0.033174, US),
        sku("Compute optimized Core running in Americas", "CPU", "OnDemand", "h", 0.03398, US),
        sku("Nvidia L4 GPU running in Americas", "GPU", "OnDemand", "h", 0.5603, US),
        sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas", "GPU", "Preemptible", "h", 0.2, US),
        sku(
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
            "GPU",
            "Preemptible",
            "h",
            0.14,
            US,
        ),
        sku("Balanced PD Capacity in Americas", "SSD", "OnDemand", "GiBy.mo", 0.1, US, "Storage"),
        sku("Storage PD Capacity in Americas", "PDStandard", "OnDemand", "GiBy.mo", 0.04, US, "Storage"),
        # what is not a price of ours, though it reads like one
        sku("Commitment v1: N2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", "h", 0.0199, US),
        sku("Commitment v1: E2 Instance Core running in Americas", "CPU", "Commit3Yr", "h", 0.0098, US),
        sku("N2 Sole Tenancy Instance Core running in Americas", "CPU", "OnDemand", "h", 0.0379, US),
        sku("Sole Tenancy Instance Core running in Americas", "CPU", "OnDemand", "h", 0.0379, US),
        sku("N2 Custom Extended Instance Ram running in Americas", "RAM", "OnDemand", "GiBy.h", 0.0095, US),
        sku("Memory-optimized Instance Core running in Americas", "CPU", "OnDemand", "h", 0.0348, US),
        sku("Regional Balanced PD Capacity in Americas", "SSD", "OnDemand", "GiBy.mo", 0.2, US, "Storage"),
        sku("N2 Instance Core running in Taiwan", "CPU", "OnDemand", "h", 0.9, ["asia-east1"]),
        sku("E2 Instance Core running in Americas", "CPU", "OnDemand", "GiBy", 0.5, US),  # a unit of another kind
    ]
    prices = gce_prices.region_prices(skus, "us-central1")
    assert prices == {
        "families": {
            "e2": {
                "vcpu": 0.021811,
                "gb": 0.002923,
                "spot_vcpu": 0.0061,
                "custom_vcpu": 0.02289,
                "spot_custom_gb": 0.00092,
            },
            "n2": {"vcpu": 0.031611, "spot_gb": 0.001025, "custom_gb": 0.004446},
            "c2d": {"spot_vcpu": 0.00697},
            "n1": {"vcpu": 0.031611, "spot_vcpu": 0.0066, "custom_vcpu": 0.033174},
            "c2": {"vcpu": 0.03398},
        },
        "gpus": {
            "nvidia-a100-80gb": {"hour": 3.927},
            "nvidia-l4": {"hour": 0.5603, "spot_hour": 0.2},
            "nvidia-tesla-t4": {"spot_hour": 0.14},
        },
        "disks": {"pd-balanced": {"gb_month": 0.1}, "pd-standard": {"gb_month": 0.04}},
    }
    assert gce_prices.region_prices(skus, "asia-east1") == {"families": {"n2": {"vcpu": 0.9}}}
    assert gce_prices.per_hour(0.1, "GiBy.mo", sized=True) == pytest.approx(0.1 / pricing.HOURS_PER_MONTH)
    assert gce_prices.per_hour(102.4, "TiBy.h", sized=True) == pytest.approx(0.1)
    assert gce_prices.per_hour(0.1, "GiBy.h", sized=False) is None
    tiers = sku("Network egress", "Egress", "OnDemand", "GiBy", [(0.0, 0.0), (1.0, 0.12), (1024.0, 0.11)], US)
    assert gce_prices.unit_price(tiers) == pytest.approx(0.12)  # past the free tier


def test_live_prices_price_machines_with_custom_rates_and_overrides_still_win(tmp_path):
    live = {
        "as_of": "2026-12-01 07:00 UTC",
        "source": gce_prices.SOURCE,
        "regions": {
            "europe-west4": {
                "families": {
                    "n2": {"vcpu": 0.05, "gb": 0.005, "spot_vcpu": 0.01, "spot_gb": 0.002, "custom_vcpu": 0.06}
                }
            }
        },
    }
    prices = pricing.table(live=live)
    plan = {"machine_type": "n2-standard-8", "cores": 8, "memory_gb": 32, "spot": True, "zone": "europe-west4-a"}
    b = pricing.for_plan(plan, prices=prices)
    assert (b.vcpu, b.memory) == (pytest.approx(8 * 0.01), pytest.approx(32 * 0.002))
    assert b.on_demand == pytest.approx(8 * 0.05 + 32 * 0.005)
    assert (b.source, b.as_of, b.notes) == (gce_prices.SOURCE, "2026-12-01 07:00 UTC", [])
    custom = pricing.for_plan({**plan, "machine_type": "n2-custom-8-32768", "spot": False}, prices=prices)
    assert custom.vcpu == pytest.approx(8 * 0.06)  # the Catalog's custom price
    assert custom.memory == pytest.approx(32 * 0.005 * pricing.CUSTOM_PREMIUM)  # none for memory: the premium
    assert any("custom machine types priced 5 % above" in n for n in custom.notes)
    gpu = pricing.for_plan({**plan, "gpu": "nvidia-tesla-t4", "gpu_count": 1}, prices=prices)
    dated_t4 = pricing.DEFAULT_TABLE["gpus"]["nvidia-tesla-t4"]["spot_hour"] * 1.10  # europe-west4's factor
    assert gpu.gpu == pytest.approx(dated_t4)  # not read live: the dated table's, for the region
    # what the user set wins over what was read: a base (us-central1) price scaled to the region, and a region's own
    user = pricing.table({"families": {"n2": {"spot_vcpu": 0.02}}}, live=live)
    assert pricing.for_plan(plan, prices=user).vcpu == pytest.approx(8 * 0.02 * 1.10)
    own = {"regions": {"europe-west4": {"families": {"n2": {"spot_vcpu": 0.003}}}}}
    assert pricing.for_plan(plan, prices=pricing.table(own, live=live)).vcpu == pytest.approx(8 * 0.003)
    assert pricing.for_plan(plan, prices=pricing.table(own, live=live)).memory == pytest.approx(32 * 0.002)


def test_the_stand_in_pages_like_the_api_and_serves_its_shapes(compute_emulator):
    emu = compute_emulator
    emu.billing.page_size = 9
    client = billing_v1.CloudCatalogClient(
        credentials=AnonymousCredentials(), transport="rest", client_options={"api_endpoint": emu.endpoint}
    )
    listed = list(client.list_skus(parent=gce_prices.COMPUTE_SERVICE))
    assert [s.sku_id for s in listed] == [s["skuId"] for s in emu.billing.skus]
    requests = billing_requests(emu)
    assert len(requests) == math.ceil(len(emu.billing.skus) / 9)
    tokens = [r["query"].get("pageToken") for r in requests]
    assert tokens[0] is None and all(tokens[1:]) and len(set(tokens[1:])) == len(tokens) - 1
    # what the client sent, per Google's document of the API ("$alt" is a system parameter of every Google API;
    # the document's basePath is empty: its paths are relative to the root)
    sent = [
        {**r, "path": r["path"].lstrip("/"), "query": {k: v for k, v in r["query"].items() if k != "$alt"}}
        for r in requests
    ]
    assert not Discovery.load("cloudbilling.v1").check_all(sent)
    for item in emu.billing.skus:  # every field a field of the API's own Sku message, of its type
        billing_v1.Sku.from_json(json.dumps(item), ignore_unknown_fields=False)
    small = list(client.list_skus(request={"parent": gce_prices.COMPUTE_SERVICE, "page_size": 4}).pages)
    assert [len(page.skus) for page in small[:2]] == [4, 4]


def test_prices_are_read_once_a_day_into_the_state_folder(compute_emulator, tmp_path):
    emu = compute_emulator
    emu.billing.page_size = 50
    settings = settings_for(emu, tmp_path)
    first = gce_prices.LivePrices(settings, AnonymousCredentials).live("us-central1")
    pages = math.ceil(len(emu.billing.skus) / 50)
    assert len(billing_requests(emu)) == pages
    n2 = first["regions"]["us-central1"]["families"]["n2"]
    assert n2["spot_vcpu"] == pytest.approx(catalog_usd(emu, "Spot Preemptible N2 Instance Core running in Americas"))
    (cached,) = (tmp_path / "state" / "prices").glob("us-central1-*.json")
    emu.billing.set_price("Spot Preemptible N2 Instance Core running in Americas", 0.0123)
    again = gce_prices.LivePrices(settings, AnonymousCredentials)  # another process, the same state folder
    assert again.live("us-central1") == first and len(billing_requests(emu)) == pages  # no request
    record = json.loads(cached.read_text())
    record["read_at"] -= again.ttl_s + 1  # a day later
    cached.write_text(json.dumps(record))
    later = again.live("us-central1")
    assert len(billing_requests(emu)) == 2 * pages
    assert later["regions"]["us-central1"]["families"]["n2"]["spot_vcpu"] == pytest.approx(0.0123)
    other = gce_prices.LivePrices(settings, AnonymousCredentials).live("europe-west4")  # a region of its own
    assert other["regions"]["europe-west4"]["families"]["n2"]["vcpu"] == pytest.approx(
        catalog_usd(emu, "N2 Instance Core running in Netherlands")
    )


def test_a_refused_or_unreachable_catalog_leaves_the_dated_table_with_a_note(compute_emulator, tmp_path):
    emu = compute_emulator
    emu.billing.refuse(403)
    reader = gce_prices.LivePrices(settings_for(emu, tmp_path), AnonymousCredentials)
    table = reader.table("us-central1")
    note = table["note"]
    assert note.startswith(f"prices from the dated table ({pricing.PRICES_AS_OF}), live prices unavailable: ")
    assert "Cloud Billing API is not enabled" in note and "cloudbilling.googleapis.com" in note
    b = pricing.hourly("n2", 4, 16, region="us-central1", prices=table)
    dated = pricing.hourly("n2", 4, 16, region="us-central1")
    assert (b.total, b.source, b.notes) == (pytest.approx(dated.total), pricing.DATED_TABLE, [note])
    assert pricing.price_source(table) == note
    asked = len(billing_requests(emu))
    assert reader.table("us-central1")["note"] == note and len(billing_requests(emu)) == asked  # not asked again soon
    assert not (tmp_path / "state" / "prices").exists()  # nothing kept: the next process asks again
    emu.billing.refuse(None)
    assert "note" not in gce_prices.LivePrices(settings_for(emu, tmp_path), AnonymousCredentials).table("us-central1")

    gone = config.NBBurst(billing_endpoint=f"http://127.0.0.1:{closed_port()}", state_dir=str(tmp_path / "s2"))
    note = gce_prices.LivePrices(gone, AnonymousCredentials).table("us-central1")["note"]
    assert "live prices unavailable: cannot reach the Cloud Billing Catalog API at http://127.0.0.1:" in note
    assert "Connection refused" in note
    off = gce_prices.LivePrices(settings_for(emu, tmp_path, live_prices=False), AnonymousCredentials)
    assert off.table("us-central1") == pricing.table()  # turned off: the dated table, no note, no request


def test_a_gce_plan_is_priced_from_the_catalog_and_the_switch_turns_it_off(gce_env, compute_emulator, monkeypatch):
    emu = compute_emulator
    spot_e2 = "Spot Preemptible E2 Instance Core running in Americas"
    emu.billing.set_price(spot_e2, 0.05)  # predefined E2 is no longer the cheapest for 4 vCPUs
    plan = Burst().machines("gce").plan(Burst().options(backend="gce", cores=4).resources)
    assert billing_requests(emu) and plan.machine_type != "e2-highcpu-4"  # what the dated table picks
    family, custom = pricing.family_of(plan.machine_type), pricing.is_custom(plan.machine_type)
    series = {"n1": "Custom"}.get(family, f"{SERIES[family]} Custom") if custom else SERIES[family]
    core = catalog_usd(emu, f"Spot Preemptible {series} Instance Core running in Americas")
    ram = catalog_usd(emu, f"Spot Preemptible {series} Instance Ram running in Americas")
    disk = catalog_usd(emu, "Balanced PD Capacity in Americas") * plan.extra["disk_gb"] / pricing.HOURS_PER_MONTH
    recorded = pricing.breakdown_of(plan.to_dict())
    assert recorded.source == gce_prices.SOURCE and f"prices from the {gce_prices.SOURCE} (" in plan.reason
    assert recorded.vcpu == pytest.approx(plan.cores * core) and recorded.memory == pytest.approx(plan.memory_gb * ram)
    assert recorded.total == pytest.approx(plan.cores * core + plan.memory_gb * ram + disk)
    assert plan.price_per_hour == pytest.approx(plan.cores * core + plan.memory_gb * ram)  # as ranked: no disk

    monkeypatch.setenv("NBBURST_LIVE_PRICES", "0")
    asked = len(billing_requests(emu))
    dated = Burst().machines("gce").plan(Burst().options(backend="gce", cores=4).resources)
    assert dated.machine_type == "e2-highcpu-4" and len(billing_requests(emu)) == asked
    assert pricing.breakdown_of(dated.to_dict()).vcpu == pytest.approx(
        4 * pricing.DEFAULT_TABLE["families"]["e2"]["spot_vcpu"]
    )
    assert f"prices from the dated table ({pricing.PRICES_AS_OF})" in dated.reason

    monkeypatch.setenv("NBBURST_LIVE_PRICES", "1")
    emu.billing.refuse(403)
    monkeypatch.setenv("NBBURST_STATE_DIR", os.environ["NBBURST_STATE_DIR"] + "-fresh")  # nothing cached
    refused = Burst().machines("gce").plan(Burst().options(backend="gce", cores=4).resources)
    assert "live prices unavailable: the Cloud Billing API is not enabled" in refused.reason
    assert "live prices unavailable" in pricing.breakdown_of(refused.to_dict()).notes[0]


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_finished_job_costs_the_catalog_prices_over_its_machine_time(gce_env, compute_emulator):
    emu = compute_emulator
    emu.billing.set_price("Spot Preemptible E2 Instance Core running in Americas", 0.003)  # not the dated price
    burst = Burst()
    job = burst.submit(time.sleep, 2, options=burst.options(backend="gce", cores=2))
    submitted = time.time()
    vm = emu.api_get(emu.project, job.spec.plan["zone"], machine_name(job.id))
    created = datetime.datetime.fromisoformat(vm["creationTimestamp"]).timestamp()
    assert job.wait(timeout=120) == State.SUCCEEDED
    (status,) = job.statuses()
    # machine time runs from the VM's creation (boot and set-up are billed too), not from the agent's start
    assert created - 0.001 <= status.launched <= submitted
    plan = job.spec.plan
    family, custom = pricing.family_of(plan["machine_type"]), pricing.is_custom(plan["machine_type"])
    series = {"n1": "Custom"}.get(family, f"{SERIES[family]} Custom") if custom else SERIES[family]
    hourly = (
        plan["cores"] * catalog_usd(emu, f"Spot Preemptible {series} Instance Core running in Americas")
        + plan["memory_gb"] * catalog_usd(emu, f"Spot Preemptible {series} Instance Ram running in Americas")
        + plan["extra"]["disk_gb"] * catalog_usd(emu, "Balanced PD Capacity in Americas") / pricing.HOURS_PER_MONTH
    )
    cost = job.info()["cost"]
    assert cost["seconds"] == pytest.approx(job.terminal().at - status.launched, abs=0.01)
    assert cost["total"] == pytest.approx(hourly * cost["seconds"] / 3600, rel=0.01)  # the list arithmetic
    assert cost["source"] == gce_prices.SOURCE and not cost["notes"]
    assert abs(pricing.for_plan(plan).total - hourly) > 0.05 * hourly  # the dated table would have said otherwise


def test_the_job_view_says_when_the_cost_comes_from_the_dated_table():
    from support.view import FakeJob

    from nbburst.ui.view import JobView

    table = pricing.table_for(config.NBBurst(), pricing.unavailable("the Cloud Billing API is not enabled"))
    breakdown = pricing.hourly("n2-standard-64", 64, 256, region="us-central1", prices=table)
    job = FakeJob()
    job.data.update(state="SUCCEEDED", ended=job.data["created"] + 125, cost=pricing.cost(breakdown, 120))
    view = JobView(job)
    view.finish()
    expected = f"prices from the dated table ({pricing.PRICES_AS_OF}), live prices unavailable: the Cloud Billing API"
    assert "SUCCEEDED" in view.summary.value and expected in view.summary.value
