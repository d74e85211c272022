"""``nbburst setup``: the bucket nbburst needs, made as it should be, and the VMs' access to it.

Run it once per project (again at any time: it changes only what is missing):

1. the store's bucket (``c.NBBurst.bucket`` or ``root``), when it does not exist, is created in the region of
   the configured zone (or ``--location``) with uniform bucket-level access (IAM alone decides who reads it),
   public access prevention enforced (no ACL or policy can make job inputs and results public) and a
   lifecycle rule deleting the content-addressed values under ``PREFIX/blobs/`` after ``--blob-days`` days
   (default 30; 0: no rule). Values are shared between jobs and uploaded again by the next job that needs
   one, but a job older than that can no longer be fetched whole. A bucket that exists is left as it is:
   each of these it lacks is reported with the command that sets it;
2. the VMs' service account gets ``roles/storage.objectUser`` on the bucket, unless the bucket's policy
   grants it the object permissions already (``--no-grant``: leave the policy alone);
3. the access checks of ``nbburst doctor`` then run on the bucket, and on Secret Manager, which hands each job's
   key to its VM: the API must be enabled (``gcloud services enable secretmanager.googleapis.com``) and these
   credentials must manage secrets (``roles/secretmanager.admin``); see :mod:`~nbburst.machines.gce.keysecret`;
4. with ``--session-source RANGE`` (the notebook's address), the VPC firewall rule that admits the notebook to a
   session VM's relay port is created when missing (:mod:`~nbburst.machines.gce.firewall`); without it, it is
   checked, and its absence is a warning with the command that makes it (sessions then go through the Store).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import config
from ...errors import BurstError, UsageError
from ...protocol import pricing
from ...protocol.job import BLOBS_PREFIX
from ..base import Check
from . import access as gce_access
from . import firewall as gce_firewall
from .context import GCEContext

DEFAULT_BLOB_DAYS = 30


def bucket_and_prefix(settings: config.NBBurst) -> tuple[str, str]:
    """(bucket, object prefix ending in ``/`` or empty) of the gce store root."""
    url = config.store_url(settings, "gce")
    if not url.startswith("gs://"):
        raise UsageError(f"nbburst setup makes a gs:// bucket; the store root is {url!r}: set c.NBBurst.bucket")
    bucket, _, prefix = url[len("gs://") :].partition("/")
    return bucket, (prefix.strip("/") + "/" if prefix.strip("/") else "")


def setup(
    context: GCEContext,
    location: str | None = None,
    blob_days: int = DEFAULT_BLOB_DAYS,
    grant: bool = True,
    say: Callable[[str], None] = print,
    session_sources: list[str] | None = None,
) -> list[Check]:
    """Make the bucket and let the VMs use it (see the module docstring); the checks that follow.
    ``session_sources``: the notebook's address ranges, for the session firewall rule (step 4)."""
    from google.api_core import exceptions as gexc

    name, prefix = bucket_and_prefix(context.settings)
    client = context.store_for(config.store_url(context.settings, "gce")).client
    bucket = client.bucket(name)
    try:
        if bucket.exists(timeout=30):
            bucket.reload(timeout=30)
            checks = settings_checks(bucket, prefix)
        else:
            region = location or _region(context)
            _create(client, bucket, context.project, region, prefix, blob_days)
            say(f"created gs://{name} in {region}")
            checks = [Check("bucket", True, f"gs://{name} created in {region}: {_describe(bucket, prefix)}")]
        email = context.service_account_email()
        if grant and not gce_access.service_account_access(bucket, email).ok:
            _grant(bucket, f"serviceAccount:{email}")
            say(f"granted {gce_access.GRANT_ROLE} on gs://{name} to {email}")
    except gexc.Conflict:
        raise BurstError(
            f"the bucket name gs://{name} is taken (bucket names are global): choose another with c.NBBurst.bucket"
        ) from None
    except gexc.GoogleAPICallError as exc:
        raise BurstError(f"nbburst setup: gs://{name}: {getattr(exc, 'message', exc)}") from None
    rule = gce_firewall.ensure(context, session_sources, say) if session_sources else gce_firewall.check(context)
    return checks + context.access_checks(name) + [rule]


def _region(context: GCEContext) -> str:
    zone = context.zone_setting()
    if zone == "auto":
        raise UsageError("nbburst setup: with zone auto, say where the bucket goes: --location REGION")
    return pricing.region_of(zone)


def _lifecycle_prefix(prefix: str) -> str:
    return prefix + BLOBS_PREFIX


def _create(client: Any, bucket: Any, project: str, region: str, prefix: str, blob_days: int) -> None:
    bucket.iam_configuration.uniform_bucket_level_access_enabled = True
    bucket.iam_configuration.public_access_prevention = "enforced"
    if blob_days > 0:
        bucket.add_lifecycle_delete_rule(age=blob_days, matches_prefix=[_lifecycle_prefix(prefix)])
    client.create_bucket(bucket, project=project, location=region, timeout=60)


def _grant(bucket: Any, member: str) -> None:
    policy = bucket.get_iam_policy(requested_policy_version=3, timeout=30)
    policy.bindings.append({"role": gce_access.GRANT_ROLE, "members": {member}})
    bucket.set_iam_policy(policy, timeout=30)


def _blob_rule_days(bucket: Any, prefix: str) -> int | None:
    """The age after which the bucket's lifecycle deletes ``PREFIX/blobs/`` objects, None when it does not."""
    for rule in bucket.lifecycle_rules:
        condition = rule.get("condition", {})
        prefixes = condition.get("matchesPrefix")
        covers = not prefixes or any(_lifecycle_prefix(prefix).startswith(p) for p in prefixes)
        if rule.get("action", {}).get("type") == "Delete" and "age" in condition and covers:
            return int(condition["age"])
    return None


def _describe(bucket: Any, prefix: str) -> str:
    days = _blob_rule_days(bucket, prefix)
    rule = f"gs://{bucket.name}/{_lifecycle_prefix(prefix)} deleted after {days} days" if days else "no lifecycle rule"
    return f"uniform bucket-level access, public access prevention enforced, {rule}"


def settings_checks(bucket: Any, prefix: str) -> list[Check]:
    """How an existing bucket compares with one nbburst setup makes (warnings, each with its fix)."""
    url = f"gs://{bucket.name}"
    checks = [Check("bucket", True, f"{url} exists; left as it is")]
    iam = bucket.iam_configuration
    if not iam.uniform_bucket_level_access_enabled:
        checks.append(
            Check(
                "uniform bucket-level access",
                False,
                f"off on {url}: object ACLs can grant access past the bucket's IAM policy",
                warning=True,
                fix=f"gcloud storage buckets update {url} --uniform-bucket-level-access",
            )
        )
    if iam.public_access_prevention != "enforced":
        checks.append(
            Check(
                "public access prevention",
                False,
                f"{iam.public_access_prevention or 'not known'} on {url}: job inputs and results could be made public",
                warning=True,
                fix=f"gcloud storage buckets update {url} --public-access-prevention",
            )
        )
    if _blob_rule_days(bucket, prefix) is None:
        checks.append(
            Check(
                "lifecycle",
                False,
                f"no rule deletes old values under {url}/{_lifecycle_prefix(prefix)}: they are kept "
                "(and billed) for as long as the bucket lives",
                warning=True,
                fix=f"add a Delete rule with age {DEFAULT_BLOB_DAYS} and matchesPrefix "
                f"{_lifecycle_prefix(prefix)!r} (gcloud storage buckets update {url} --lifecycle-file=FILE)",
            )
        )
    return checks
