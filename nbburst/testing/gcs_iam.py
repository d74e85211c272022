"""Bucket IAM and bucket settings, which fake-gcs-server does not keep, kept here for the proxy in front of it.

fake-gcs-server (v1.54) answers 404 to the bucket IAM methods and drops a bucket's ``iamConfiguration``
(uniform bucket-level access, public access prevention), ``lifecycle`` and ``labels``. :class:`BucketIam`
holds them, so the real google-cloud-storage client sees what Cloud Storage would answer:

* ``buckets.getIamPolicy`` / ``setIamPolicy`` (``GET``/``PUT /storage/v1/b/B/iam``): a bucket starts with
  Cloud Storage's default policy (the legacy bucket and object roles for the project's owners, editors and
  viewers); reading it needs ``storage.buckets.getIamPolicy``, changing it ``storage.buckets.setIamPolicy``
  and the current ``etag`` when one is given (else 412);
* ``buckets.testIamPermissions`` (``GET /storage/v1/b/B/iam/testPermissions``): the permissions asked for that
  the caller holds, from the roles the bucket's policy grants it (directly, or through the project's
  convenience members ``projectOwner:P``...) and the roles it holds on the project (:attr:`project_roles`);
* bucket inserts and patches keep those three settings, and every bucket read returns them.

The caller is :attr:`BucketIam.caller` (every request: the clients here use anonymous credentials), by
default an owner of the project. The answers cover IAM requests only: object reads and writes are never
refused for want of a permission, except while a grant propagates (below). Roles and their permissions are
Cloud Storage's predefined, legacy and basic roles, restricted to bucket and object permissions.

Access changes are eventually consistent: "Granting access to or revoking access from resources" is among
Cloud Storage's eventually consistent operations, which "typically take about a minute to take effect"
(https://cloud.google.com/storage/docs/consistency). With :attr:`BucketIam.propagation_delay` set (0 by default, a
switch a test turns on), a request about a bucket's objects made with the access token of an emulated VM
(:mod:`nbburst.testing.tokens`) whose service account holds the permission it needs only through a role granted
less than that many seconds ago is refused (:meth:`BucketIam.propagating`), as a VM that boots right after
``nbburst setup`` granted its account the bucket would be.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from nbburst.testing import tokens

__all__ = ["BucketIam", "Refused"]

_BUCKET = {f"storage.buckets.{p}" for p in ("create", "delete", "get", "list", "update")}
_BUCKET_IAM = {"storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy"}
_OBJECT_RW = {f"storage.objects.{p}" for p in ("create", "delete", "get", "list", "update")}
_OBJECT_IAM = {"storage.objects.getIamPolicy", "storage.objects.setIamPolicy"}
_LEGACY_BUCKET_WRITER = {"storage.buckets.get"} | {f"storage.objects.{p}" for p in ("create", "delete", "list")}

#: Role -> the bucket and object permissions it grants (Cloud Storage's IAM roles, as Google documents them).
ROLES: dict[str, frozenset[str]] = {
    "roles/owner": frozenset(_BUCKET | _BUCKET_IAM | _OBJECT_RW | _OBJECT_IAM),
    "roles/editor": frozenset(_BUCKET | _OBJECT_RW),
    "roles/viewer": frozenset({"storage.buckets.get", "storage.buckets.list"}),
    "roles/storage.admin": frozenset(_BUCKET | _BUCKET_IAM | _OBJECT_RW | _OBJECT_IAM),
    "roles/storage.objectAdmin": frozenset(_OBJECT_RW | _OBJECT_IAM | {"storage.buckets.get"}),
    "roles/storage.objectUser": frozenset(_OBJECT_RW),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.legacyBucketOwner": frozenset(_LEGACY_BUCKET_WRITER | {"storage.buckets.update"} | _BUCKET_IAM),
    "roles/storage.legacyBucketWriter": frozenset(_LEGACY_BUCKET_WRITER),
    "roles/storage.legacyBucketReader": frozenset({"storage.buckets.get", "storage.objects.list"}),
    "roles/storage.legacyObjectOwner": frozenset({"storage.objects.get", "storage.objects.update"} | _OBJECT_IAM),
    "roles/storage.legacyObjectReader": frozenset({"storage.objects.get"}),
}
#: The project's convenience members a bucket policy may name, and the project role each stands for.
_CONVENIENCE = {"projectOwner": "roles/owner", "projectEditor": "roles/editor", "projectViewer": "roles/viewer"}
#: Bucket fields fake-gcs-server drops, kept here.
KEPT_FIELDS = ("iamConfiguration", "lifecycle", "labels")
DEFAULT_CALLER = "user:developer@example.com"
_BUCKETS_PATH = "/storage/v1/b"
_BUCKET_PATH = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)$")
_IAM_PATH = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/iam(?P<test>/testPermissions)?$")
_OBJECTS_PATH = re.compile(r"^(?:/upload|/download)?/storage/v1/b/(?P<bucket>[^/]+)/o(?P<one>/.+)?$")
#: Sends a request (method, target, body) to fake-gcs-server: its (status, body).
Forward = Callable[[str, str, bytes], tuple[int, bytes]]


class Refused(Exception):
    """An answer with an error status: Cloud Storage's JSON error shape."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def payload(self) -> dict[str, Any]:
        errors = [{"message": self.message, "domain": "global", "reason": self.reason}]
        return {"error": {"code": self.code, "message": self.message, "errors": errors}}


def default_policy(project: str) -> list[dict[str, Any]]:
    """The bindings Cloud Storage gives a new bucket of ``project``."""
    owners = [f"projectEditor:{project}", f"projectOwner:{project}"]
    readers = [f"projectViewer:{project}"]
    return [
        {"role": "roles/storage.legacyBucketOwner", "members": owners},
        {"role": "roles/storage.legacyBucketReader", "members": readers},
        {"role": "roles/storage.legacyObjectOwner", "members": owners},
        {"role": "roles/storage.legacyObjectReader", "members": readers},
    ]


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    """A PATCH of JSON: objects merge, anything else (lists too) replaces, null deletes."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _iam_configuration(given: dict[str, Any]) -> dict[str, Any]:
    """``iamConfiguration`` as Cloud Storage answers it: both spellings of uniform bucket-level access and a
    public access prevention of ``inherited`` unless one was set."""
    ubla = bool((given.get("uniformBucketLevelAccess") or given.get("bucketPolicyOnly") or {}).get("enabled"))
    return {
        "bucketPolicyOnly": {"enabled": ubla},
        "uniformBucketLevelAccess": {"enabled": ubla},
        "publicAccessPrevention": given.get("publicAccessPrevention") or "inherited",
    }


class _Bucket:
    def __init__(self, project: str):
        self.project = project
        self.fields: dict[str, Any] = {"iamConfiguration": _iam_configuration({})}
        self.bindings = default_policy(project)
        self.version = 1
        self.serial = 0  # changes of the policy: its etag
        self.granted: dict[tuple[str, str], float] = {}  # (role, member) -> when it was granted (time.monotonic())

    def regranted(self, before: list[dict[str, Any]]) -> None:
        """Stamp the (role, member) pairs of :attr:`bindings` that ``before`` did not have with the time now."""
        old = {(b["role"], m) for b in before for m in b.get("members", ())}
        now = time.monotonic()
        for binding in self.bindings:
            for member in binding.get("members", ()):
                if (binding["role"], member) not in old:
                    self.granted[(binding["role"], member)] = now


class BucketIam:
    """IAM policies and kept settings of the emulated buckets, and who is asking (see the module docstring)."""

    def __init__(self) -> None:
        self.caller = DEFAULT_CALLER
        #: Seconds before a role granted on a bucket takes effect for an emulated VM's objects requests (0: at once).
        self.propagation_delay = 0.0
        #: Member -> the roles it holds on the project (inherited by every bucket).
        self.project_roles: dict[str, set[str]] = {DEFAULT_CALLER: {"roles/owner"}}
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def _bucket(self, name: str, project: str = "test") -> _Bucket:
        if name not in self._buckets:
            self._buckets[name] = _Bucket(project)
        return self._buckets[name]

    # -- requests ---------------------------------------------------------------------------------------
    def answer(self, method: str, target: str, body: bytes, forward: Forward) -> tuple[int, bytes] | None:
        """The answer (status, JSON body) to a request about bucket IAM or a bucket's resource, passing on to
        fake-gcs-server what it can do; None for any other request."""
        url = urlsplit(target)
        query = parse_qs(url.query, keep_blank_values=True)
        iam = _IAM_PATH.match(url.path)
        if iam:
            return self._iam_request(method, unquote(iam["bucket"]), bool(iam["test"]), query, body, forward)
        bucket = _BUCKET_PATH.match(url.path)
        if not (url.path == _BUCKETS_PATH and method in ("GET", "POST")) and not (
            bucket and method in ("GET", "PATCH", "PUT", "DELETE")
        ):
            return None
        status, answered = forward(method, target, body)
        if status not in (200, 204) or method == "DELETE":
            if bucket and method == "DELETE" and status in (200, 204):
                self.deleted(unquote(bucket["bucket"]))
            return status, answered
        data = json.loads(answered)
        if not bucket and method == "GET":  # buckets.list
            return 200, json.dumps({**data, "items": [self.decorate(b) for b in data.get("items", [])]}).encode()
        if not bucket:  # buckets.insert
            self.created(data["name"], query.get("project", ["test"])[-1], json.loads(body or b"{}"))
        elif method in ("PATCH", "PUT"):
            self.patched(unquote(bucket["bucket"]), json.loads(body or b"{}"))
        return 200, json.dumps(self.decorate(data)).encode()

    def _iam_request(
        self, method: str, bucket: str, test: bool, query: dict[str, list[str]], body: bytes, forward: Forward
    ) -> tuple[int, bytes]:
        status, answered = forward("GET", f"{_BUCKETS_PATH}/{quote(bucket, safe='')}", b"")
        if status != 200:
            return status, answered  # no such bucket
        try:
            if test and method == "GET":
                granted = self.test_permissions(bucket, query.get("permissions", []))
                data: dict[str, Any] = {"kind": "storage#testIamPermissionsResponse", "permissions": granted}
            elif not test and method == "GET":
                data = self.policy(bucket, int(query.get("optionsRequestedPolicyVersion", ["1"])[-1] or 1))
            elif not test and method == "PUT":
                data = self.set_policy(bucket, json.loads(body or b"{}"))
            else:
                raise Refused(
                    405, "methodNotAllowed", f"{method} is not allowed on {'testPermissions' if test else 'iam'}"
                )
        except Refused as exc:
            return exc.code, json.dumps(exc.payload()).encode()
        return 200, json.dumps(data).encode()

    # -- bucket settings ---------------------------------------------------------------------------
    def created(self, name: str, project: str, body: dict[str, Any]) -> None:
        """A bucket was inserted with ``body``: keep the settings fake-gcs-server drops."""
        with self._lock:
            bucket = self._buckets[name] = _Bucket(project)
            self._keep(bucket, body)

    def patched(self, name: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._keep(self._bucket(name), body)

    def deleted(self, name: str) -> None:
        with self._lock:
            self._buckets.pop(name, None)

    @staticmethod
    def _keep(bucket: _Bucket, body: dict[str, Any]) -> None:
        _merge(bucket.fields, {k: body[k] for k in KEPT_FIELDS if k in body})
        bucket.fields["iamConfiguration"] = _iam_configuration(bucket.fields.get("iamConfiguration") or {})

    def decorate(self, resource: dict[str, Any]) -> dict[str, Any]:
        """A bucket resource as fake-gcs-server answered it, with the kept settings."""
        with self._lock:
            bucket = self._bucket(resource.get("name", ""))
            return {**resource, **copy.deepcopy(bucket.fields)}

    # -- IAM ------------------------------------------------------------------------------------------
    def grant(self, name: str, member: str, role: str) -> None:
        """Add ``member`` to the ``role`` binding of bucket ``name``'s policy (a test's setup; no permission asked)."""
        with self._lock:
            bucket = self._bucket(name)
            bucket.granted[(role, member)] = time.monotonic()
            for binding in bucket.bindings:
                if binding["role"] == role:
                    binding["members"] = sorted({*binding["members"], member})
                    break
            else:
                bucket.bindings.append({"role": role, "members": [member]})
            bucket.serial += 1

    def permissions_of(self, member: str, name: str, granted_before: float | None = None) -> set[str]:
        """The bucket and object permissions ``member`` holds on bucket ``name`` (through roles of the bucket
        granted before ``granted_before``, a time.monotonic(), when given)."""
        with self._lock:
            bucket = self._bucket(name)
            held = set(self.project_roles.get(member, ()))
            for binding in bucket.bindings:
                for who in binding.get("members", ()):
                    kind, _, project = who.partition(":")
                    if granted_before is not None and bucket.granted.get((binding["role"], who), 0.0) > granted_before:
                        continue
                    if who == member or (_CONVENIENCE.get(kind) in held and project == bucket.project):
                        held.add(binding["role"])
        return {permission for role in held for permission in ROLES.get(role, ())}

    def propagating(self, method: str, target: str, authorization: str) -> Refused | None:
        """The 403 of a request about a bucket's objects, made with an emulated VM's token, whose permission comes
        from a grant that has not propagated yet (:attr:`propagation_delay`); None for any other request."""
        found = _OBJECTS_PATH.match(urlsplit(target).path)
        email = tokens.holder(authorization.removeprefix("Bearer ").strip()) if authorization else None
        if not self.propagation_delay or found is None or email is None:
            return None
        member, name = f"serviceAccount:{email}", unquote(found["bucket"])
        verb = {"GET": "get" if found["one"] else "list", "HEAD": "get", "DELETE": "delete"}.get(method, "create")
        permission = f"storage.objects.{verb}"
        settled = self.permissions_of(member, name, time.monotonic() - self.propagation_delay)
        if permission in settled or permission not in self.permissions_of(member, name):
            return None
        return Refused(
            403, "forbidden", f"{email} does not have {permission} access to the Google Cloud Storage object."
        )

    def test_permissions(self, name: str, asked: list[str]) -> list[str]:
        """``buckets.testIamPermissions``: the asked permissions the caller holds."""
        for permission in asked:
            if not permission.startswith("storage."):
                raise Refused(400, "invalid", f"Permission '{permission}' is not valid for this resource.")
        held = self.permissions_of(self.caller, name)
        return [p for p in asked if p in held]

    def _require(self, name: str, permission: str) -> None:
        if permission not in self.permissions_of(self.caller, name):
            raise Refused(
                403, "forbidden", f"{self.caller.partition(':')[2]} does not have {permission} access to bucket {name}."
            )

    def policy(self, name: str, requested_version: int = 1) -> dict[str, Any]:
        """``buckets.getIamPolicy``."""
        self._require(name, "storage.buckets.getIamPolicy")
        with self._lock:
            bucket = self._bucket(name)
            return {
                "kind": "storage#policy",
                "resourceId": f"projects/_/buckets/{name}",
                "version": max(bucket.version, min(requested_version, 3)),
                "etag": self._etag(bucket),
                "bindings": copy.deepcopy(bucket.bindings),
            }

    def set_policy(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``buckets.setIamPolicy``: replaces the bindings (412 when ``etag`` is not the current one)."""
        self._require(name, "storage.buckets.setIamPolicy")
        with self._lock:
            bucket = self._bucket(name)
            if body.get("etag") and body["etag"] != self._etag(bucket):
                raise Refused(412, "conditionNotMet", "The etag of the policy does not match the current policy.")
            for binding in body.get("bindings") or []:
                if not str(binding.get("role", "")).startswith(("roles/", "projects/", "organizations/")):
                    raise Refused(400, "invalid", f"Role {binding.get('role')} is not a valid role.")
            before = bucket.bindings
            bucket.bindings = [
                {"role": b["role"], "members": sorted(set(b.get("members") or []))}
                for b in body.get("bindings") or []
                if b.get("members")
            ]
            bucket.regranted(before)
            bucket.version = int(body.get("version") or 1)
            bucket.serial += 1
        return self.policy(name, bucket.version)

    @staticmethod
    def _etag(bucket: _Bucket) -> str:
        return base64.b64encode(f"CA{bucket.serial}".encode()).decode()
