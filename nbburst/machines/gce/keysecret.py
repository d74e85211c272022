"""The job key on its way to the VM: a Secret Manager secret only the VM's service account may read.

The per-job key signs everything the job writes to the bucket. Instance metadata is readable by anyone with
``compute.instances.get`` (every project Viewer), so the key does not go there: the client stores it as the
secret ``nbburst-key-<job id>`` (labels ``nbburst=1``, ``nbburst-job``), whose IAM policy grants
``roles/secretmanager.secretAccessor`` to the VM's service account and nobody else; the VM's metadata names the
secret's version by number (``nbburst-key-secret``: ``projects/P/secrets/ID/versions/N``), and the VM's bootstrap
reads it with its metadata-server token (``nbburst/machines/gce/vm/vmlib.py``). By number, since Secret Manager is
eventually consistent: a version read by number right after it was added is strongly consistent, ``latest`` is
not (https://cloud.google.com/secret-manager/docs/reference/consistency); and the VM waits out the minutes the
grant to its account may take to propagate (https://cloud.google.com/iam/docs/access-change-propagation).
The secret is deleted when the client sees the job end, or its launch fail (:meth:`KeySecrets.delete`, from
``GCEMachines.cleanup``) or by ``nbburst gc`` once its job has ended or is
unknown (:meth:`KeySecrets.held`).

Who can read the key, then: the VM's service account (the job's VMs, and the Store's watcher VM, which runs as
the same account and reads the keys of the jobs it relaunches: :meth:`KeySecrets.read`), and principals with
``secretmanager.versions.access`` on the project (Owner, Editor, Secret Manager Admin/Accessor), who could run
code as the VM's account anyway.

The caller needs the Secret Manager API enabled and ``roles/secretmanager.admin`` on the project (create, set
the IAM policy, add a version, delete); :meth:`KeySecrets.check` says so before a launch and in ``nbburst doctor``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import BurstError
from ..base import Check
from .api import label

SECRET_PREFIX = "nbburst-key-"
#: The instance metadata attribute that names the job key's secret version (``projects/P/secrets/ID/versions/N``).
METADATA_KEY = "nbburst-key-secret"
ACCESSOR = "roles/secretmanager.secretAccessor"
ENABLE = "gcloud services enable secretmanager.googleapis.com"
GRANT = "gcloud projects add-iam-policy-binding {project} --member=user:YOU --role=roles/secretmanager.admin"


def secret_id(job_id: str) -> str:
    """The id of the secret holding job ``job_id``'s key."""
    return SECRET_PREFIX + job_id


class KeySecrets:
    """Job keys as Secret Manager secrets of one project (an emulator at ``endpoint``, reached with the
    credentials ``credentials()`` gives; Google's API otherwise)."""

    def __init__(
        self, endpoint: str, project: Callable[[], str], credentials: Callable[[], Any], authenticated: bool = False
    ):
        """``authenticated``: send ``credentials()`` to an emulator too (a VM's token, whose service account the
        emulator checks), instead of anonymous credentials."""
        self.endpoint = (endpoint or "").rstrip("/")
        self.authenticated = authenticated
        self._project = project
        self._credentials = credentials
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The SecretManagerServiceClient (REST), made once."""
        if self._client is None:
            from google.cloud import secretmanager_v1

            kwargs: dict[str, Any] = {"transport": "rest"}
            if self.endpoint:
                from google.auth.credentials import AnonymousCredentials

                kwargs["client_options"] = {"api_endpoint": self.endpoint}
                kwargs["credentials"] = self._credentials() if self.authenticated else AnonymousCredentials()
            else:
                kwargs["credentials"] = self._credentials()
            self._client = secretmanager_v1.SecretManagerServiceClient(**kwargs)
        return self._client

    def name(self, job_id: str) -> str:
        """The secret's resource name, ``projects/P/secrets/nbburst-key-JOB``."""
        return f"projects/{self._project()}/secrets/{secret_id(job_id)}"

    def put(self, job_id: str, key: bytes, service_account: str, owner: str = "") -> str:
        """Store ``key`` for ``job_id``, readable by ``service_account`` only; the name of the secret's version that
        holds it (``projects/P/secrets/ID/versions/N``). Made once per job: a relaunch finds it (and adds the key
        only if an interrupted first launch left it without)."""
        from google.api_core import exceptions as gexc

        name = self.name(job_id)
        what = f"storing the job key in Secret Manager ({name})"
        try:
            try:
                self.client.create_secret(
                    request={
                        "parent": f"projects/{self._project()}",
                        "secret_id": secret_id(job_id),
                        "secret": {
                            "replication": {"automatic": {}},
                            "labels": {
                                "nbburst": "1",
                                "nbburst-job": label(job_id),
                                "nbburst-owner": label(owner),
                            },
                        },
                    },
                    timeout=30,
                )
                fresh = True
            except gexc.Conflict:
                fresh = False  # an earlier launch of this job made it
            self._grant(name, f"serviceAccount:{service_account}")
            versions = [] if fresh else list(self.client.list_secret_versions(request={"parent": name}, timeout=30))
            enabled = [v.name for v in versions if v.state == v.State.ENABLED]
            if enabled:
                return max(enabled, key=lambda v: int(v.rsplit("/", 1)[1]))
            import google_crc32c

            payload = {"data": key.hex().encode(), "data_crc32c": google_crc32c.value(key.hex().encode())}
            return self.client.add_secret_version(request={"parent": name, "payload": payload}, timeout=30).name
        except (gexc.Forbidden, gexc.PermissionDenied) as exc:  # the watcher VM relaunching: it may read, not manage
            found = self._access(job_id)
            if found is None or found[1] != key:
                raise BurstError(f"{what}: {_explain(exc, self._project())}") from None
            return found[0]
        except gexc.GoogleAPICallError as exc:
            raise BurstError(f"{what}: {_explain(exc, self._project())}") from None

    def read(self, job_id: str) -> bytes | None:
        """Job ``job_id``'s key, as the VM's service account reads it (the watcher VM, see
        :mod:`~nbburst.machines.gce.watcher`); None when these credentials may not read it (yet: the watcher asks
        again) or it is gone."""
        found = self._access(job_id)
        return None if found is None else found[1]

    def _access(self, job_id: str) -> tuple[str, bytes] | None:
        """(the name of the version ``latest`` names, the key it holds), None when it cannot be read."""
        from google.api_core import exceptions as gexc

        try:
            found = self.client.access_secret_version(
                request={"name": self.name(job_id) + "/versions/latest"}, timeout=30
            )
            return found.name, bytes.fromhex(found.payload.data.decode())
        except (gexc.Forbidden, gexc.PermissionDenied, gexc.NotFound, gexc.BadRequest, ValueError):
            return None

    def _grant(self, name: str, member: str) -> None:
        from google.api_core import exceptions as gexc

        for _ in range(3):
            policy = self.client.get_iam_policy(request={"resource": name}, timeout=30)
            if (
                any(b.role == ACCESSOR and list(b.members) == [member] for b in policy.bindings)
                and len(policy.bindings) == 1
            ):
                return
            del policy.bindings[:]
            policy.bindings.add(role=ACCESSOR, members=[member])
            try:
                self.client.set_iam_policy(request={"resource": name, "policy": policy}, timeout=30)
                return
            except gexc.Conflict:  # changed meanwhile (etag): read it again
                continue
        raise BurstError(f"the IAM policy of {name} kept changing; try again")

    def delete(self, job_id: str) -> None:
        """Delete job ``job_id``'s key secret (nothing when it is gone)."""
        from google.api_core import exceptions as gexc

        try:
            self.client.delete_secret(request={"name": self.name(job_id)}, timeout=30)
        except gexc.NotFound:
            return

    def held(self) -> list[tuple[str, str]]:
        """(job id, owner label) of every job key secret of the project."""
        found = self.client.list_secrets(
            request={"parent": f"projects/{self._project()}", "filter": "labels.nbburst=1"}, timeout=30
        )
        out = []
        for secret in found:
            sid = secret.name.rsplit("/", 1)[-1]
            if sid.startswith(SECRET_PREFIX):
                out.append((sid[len(SECRET_PREFIX) :], secret.labels.get("nbburst-owner", "")))
        return sorted(out)

    def check(self) -> Check:
        """Whether jobs can hand their keys to VMs: the API is enabled and these credentials may list secrets
        (they need roles/secretmanager.admin to make them)."""
        from google.api_core import exceptions as gexc

        try:
            self.client.list_secrets(request={"parent": f"projects/{self._project()}", "page_size": 1}, timeout=30)
        except gexc.GoogleAPICallError as exc:
            fix = ENABLE if getattr(exc, "reason", "") == "SERVICE_DISABLED" else GRANT.format(project=self._project())
            return Check("secret manager", False, _explain(exc, self._project()), fix=fix)
        return Check(
            "secret manager",
            True,
            "enabled, and these credentials may list secrets (making the secret that hands each job's key to its "
            "VM alone needs roles/secretmanager.admin)",
        )


def _explain(exc: Any, project: str) -> str:
    message = getattr(exc, "message", "") or str(exc)
    if getattr(exc, "reason", "") == "SERVICE_DISABLED":
        return f"the Secret Manager API is not enabled in project {project} ({ENABLE})"
    if getattr(exc, "code", 0) == 403:
        return (
            f"{message} — the job key goes to the VM through Secret Manager: these credentials need "
            f"roles/secretmanager.admin on project {project}"
        )
    return message
