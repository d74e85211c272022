"""A local Secret Manager: the v1 REST API subset nbburst uses, as strict as Google documents it.

The real ``google.cloud.secretmanager_v1`` client reaches it with ``transport="rest"`` and
``client_options={"api_endpoint": emulator.endpoint}``; a VM's bootstrap reaches it with the standard library
(``$NBBURST_SECRETMANAGER_ENDPOINT``) and the access token of its metadata server. Methods (paths and bodies as
in the API's discovery document, ``secretmanager.v1.json``):

* ``secrets.create`` (``POST /v1/projects/P/secrets?secretId=ID``): the id must match ``[a-zA-Z0-9_-]{1,255}``,
  ``replication`` must name exactly one of ``automatic`` / ``userManaged``, labels follow the label rules; an
  existing id is 409 ``ALREADY_EXISTS``;
* ``secrets.get``, ``secrets.list`` (``filter`` on ``labels.KEY=VALUE`` terms, ``pageSize``/``pageToken``),
  ``secrets.delete`` (with ``etag``: 409 ``ABORTED`` when it is not the current one);
* ``secrets.versions.list``, ``secrets.addVersion`` (payload at most 64 KiB; a ``dataCrc32c`` that does not
  match the data is 400), ``secrets.versions.access`` (``latest`` or a number; a version that is not ``ENABLED`` is 400
  ``FAILED_PRECONDITION``);
* ``secrets.getIamPolicy`` (GET), ``secrets.setIamPolicy`` (a stale ``etag`` is 409 ``ABORTED``),
  ``secrets.testIamPermissions``.

Names in answers carry the project's number (``projects/123.../secrets/ID``), as Google's do; requests may name
the project by id or number. Bodies with fields the API does not have are refused (400), as Google's JSON
parser refuses them.

Who calls: a request with a bearer token minted by an emulated metadata server (:mod:`nbburst.testing.tokens`)
is its service account's; a request without one (the client's anonymous credentials) is :attr:`caller`'s, a
project owner by default. Each method needs the permission Google lists for it, held through the caller's roles
on the project (:attr:`project_roles`) or the secret's IAM policy: ``roles/viewer`` cannot read a payload,
``roles/secretmanager.secretAccessor`` on one secret reads that secret only. With :attr:`enabled` False every
request is 403 with reason ``SERVICE_DISABLED``, as when the API is not enabled in the project.

Eventual consistency, as Google documents it, is two switches a test turns on (both 0 by default, so that the
rest of the suite reads what it has just written):

* :attr:`SecretManagerEmulator.iam_delay`: seconds before a role a secret's ``setIamPolicy`` grants takes effect
  (403 until then). "Propagating IAM permissions is eventually consistent. This means granting or revoking access
  to secrets may not take effect immediately"
  (https://cloud.google.com/secret-manager/docs/reference/consistency); policy changes "typically propagate in
  2 minutes, but could potentially take 7 minutes or longer"
  (https://cloud.google.com/iam/docs/access-change-propagation).
* :attr:`SecretManagerEmulator.latest_lag`: seconds before a new version is what the alias ``latest`` names (an
  older version until then, 404 when there is none). "Adding a secret version and then immediately accessing that
  secret version by version number is a strongly consistent operation. Other operations within Secret Manager are
  eventually consistent" (the same consistency page): by number a version is readable at once.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from nbburst.testing import tokens
from nbburst.testing.compute import catalog as cat

__all__ = ["ROLES", "SecretManagerEmulator"]

_SECRETS = {f"secretmanager.secrets.{p}" for p in ("create", "delete", "get", "list", "update")}
_IAM = {"secretmanager.secrets.getIamPolicy", "secretmanager.secrets.setIamPolicy"}
_VERSIONS = {f"secretmanager.versions.{p}" for p in ("add", "destroy", "disable", "enable", "get", "list")}
_ACCESS = "secretmanager.versions.access"
#: Role -> the Secret Manager permissions it grants (Google's basic and predefined roles).
ROLES: dict[str, frozenset[str]] = {
    "roles/owner": frozenset(_SECRETS | _IAM | _VERSIONS | {_ACCESS}),
    "roles/editor": frozenset(_SECRETS | _VERSIONS | {_ACCESS}),
    "roles/viewer": frozenset({"secretmanager.secrets.get", "secretmanager.secrets.list"}),
    "roles/secretmanager.admin": frozenset(_SECRETS | _IAM | _VERSIONS | {_ACCESS}),
    "roles/secretmanager.secretAccessor": frozenset({_ACCESS}),
    "roles/secretmanager.secretVersionAdder": frozenset({"secretmanager.versions.add"}),
    "roles/secretmanager.secretVersionManager": frozenset(_VERSIONS),
    "roles/secretmanager.viewer": frozenset(
        {"secretmanager.secrets.get", "secretmanager.secrets.list"}
        | {"secretmanager.versions.get", "secretmanager.versions.list"}
    ),
}
DEFAULT_CALLER = "user:developer@example.com"
MAX_PAYLOAD = 64 * 1024
_SECRET_ID = re.compile(r"^[a-zA-Z0-9_-]{1,255}$")
_LABEL_KEY = re.compile(r"^[\w-]{1,63}$")  # lowercase letters first: checked apart
_MEMBER = re.compile(
    r"^(user|serviceAccount|group|domain|principal|principalSet):\S+$|^allUsers$|^allAuthenticatedUsers$"
)
_SECRET_FIELDS = {
    "replication",
    "labels",
    "annotations",
    "topics",
    "expireTime",
    "ttl",
    "etag",
    "rotation",
    "versionAliases",
    "versionDestroyTtl",
    "customerManagedEncryption",
    "tags",
    "name",
    "createTime",
}
_PATH = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/secrets(?:/(?P<secret>[^/:]+)"
    r"(?P<versions>/versions(?:/(?P<version>[^/:]+))?)?)?(?::(?P<verb>[A-Za-z]+))?$"
)


class _Error(Exception):
    """A google.rpc.Status answer."""

    def __init__(self, code: int, status: str, message: str, reason: str = ""):
        super().__init__(message)
        self.code, self.status, self.message, self.reason = code, status, message, reason

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.reason:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "googleapis.com",
                    "metadata": {"service": "secretmanager.googleapis.com"},
                }
            ]
        return {"error": error}


def _crc32c(data: bytes) -> int:
    import google_crc32c

    return google_crc32c.value(data)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 10**6:06d}Z"


class SecretManagerEmulator:
    """Secrets of one project on 127.0.0.1 (see the module's docstring)."""

    def __init__(
        self, project: str = "nbburst-test", *, port: int = 0, iam_delay: float = 0.0, latest_lag: float = 0.0
    ):
        self.project = project
        #: Seconds before a role granted on a secret takes effect (see the module's docstring).
        self.iam_delay = iam_delay
        #: Seconds before ``latest`` names a new version (see the module's docstring).
        self.latest_lag = latest_lag
        self.number = str(cat.project_number(project))
        self.caller = DEFAULT_CALLER
        #: member -> roles on the project (the caller is an owner; VMs' service accounts hold nothing there).
        self.project_roles: dict[str, set[str]] = {DEFAULT_CALLER: {"roles/owner"}}
        self.enabled = True
        self.requests: list[tuple[str, str, str]] = []  # (method, path, who)
        self._secrets: dict[str, dict[str, Any]] = {}  # secret id -> {"secret", "versions", "policy"}
        self._lock = threading.Lock()
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None

    # -- running ------------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def env(self) -> dict[str, str]:
        """Environment variables pointing nbburst (client and VMs) at this emulator."""
        return {"NBBURST_SECRETMANAGER_ENDPOINT": self.endpoint}

    def start(self) -> SecretManagerEmulator:
        httpd = ThreadingHTTPServer(("127.0.0.1", self._port), _Handler)
        httpd.daemon_threads = True
        httpd.emulator = self  # type: ignore[attr-defined]
        self._port = httpd.server_address[1]
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> SecretManagerEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests look at -------------------------------------------------------------------------
    def secret_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._secrets)

    def policy(self, secret_id: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._secrets[secret_id]["policy"])

    # -- the API ------------------------------------------------------------------------------------
    def handle(self, method: str, target: str, body: bytes, token: str | None) -> tuple[int, dict[str, Any]]:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            who = self._who(token)
            self.requests.append((method, url.path, who))
            if not self.enabled:
                raise _Error(
                    403,
                    "PERMISSION_DENIED",
                    f"Secret Manager API has not been used in project {self.number} before or it is disabled. "
                    "Enable it by visiting https://console.developers.google.com/apis/api/"
                    f"secretmanager.googleapis.com/overview?project={self.number} then retry.",
                    "SERVICE_DISABLED",
                )
            m = _PATH.match(url.path)
            if not m or m["project"] not in (self.project, self.number):
                raise _Error(404, "NOT_FOUND", f"Requested entity was not found: {url.path}")
            data = self._json(body) if method in ("POST", "PATCH") else {}
            with self._lock:
                if m["versions"] and not m["version"] and not m["verb"] and method == "GET":
                    return 200, self._versions(m["secret"], who)
                if m["versions"] and not m["version"]:
                    raise _Error(404, "NOT_FOUND", f"{method} {url.path}: no such method")
                return 200, self._route(method, m["secret"], m["version"], m["verb"], query, data, who)
        except _Error as exc:
            return exc.code, exc.body()

    def _who(self, token: str | None) -> str:
        if token is None:
            return self.caller
        email = tokens.holder(token)
        if email is None:
            raise _Error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
                "other valid authentication credential.",
            )
        return f"serviceAccount:{email}"

    @staticmethod
    def _json(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            raise _Error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.") from None
        if not isinstance(data, dict):
            raise _Error(400, "INVALID_ARGUMENT", "Invalid JSON payload received: not an object.")
        return data

    def _route(
        self, method: str, sid: str | None, version: str | None, verb: str | None, query: dict, data: dict, who: str
    ) -> dict[str, Any]:
        if sid is None and verb is None:
            if method == "POST":
                return self._create(query, data, who)
            if method == "GET":
                return self._list(query, who)
        elif sid is not None and version is None:
            route = {
                (None, "GET"): self._get,
                (None, "DELETE"): self._delete,
                ("addVersion", "POST"): self._add_version,
                ("getIamPolicy", "GET"): self._get_policy,
                ("setIamPolicy", "POST"): self._set_policy,
                ("testIamPermissions", "POST"): self._test_permissions,
            }.get((verb, method))
            if route is not None:
                return route(sid, query, data, who)
        elif sid is not None and version is not None and verb == "access" and method == "GET":
            return self._access(sid, version, who)
        raise _Error(404, "NOT_FOUND", f"{method} {sid or ''} {verb or ''}: no such method")

    # -- permissions --------------------------------------------------------------------------------
    def _held(self, who: str, sid: str | None) -> set[str]:
        roles = set(self.project_roles.get(who, set()))
        if sid is not None and sid in self._secrets:
            entry, now = self._secrets[sid], time.monotonic()
            roles |= {
                b["role"]
                for b in entry["policy"].get("bindings", [])
                if who in b["members"] and now - entry["granted"].get((b["role"], who), 0.0) >= self.iam_delay
            }
        return set().union(*(ROLES.get(r, frozenset()) for r in roles)) if roles else set()

    def _need(self, who: str, permission: str, sid: str | None, resource: str) -> None:
        if permission not in self._held(who, sid):
            raise _Error(
                403,
                "PERMISSION_DENIED",
                f"Permission '{permission}' denied for resource '{resource}' (or it may not exist).",
                "IAM_PERMISSION_DENIED",
            )

    def _name(self, sid: str) -> str:
        return f"projects/{self.number}/secrets/{sid}"

    def _found(self, sid: str, who: str, permission: str) -> dict[str, Any]:
        self._need(who, permission, sid, self._name(sid))
        if sid not in self._secrets:
            raise _Error(404, "NOT_FOUND", f"Secret [{self._name(sid)}] not found or has no versions.")
        return self._secrets[sid]

    # -- secrets ------------------------------------------------------------------------------------
    def _create(self, query: dict, data: dict, who: str) -> dict[str, Any]:
        sid = query.get("secretId", "")
        self._need(who, "secretmanager.secrets.create", None, f"projects/{self.project}")
        if not _SECRET_ID.match(sid):
            raise _Error(400, "INVALID_ARGUMENT", f"Secret id [{sid}] must match [a-zA-Z0-9_-]{{1,255}}.")
        unknown = sorted(set(data) - _SECRET_FIELDS)
        if unknown:
            raise _Error(400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{unknown[0]}".')
        replication = data.get("replication")
        if not isinstance(replication, dict) or len(set(replication) & {"automatic", "userManaged"}) != 1:
            raise _Error(400, "INVALID_ARGUMENT", "Secret.replication must set exactly one of automatic, userManaged.")
        labels = data.get("labels") or {}
        if len(labels) > 64 or any(
            not _LABEL_KEY.match(k) or not k[0].islower() or k != k.lower() or len(str(v)) > 63 or v != str(v).lower()
            for k, v in labels.items()
        ):
            raise _Error(400, "INVALID_ARGUMENT", f"Secret labels {labels} do not follow the label rules.")
        if sid in self._secrets:
            raise _Error(409, "ALREADY_EXISTS", f"Secret [{self._name(sid)}] already exists.")
        secret = {
            "name": self._name(sid),
            "replication": replication,
            "createTime": _now(),
            "labels": dict(labels),
            "etag": f'"{secrets.token_hex(8)}"',
        }
        # granted: (role, member) -> when setIamPolicy granted it (time.monotonic()), for iam_delay
        self._secrets[sid] = {"secret": secret, "versions": [], "policy": {"version": 1, "etag": "ACAB"}, "granted": {}}
        return copy.deepcopy(secret)

    def _get(self, sid: str, query: dict, data: dict, who: str) -> dict[str, Any]:
        return copy.deepcopy(self._found(sid, who, "secretmanager.secrets.get")["secret"])

    def _list(self, query: dict, who: str) -> dict[str, Any]:
        self._need(who, "secretmanager.secrets.list", None, f"projects/{self.project}")
        terms = []
        for term in filter(None, re.split(r"\s+AND\s+|\s+", query.get("filter", "").strip())):
            m = re.fullmatch(r"labels\.([\w-]+)=([\w-]*)", term)
            if not m:
                raise _Error(400, "INVALID_ARGUMENT", f"Invalid filter term [{term}] (this stand-in: labels.K=V).")
            terms.append((m[1], m[2]))
        chosen = [
            s["secret"]
            for _, s in sorted(self._secrets.items())
            if all(s["secret"]["labels"].get(k) == v for k, v in terms)
        ]
        size = int(query.get("pageSize") or 25000)
        if not 0 < size <= 25000:
            raise _Error(400, "INVALID_ARGUMENT", "page_size must be between 1 and 25000.")
        start = int(query.get("pageToken") or 0)
        page = chosen[start : start + size]
        out: dict[str, Any] = {"secrets": copy.deepcopy(page), "totalSize": len(chosen)}
        if start + size < len(chosen):
            out["nextPageToken"] = str(start + size)
        return out if page else {"totalSize": len(chosen)}

    def _delete(self, sid: str, query: dict, data: dict, who: str) -> dict[str, Any]:
        entry = self._found(sid, who, "secretmanager.secrets.delete")
        if query.get("etag") and query["etag"] != entry["secret"]["etag"]:
            raise _Error(409, "ABORTED", f"The etag {query['etag']} does not match the secret's.")
        del self._secrets[sid]
        return {}

    # -- versions -----------------------------------------------------------------------------------
    def _add_version(self, sid: str, query: dict, data: dict, who: str) -> dict[str, Any]:
        entry = self._found(sid, who, "secretmanager.versions.add")
        unknown = sorted(set(data) - {"payload", "parent"})
        payload = data.get("payload")
        if unknown or not isinstance(payload, dict) or set(payload) - {"data", "dataCrc32c"}:
            raise _Error(400, "INVALID_ARGUMENT", "Invalid JSON payload received: addVersion takes {payload}.")
        try:
            raw = base64.b64decode(payload.get("data", ""), validate=True)
        except ValueError:
            raise _Error(400, "INVALID_ARGUMENT", "payload.data is not base64.") from None
        if not raw or len(raw) > MAX_PAYLOAD:
            raise _Error(400, "INVALID_ARGUMENT", f"Secret payload must be 1 to {MAX_PAYLOAD} bytes.")
        crc = _crc32c(raw)
        if "dataCrc32c" in payload and int(payload["dataCrc32c"]) != crc:
            raise _Error(400, "INVALID_ARGUMENT", "Checksum mismatch: payload.data_crc32c does not match the data.")
        number = len(entry["versions"]) + 1
        version = {"name": f"{self._name(sid)}/versions/{number}", "createTime": _now(), "state": "ENABLED"}
        entry["versions"].append({**version, "data": raw, "crc": crc, "added": time.monotonic()})
        return {**version, "replicationStatus": {"automatic": {}}, "clientSpecifiedPayloadChecksum": True}

    def _versions(self, sid: str, who: str) -> dict[str, Any]:
        entry = self._found(sid, who, "secretmanager.versions.list")
        listed = [{k: v[k] for k in ("name", "createTime", "state")} for v in reversed(entry["versions"])]
        return {"versions": listed, "totalSize": len(listed)} if listed else {}

    def _access(self, sid: str, version: str, who: str) -> dict[str, Any]:
        resource = f"{self._name(sid)}/versions/{version}"
        self._need(who, _ACCESS, sid, resource)
        entry = self._secrets.get(sid)
        versions = entry["versions"] if entry else []
        if version == "latest":  # an alias: eventually consistent (latest_lag), unlike a number
            settled = time.monotonic() - self.latest_lag
            found = next((v for v in reversed(versions) if v["state"] == "ENABLED" and v["added"] <= settled), None)
        elif version.isdigit() and 0 < int(version) <= len(versions):
            found = versions[int(version) - 1]
        else:
            found = None
        if found is None:
            raise _Error(404, "NOT_FOUND", f"Secret Version [{resource}] not found.")
        if found["state"] != "ENABLED":
            raise _Error(400, "FAILED_PRECONDITION", f"Secret Version [{found['name']}] is in {found['state']} state.")
        data = {"data": base64.b64encode(found["data"]).decode(), "dataCrc32c": str(found["crc"])}
        return {"name": found["name"], "payload": data}

    # -- IAM ----------------------------------------------------------------------------------------
    def _get_policy(self, sid: str, query: dict, data: dict, who: str) -> dict[str, Any]:
        return copy.deepcopy(self._found(sid, who, "secretmanager.secrets.getIamPolicy")["policy"])

    def _set_policy(self, sid: str, query: dict, data: dict, who: str) -> dict[str, Any]:
        entry = self._found(sid, who, "secretmanager.secrets.setIamPolicy")
        policy = data.get("policy")
        if set(data) - {"policy", "updateMask"} or not isinstance(policy, dict):
            raise _Error(400, "INVALID_ARGUMENT", "Invalid JSON payload received: setIamPolicy takes {policy}.")
        if policy.get("etag") and policy["etag"] != entry["policy"]["etag"]:
            raise _Error(
                409, "ABORTED", "There were concurrent policy changes. Please retry the whole read-modify-write."
            )
        bindings = policy.get("bindings") or []
        for binding in bindings:
            if set(binding) - {"role", "members", "condition"} or not str(binding.get("role", "")).startswith("roles/"):
                raise _Error(400, "INVALID_ARGUMENT", f"Invalid binding {binding}.")
            bad = [m for m in binding.get("members", []) if not _MEMBER.match(m)]
            if bad or not binding.get("members"):
                raise _Error(400, "INVALID_ARGUMENT", f"Invalid member {bad[0] if bad else '(none)'} in {binding}.")
            if binding["role"] not in ROLES:
                raise _Error(400, "INVALID_ARGUMENT", f"Role {binding['role']} is not supported for this resource.")
        stored = {"version": int(policy.get("version") or 1), "etag": base64.b64encode(secrets.token_bytes(6)).decode()}
        if bindings:
            stored["bindings"] = [{"role": b["role"], "members": sorted(set(b["members"]))} for b in bindings]
        now, before = time.monotonic(), entry["granted"]
        pairs = {(b["role"], m) for b in stored.get("bindings", []) for m in b["members"]}
        entry["granted"] = {pair: before.get(pair, now) for pair in pairs}  # a grant kept keeps its age
        entry["policy"] = stored
        return copy.deepcopy(stored)

    def _test_permissions(self, sid: str, query: dict, data: dict, who: str) -> dict[str, Any]:
        if sid not in self._secrets:
            raise _Error(404, "NOT_FOUND", f"Secret [{self._name(sid)}] not found.")
        asked = data.get("permissions") or []
        held = self._held(who, sid)
        granted = [p for p in asked if p in held]
        return {"permissions": granted} if granted else {}


class _Handler(BaseHTTPRequestHandler):
    server_version = "ESF"
    sys_version = ""

    def log_message(self, *args: object) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
        emulator: SecretManagerEmulator = self.server.emulator  # type: ignore[attr-defined]
        status, answer = emulator.handle(self.command, self.path, body, token)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = _serve
