"""Who may use the bucket: the access checks nbburst makes before a VM is paid for, and what they leave open.

Jobs cross through the bucket: the notebook writes them and reads their results, the VM (as its service
account) reads them and writes back. What can be known with the Cloud Storage and Compute Engine APIs alone
is checked by ``nbburst doctor`` and before the first launch of a session:

* **the caller's access** (certain): ``buckets.testIamPermissions`` answers which of ``storage.objects.create``,
  ``get``, ``list`` and ``delete`` these credentials hold on the bucket. A missing one refuses the launch.
* **the VM's OAuth scopes** (certain, from ``c.NBBurst.scopes``): without a Cloud Storage scope the VM cannot
  read its job (the launch is refused); without a Compute Engine scope it cannot delete itself, so it powers
  off and the client deletes it (a warning).
* **the VM's service account** (as far as the bucket shows it): the bucket's IAM policy
  (``buckets.getIamPolicy``, which needs ``storage.buckets.getIamPolicy``) is read for bindings naming
  ``serviceAccount:EMAIL`` with roles that give the four object permissions. Roles the account holds on the
  project, folder or organisation are not visible there (that is Resource Manager's ``getIamPolicy``, which
  nbburst does not call), so an account without a binding on the bucket is a warning, not a refusal: a
  project Editor has access anyway (the default compute service account is one only where the organisation
  does not enforce ``iam.automaticIamGrantsForDefaultServiceAccounts``).

Not checked: the service account's ``compute.instances.delete`` (project IAM again; without it the agent
powers the VM off and the client deletes the stopped VM), and the caller's Compute Engine permissions
(``compute.instances.create``, ``iam.serviceAccounts.actAs``: Compute's ``testIamPermissions`` needs an
existing instance; the insert answers 403 before anything is paid for).
"""

from __future__ import annotations

from typing import Any

from ..base import Check
from .api import CLOUD_PLATFORM

OBJECT_PERMISSIONS = ("storage.objects.create", "storage.objects.get", "storage.objects.list", "storage.objects.delete")
_AUTH = "https://www.googleapis.com/auth/"
STORAGE_SCOPES = frozenset({CLOUD_PLATFORM, _AUTH + "devstorage.read_write", _AUTH + "devstorage.full_control"})
COMPUTE_SCOPES = frozenset({CLOUD_PLATFORM, _AUTH + "compute"})
_ALL = frozenset(OBJECT_PERMISSIONS)
#: Cloud Storage roles -> which of OBJECT_PERMISSIONS each grants (Google's predefined and legacy roles).
ROLE_OBJECT_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/storage.admin": _ALL,
    "roles/storage.objectAdmin": _ALL,
    "roles/storage.objectUser": _ALL,
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.legacyBucketOwner": _ALL - {"storage.objects.get"},
    "roles/storage.legacyBucketWriter": _ALL - {"storage.objects.get"},
    "roles/storage.legacyBucketReader": frozenset({"storage.objects.list"}),
    "roles/storage.legacyObjectOwner": frozenset({"storage.objects.get"}),
    "roles/storage.legacyObjectReader": frozenset({"storage.objects.get"}),
}
GRANT_ROLE = "roles/storage.objectUser"


def grant_command(bucket: str, member: str) -> str:
    return f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member={member} --role={GRANT_ROLE}"


def caller_access(bucket: Any) -> Check:
    """Whether these credentials may write jobs to ``bucket`` and read them back (testIamPermissions)."""
    from google.api_core import exceptions as gexc

    name = f"gs://{bucket.name}"
    try:
        held = set(bucket.test_iam_permissions(list(OBJECT_PERMISSIONS), timeout=30))
    except gexc.GoogleAPICallError as exc:
        return Check(
            "bucket access", False, f"not checked: {name} did not answer testIamPermissions ({exc})", warning=True
        )
    missing = [p for p in OBJECT_PERMISSIONS if p not in held]
    if missing:
        return Check(
            "bucket access",
            False,
            f"these credentials lack {', '.join(missing)} on {name}: nbburst writes jobs there and reads results back",
            fix=f"ask the bucket's owner for {GRANT_ROLE} on {name}, or set c.NBBurst.bucket to a bucket of yours",
        )
    return Check("bucket access", True, f"these credentials may create, read, list and delete objects in {name}")


def scope_checks(scopes: list[str]) -> list[Check]:
    """What the VMs' OAuth scopes allow: reading the bucket (else refused) and deleting themselves."""
    shown = ", ".join(s.removeprefix(_AUTH) for s in scopes) or "none"
    fix = f"c.NBBurst.scopes = '{CLOUD_PLATFORM}' (the default)"
    if not STORAGE_SCOPES & set(scopes):
        return [
            Check(
                "vm scopes",
                False,
                f"the VMs' scopes ({shown}) give no access to Cloud Storage: a VM could not read its job",
                fix=fix,
            )
        ]
    if not COMPUTE_SCOPES & set(scopes):
        return [
            Check(
                "vm scopes",
                False,
                f"the VMs' scopes ({shown}) have no Compute Engine scope: a VM cannot delete itself, it powers off "
                "and the client deletes it",
                warning=True,
                fix=fix,
            )
        ]
    return [Check("vm scopes", True, f"{shown}: the VMs may use the bucket and delete themselves")]


def service_account_access(bucket: Any, email: str) -> Check:
    """Whether the bucket's IAM policy lets the VMs' service account ``email`` read and write it (a warning when
    it does not say so: the account's roles on the project are not visible here)."""
    from google.api_core import exceptions as gexc

    name, member = f"gs://{bucket.name}", f"serviceAccount:{email}"
    fix = f"{grant_command(bucket.name, member)} (or `nbburst setup`)"
    try:
        policy = bucket.get_iam_policy(requested_policy_version=3, timeout=30)
    except gexc.GoogleAPICallError as exc:
        return Check(
            "vm service account",
            False,
            f"not checked: the IAM policy of {name} cannot be read ({getattr(exc, 'message', exc)}), so whether "
            f"{email} may use the bucket is unknown",
            warning=True,
            fix=fix,
        )
    granted: set[str] = set()
    via_project: set[str] = set()
    for binding in policy.bindings:
        allows = ROLE_OBJECT_PERMISSIONS.get(binding["role"], frozenset())
        members = set(binding["members"])
        if member in members:
            granted |= allows
        elif any(m.partition(":")[0] in ("projectEditor", "projectOwner") for m in members):
            via_project |= allows
    missing = [p for p in OBJECT_PERMISSIONS if p not in granted]
    if not missing:
        return Check("vm service account", True, f"{email} may read and write {name} (the bucket's IAM policy)")
    detail = f"the IAM policy of {name} does not grant {email} {', '.join(missing)}"
    if set(missing) <= via_project:
        detail += "; it grants them to the project's editors and owners, which this account is if it holds Editor"
    detail += (
        ". Its roles on the project are not visible to nbburst: if it has none there either, its VMs stop at "
        "boot with 'permission denied'"
    )
    return Check("vm service account", False, detail, warning=True, fix=fix)
