"""Chaos over many seeds: how jobs fare when preempted and killed at random points, under a flaky Store and a
supervisor whose clock is an hour off (the scenario of tests/test_chaos.py, one run per seed and backend).

Prints per backend and in total: jobs, preemptions and kills delivered (and planned hits the job outran),
relaunches, Store faults injected (each one retried), log lines lost or doubled, lines an attempt wrote after
a later attempt had begun (two attempts at once), processes or machines left behind, and the runs that found
a problem, with their seeds (replay one with ``NBBURST_CHAOS_SEED=<seed> pytest tests/test_chaos.py``).

Run: python bench/chaos.py [--seeds 10] [--first 1] [--no-gce]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the chaos scenario and its helpers are the test's own

from support import kill_agents  # noqa: E402
from test_chaos import FAULT_RATE, Report, chaos  # noqa: E402

from nbburst.client.burst import Burst  # noqa: E402
from nbburst.client.supervision import laptop  # noqa: E402
from nbburst.config import load  # noqa: E402
from nbburst.store import ENV_STORES  # noqa: E402
from nbburst.testing.faults import ENV_LOG, ENV_RATE, STORES, injected  # noqa: E402

SIZES = {"local": {"jobs": 4, "hits": 3, "steps": 10, "pause": 0.15, "graces": (1.0, 3.0)}}
SIZES["gce"] = {"jobs": 1, "hits": 2, "steps": 8, "pause": 0.3, "graces": (3.0,)}


def local_run(work: Path, seed: int) -> Report:
    work.mkdir(parents=True)
    root, log = work / "store", work / "faults.log"
    os.environ.update(
        {
            "NBBURST_ROOT": f"flaky://{root}",
            "NBBURST_STATE_DIR": str(work / "state"),
            "NBBURST_BACKEND": "local",
            ENV_STORES: STORES,
            ENV_RATE: str(FAULT_RATE),
            ENV_LOG: str(log),
        }
    )
    try:
        return chaos("local", Burst(), work, seed=seed, faults=lambda: injected(log), **SIZES["local"])
    finally:
        laptop.stop_all(load())
        kill_agents(str(root))


def gce_run(work: Path, seed: int, compute, gcs, secrets) -> Report:
    work.mkdir(parents=True)
    bucket = f"nbburst-chaos-{uuid.uuid4().hex[:8]}"
    gcs.create_bucket(bucket)
    if gcs.iam is not None:  # the VMs' service account may use the bucket, as `nbburst setup` grants
        gcs.iam.grant(bucket, f"serviceAccount:{compute.default_service_account}", "roles/storage.objectUser")
    os.environ.update(
        {
            **gcs.env(),
            **compute.env(),
            **secrets.env(),
            "NBBURST_ROOT": f"gs://{bucket}/nbburst",
            "NBBURST_BACKEND": "gce",
            "GOOGLE_CLOUD_PROJECT": compute.project,
            "NBBURST_STATE_DIR": str(work / "state"),
        }
    )
    before = gcs.faults_injected
    gcs.set_faults(bucket, FAULT_RATE)
    try:
        return chaos("gce", Burst(), work, seed=seed, faults=lambda: gcs.faults_injected - before, **SIZES["gce"])
    finally:
        gcs.set_faults(bucket, 0)
        laptop.stop_all(load())


def summary(name: str, reports: list[Report]) -> None:
    def total(attr: str) -> int:
        return sum(getattr(r, attr) for r in reports)

    preemptions = sum(sum(r.preemptions.values()) for r in reports)
    kills = sum(sum(r.kills.values()) for r in reports)
    bad = [r for r in reports if r.problems]
    seconds = sorted(r.seconds for r in reports)
    print(f"\n{name}: {len(reports)} runs, {total('jobs')} jobs, median {seconds[len(seconds) // 2]:.0f} s a run")
    print(
        f"    preemptions delivered   {preemptions:6d}   kill -9 of an agent  {kills:6d}   missed {total('missed'):4d}"
    )
    print(f"    relaunches              {total('relaunches'):6d}   Store faults retried {total('faults'):6d}")
    print(f"    log lines lost          {total('lost_lines'):6d}   doubled              {total('doubled_lines'):6d}")
    orphans = sum(len(r.orphans) for r in reports)
    print(f"    overlapping lines       {total('overlaps'):6d}   orphans              {orphans:6d}")
    print(f"    runs with problems      {len(bad):6d}   seeds: {', '.join(str(r.seed) for r in bad) or '-'}")
    for r in bad:
        for problem in r.problems[:5]:
            print(f"        seed {r.seed}: {problem[:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds per backend")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--no-gce", action="store_true", help="skip the Compute Engine emulator")
    args = parser.parse_args()
    seeds = range(args.first, args.first + args.seeds)
    os.environ["NBBURST_PREEMPT_BUDGET"] = "0.5"
    saved = dict(os.environ)
    base = Path(tempfile.mkdtemp(prefix="nbburst-bench-chaos-"))
    results: dict[str, list[Report]] = {"local": []}
    try:
        for seed in seeds:
            report = local_run(base / f"local-{seed}", seed)
            print(report.line(), flush=True)
            results["local"].append(report)
            os.environ.clear()
            os.environ.update(saved)
        if not args.no_gce:
            from nbburst.testing import ComputeEmulator
            from nbburst.testing.gcs import GCSEmulator
            from nbburst.testing.pytest_plugin import TEST_DEFAULTS
            from nbburst.testing.secretmanager import SecretManagerEmulator

            compute = ComputeEmulator(base / "compute", **TEST_DEFAULTS).start()
            gcs = GCSEmulator().start()
            secrets = SecretManagerEmulator(compute.project).start()  # where the VMs find their job's key
            compute.instance_env.update(secrets.env())
            results["gce"] = []
            try:
                for seed in seeds:
                    report = gce_run(base / f"gce-{seed}", seed, compute, gcs, secrets)
                    print(report.line(), flush=True)
                    results["gce"].append(report)
                    os.environ.clear()
                    os.environ.update(saved)
            finally:
                compute.stop()
                gcs.stop()
                secrets.stop()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(base, ignore_errors=True)
    for name, reports in results.items():
        if reports:
            summary(name, reports)
    if len(results) > 1:
        summary("all", [r for reports in results.values() for r in reports])


if __name__ == "__main__":
    main()
