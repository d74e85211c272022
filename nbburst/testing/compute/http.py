"""HTTP front of the Compute emulator: `/compute/v1/...` as the real REST clients call it, the Cloud
Billing Catalog stand-in (`/v1/services/{service}/skus`, :mod:`nbburst.testing.compute.billing`), and the
`/emulator/...` test controls for other processes.

Control endpoints (JSON bodies, all optional fields):
    GET  /emulator/info                                  project, zone, endpoint, graces
    GET  /emulator/instances                             {"instances": [state and process info]}
    POST /emulator/projects/P/zones/Z/instances/N/preempt      {"grace": 1.0, "wait": false}
    POST /emulator/projects/P/zones/Z/instances/N/maintenance  {"wait": false}
    POST /emulator/projects/P/zones/Z/instances/N/poweroff     {"reboot": false, "boot": 3}
    POST /emulator/zones/Z/capacity                      {"available": false, "machineTypes": ["n2-"],
                                                          "onInsert": false}
    POST /emulator/services                              {"name": "compute.googleapis.com", "enabled": false}
    POST /emulator/org-policies                          {"constraint": "compute.vmExternalIpAccess",
                                                          "allowed": [...], "enforced": true}
    POST /emulator/quotas                                {"metric": "CPUS", "limit": 8, "region": ...}
    POST /emulator/images                                {"project", "name", "family", "diskSizeGb"}

Every request is kept in the emulator's ``request_log`` (method, path, query, JSON body and the
``x-goog-api-client`` header of Google's client libraries) and, when $NBBURST_COMPUTE_REQUEST_LOG
names a file, appended to it as a line of JSON, so :mod:`nbburst.testing.discovery` can check
what clients sent against Google's description of the API.
"""

from __future__ import annotations

import json
import logging
import os
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from nbburst.testing.compute import catalog as cat
from nbburst.testing.compute.filter import FilterError, compile_filter
from nbburst.testing.compute.resources import ComputeError

log = logging.getLogger("nbburst.testing")

_ROUTES: list[tuple[str, re.Pattern, object]] = []
_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_Z = _P + r"/zones/(?P<zone>[^/]+)"
_I = _Z + r"/instances/(?P<name>[^/]+)"
_E = r"/emulator/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"


def route(method: str, pattern: str):
    def register(fn):
        _ROUTES.append((method, re.compile(pattern + "$"), fn))
        return fn

    return register


def _int(query: dict, key: str, default: int) -> int:
    try:
        return int(query.get(key, default))
    except ValueError:
        raise ComputeError(400, "invalid", f"Invalid value for field '{key}': '{query[key]}'.") from None


def _list(kind: str, items: list[dict], query: dict, self_link: str) -> dict:
    try:
        pred = compile_filter(query.get("filter"))
    except FilterError as e:
        raise ComputeError(400, "invalid", str(e)) from None
    items = [i for i in items if pred(i)]
    order = query.get("orderBy", "").strip()
    if order:
        field, _, direction = order.partition(" ")
        items.sort(key=lambda i: str(i.get(field, "")), reverse=direction.strip().lower() == "desc")
    size = max(1, min(_int(query, "maxResults", 500), 500))
    offset = _int(query, "pageToken", 0) if query.get("pageToken") else 0
    out: dict = {"kind": kind, "id": self_link.removeprefix(cat.API_ROOT), "selfLink": self_link}
    page = items[offset : offset + size]
    if page:
        out["items"] = page
    if offset + size < len(items):
        out["nextPageToken"] = str(offset + size)
    return out


# ---- Compute API ----------------------------------------------------------------------------------
@route("GET", _P)
def _project(emu, a, q, b):
    return emu.api_project(a["project"])


@route("GET", _P + r"/regions")
def _regions(emu, a, q, b):
    items = [emu.api_region(a["project"], r) for r in cat.REGION_ZONES]
    return _list("compute#regionList", items, q, cat.link(a["project"], "regions"))


@route("GET", _P + r"/regions/(?P<region>[^/]+)")
def _region(emu, a, q, b):
    return emu.api_region(a["project"], a["region"])


@route("GET", _P + r"/zones")
def _zones(emu, a, q, b):
    items = [cat.zone_json(a["project"], z) for z in cat.ZONE_REGION]
    return _list("compute#zoneList", items, q, cat.link(a["project"], "zones"))


@route("GET", _P + r"/global/networks/(?P<network>[^/]+)")
def _network(emu, a, q, b):
    return emu.api_network(a["project"], a["network"])


@route("GET", _P + r"/global/firewalls/(?P<firewall>[^/]+)")
def _firewall(emu, a, q, b):
    return emu.api_firewall(a["project"], a["firewall"])


@route("POST", _P + r"/global/firewalls")
def _insert_firewall(emu, a, q, b):
    return emu.api_insert_firewall(a["project"], b, q.get("requestId"))


@route("GET", _P + r"/regions/(?P<region>[^/]+)/subnetworks/(?P<subnetwork>[^/]+)")
def _subnetwork(emu, a, q, b):
    return emu.api_subnetwork(a["project"], a["region"], a["subnetwork"])


@route("GET", _Z)
def _zone(emu, a, q, b):
    return emu.api_zone(a["project"], a["zone"])


@route("GET", _Z + r"/machineTypes")
def _machine_types(emu, a, q, b):
    return _list(
        "compute#machineTypeList",
        emu.api_machine_types(a["project"], a["zone"]),
        q,
        cat.link(a["project"], "zones", a["zone"], "machineTypes"),
    )


@route("GET", _Z + r"/machineTypes/(?P<type>[^/]+)")
def _machine_type(emu, a, q, b):
    return emu.api_machine_type(a["project"], a["zone"], a["type"])


@route("GET", _Z + r"/acceleratorTypes")
def _accelerator_types(emu, a, q, b):
    return _list(
        "compute#acceleratorTypeList",
        emu.api_accelerator_types(a["project"], a["zone"]),
        q,
        cat.link(a["project"], "zones", a["zone"], "acceleratorTypes"),
    )


@route("GET", _Z + r"/acceleratorTypes/(?P<type>[^/]+)")
def _accelerator_type(emu, a, q, b):
    return emu.api_accelerator_type(a["project"], a["zone"], a["type"])


@route("GET", _P + r"/global/images")
def _images(emu, a, q, b):
    return _list("compute#imageList", emu.api_images(a["project"]), q, cat.link(a["project"], "global", "images"))


@route("GET", _P + r"/global/images/family/(?P<family>[^/]+)")
def _image_family(emu, a, q, b):
    return emu.api_image_from_family(a["project"], a["family"])


@route("GET", _P + r"/global/images/(?P<image>[^/]+)")
def _image(emu, a, q, b):
    return emu.api_image(a["project"], a["image"])


@route("POST", _P + r"/global/images")
def _insert_image(emu, a, q, b):
    return emu.api_insert_image(a["project"], b, q.get("requestId"), str(q.get("forceCreate", "")).lower() == "true")


@route("DELETE", _P + r"/global/images/(?P<image>[^/]+)")
def _delete_image(emu, a, q, b):
    return emu.api_delete_image(a["project"], a["image"], q.get("requestId"))


@route("GET", _P + r"/global/operations")
def _global_operations(emu, a, q, b):
    return _list(
        "compute#operationList",
        emu.api_operations(a["project"], None),
        q,
        cat.link(a["project"], "global", "operations"),
    )


@route("GET", _P + r"/global/operations/(?P<op>[^/]+)")
def _global_operation(emu, a, q, b):
    return emu.api_operation(a["project"], None, a["op"])


@route("POST", _P + r"/global/operations/(?P<op>[^/]+)/wait")
def _wait_global_operation(emu, a, q, b):
    return emu.api_operation(a["project"], None, a["op"], wait=True)


@route("DELETE", _P + r"/global/operations/(?P<op>[^/]+)")
def _delete_global_operation(emu, a, q, b):
    emu.api_delete_operation(a["project"], None, a["op"])
    return {}


@route("GET", _P + r"/aggregated/instances")
def _aggregated_instances(emu, a, q, b):
    try:
        pred = compile_filter(q.get("filter"))
    except FilterError as e:
        raise ComputeError(400, "invalid", str(e)) from None
    items: dict = {}
    for zone in cat.ZONE_REGION:
        found = [i for i in emu.api_list(a["project"], zone) if pred(i)]
        items[f"zones/{zone}"] = (
            {"instances": found}
            if found
            else {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": f"There are no results for scope 'zones/{zone}' on this page.",
                    "data": [{"key": "scope", "value": f"zones/{zone}"}],
                }
            }
        )
    link = cat.link(a["project"], "aggregated", "instances")
    return {
        "kind": "compute#instanceAggregatedList",
        "id": link.removeprefix(cat.API_ROOT),
        "items": items,
        "selfLink": link,
    }


@route("GET", _Z + r"/instances")
def _instances(emu, a, q, b):
    return _list(
        "compute#instanceList",
        emu.api_list(a["project"], a["zone"]),
        q,
        cat.link(a["project"], "zones", a["zone"], "instances"),
    )


@route("POST", _Z + r"/instances")
def _insert(emu, a, q, b):
    return emu.api_insert(a["project"], a["zone"], b, q.get("requestId"))


@route("GET", _I)
def _get(emu, a, q, b):
    return emu.api_get(a["project"], a["zone"], a["name"])


@route("DELETE", _I)
def _delete(emu, a, q, b):
    return emu.api_delete(a["project"], a["zone"], a["name"], q.get("requestId"))


@route("POST", _I + r"/(?P<verb>stop|start|reset|simulateMaintenanceEvent)")
def _verb(emu, a, q, b):
    fn = {
        "stop": emu.api_stop,
        "start": emu.api_start,
        "reset": emu.api_reset,
        "simulateMaintenanceEvent": emu.api_simulate_maintenance,
    }[a["verb"]]
    return fn(a["project"], a["zone"], a["name"], q.get("requestId"))


@route("POST", _I + r"/setMetadata")
def _set_metadata(emu, a, q, b):
    return emu.api_set_metadata(a["project"], a["zone"], a["name"], b, q.get("requestId"))


@route("POST", _I + r"/setLabels")
def _set_labels(emu, a, q, b):
    return emu.api_set_labels(a["project"], a["zone"], a["name"], b, q.get("requestId"))


@route("GET", _I + r"/serialPort")
def _serial_port(emu, a, q, b):
    return emu.api_serial_port(a["project"], a["zone"], a["name"], _int(q, "port", 1), _int(q, "start", 0))


@route("GET", _Z + r"/operations")
def _operations(emu, a, q, b):
    return _list(
        "compute#operationList",
        emu.api_operations(a["project"], a["zone"]),
        q,
        cat.link(a["project"], "zones", a["zone"], "operations"),
    )


@route("GET", _Z + r"/operations/(?P<op>[^/]+)")
def _operation(emu, a, q, b):
    return emu.api_operation(a["project"], a["zone"], a["op"])


@route("POST", _Z + r"/operations/(?P<op>[^/]+)/wait")
def _wait_operation(emu, a, q, b):
    return emu.api_operation(a["project"], a["zone"], a["op"], wait=True)


@route("DELETE", _Z + r"/operations/(?P<op>[^/]+)")
def _delete_operation(emu, a, q, b):
    emu.api_delete_operation(a["project"], a["zone"], a["op"])
    return {}


# ---- Service Usage API (the stand-in): which APIs the project has on -------------------------------------
@route("GET", r"/v1/projects/(?P<project>[^/]+)/services/(?P<service>[^/]+)")
def _service(emu, a, q, b):
    return emu.api_service(a["project"], a["service"])


# ---- Cloud Billing Catalog API (the stand-in) -----------------------------------------------------
@route("GET", r"/v1/services/(?P<service>[^/]+)/skus")
def _skus(emu, a, q, b):
    return emu.billing.list_skus(a["service"], q)


# ---- test controls --------------------------------------------------------------------------------
@route("GET", r"/emulator/info")
def _info(emu, a, q, b):
    return {
        "project": emu.project,
        "zone": emu.zone,
        "region": emu.region,
        "endpoint": emu.endpoint,
        "base_dir": str(emu.base_dir),
        "preemption_grace": emu.preemption_grace,
        "stop_grace": emu.stop_grace,
        "env": emu.env(),
    }


@route("GET", r"/emulator/instances")
def _control_instances(emu, a, q, b):
    return {"instances": emu.instances()}


@route("POST", _E + r"/preempt")
def _control_preempt(emu, a, q, b):
    grace = b.get("grace")
    emu.preempt(
        a["name"],
        zone=a["zone"],
        project=a["project"],
        grace=None if grace is None else float(grace),
        wait=bool(b.get("wait")),
    )
    return {"ok": True}


@route("POST", _E + r"/maintenance")
def _control_maintenance(emu, a, q, b):
    emu.simulate_maintenance(a["name"], zone=a["zone"], project=a["project"], wait=bool(b.get("wait")))
    return {"ok": True}


@route("POST", _E + r"/poweroff")
def _control_poweroff(emu, a, q, b):
    emu.poweroff(a["name"], zone=a["zone"], project=a["project"], reboot=bool(b.get("reboot")), boot=b.get("boot"))
    return {"ok": True}


@route("POST", r"/emulator/zones/(?P<zone>[^/]+)/capacity")
def _control_capacity(emu, a, q, b):
    emu.set_zone_capacity(
        a["zone"], bool(b.get("available", False)), b.get("machineTypes"), on_insert=bool(b.get("onInsert"))
    )
    return {"ok": True}


@route("POST", r"/emulator/services")
def _control_services(emu, a, q, b):
    emu.set_service(b["name"], bool(b.get("enabled", True)))
    return {"ok": True}


@route("POST", r"/emulator/org-policies")
def _control_org_policies(emu, a, q, b):
    try:
        if b.get("enforced", True):
            emu.set_org_policy(b["constraint"], b.get("allowed"))
        else:
            emu.clear_org_policy(b["constraint"])
    except ValueError as e:
        raise ComputeError(400, "invalid", str(e)) from None
    return {"ok": True}


@route("POST", r"/emulator/quotas")
def _control_quotas(emu, a, q, b):
    limits = dict(b.get("limits") or {})
    if "metric" in b:
        limits[b["metric"]] = b["limit"]
    for metric, limit in limits.items():
        emu.set_quota(metric, float(limit), region=b.get("region"), project=b.get("project"))
    return {"ok": True}


@route("POST", r"/emulator/images")
def _control_images(emu, a, q, b):
    kwargs = {"disk_size_gb": int(b["diskSizeGb"])} if b.get("diskSizeGb") else {}
    img = emu.add_image(b["project"], b["name"], b.get("family"), **kwargs)
    return img.json()


# ---- server ---------------------------------------------------------------------------------------
REQUEST_LOG_ENV = "NBBURST_COMPUTE_REQUEST_LOG"
"""Name of a file to which every emulator appends each request it receives, as a line of JSON."""


def _record(emu, method: str, path: str, query: dict, body, client: str) -> None:
    """Keep a request in ``emu.request_log`` and, when $NBBURST_COMPUTE_REQUEST_LOG names a file, append it there.

    ``client`` is the ``x-goog-api-client`` header: set by Google's client libraries, empty for others.
    """
    entry = {"method": method, "path": path, "query": query, "body": body, "client": client}
    emu.request_log.append(entry)
    log_file = os.environ.get(REQUEST_LOG_ENV)
    if log_file:  # one write per line, appended: lines of several emulators and processes never interleave
        fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)


class _Handler(BaseHTTPRequestHandler):
    server_version = "nbburst-compute-emulator"

    def log_message(self, fmt, *args) -> None:
        log.debug("compute emulator: " + fmt, *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        emu = self.server.emulator  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = unquote(url.path)
        try:
            try:
                body = json.loads(raw) if raw.strip() else {}
            except ValueError as e:
                raise ComputeError(400, "parseError", f"Parse Error: {e}") from None
            _record(emu, method, path, query, body, self.headers.get("x-goog-api-client", ""))
            token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip() or None
            status, payload = 200, self._dispatch(emu, method, path, query, body, token)
        except ComputeError as e:
            status, payload = e.code, e.payload()
        except Exception as e:
            log.exception("compute emulator: %s %s failed", method, self.path)
            status, payload = 500, ComputeError(500, "backendError", f"Internal error: {e}").payload()
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    @staticmethod
    def _dispatch(emu, method: str, path: str, query: dict, body, token: str | None = None):
        path = path.rstrip("/") or "/"
        known_path = False
        for m, pattern, fn in _ROUTES:
            match = pattern.match(path)
            if match:
                known_path = True
                if m == method:
                    if path.startswith("/compute/v1/projects/"):
                        emu.check_compute_enabled(match.group("project"))
                    if fn is _insert:
                        emu.check_launch_allowed(
                            token,
                            "compute.instances.create",
                            f"{path.removeprefix('/compute/v1/')}/{body.get('name', '')}",
                        )
                    elif fn is _verb and match.group("verb") == "start":
                        emu.check_launch_allowed(
                            token, "compute.instances.start", path.removeprefix("/compute/v1/").removesuffix("/start")
                        )
                    return fn(emu, match.groupdict(), query, body)  # type: ignore[operator]
        if known_path:
            raise ComputeError(405, "methodNotAllowed", f"Method {method} is not allowed on {path}")
        raise ComputeError(404, "notFound", f"The compute emulator does not implement {method} {path}")


def make_server(emulator, port: int = 0) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    httpd.daemon_threads = True
    httpd.emulator = emulator  # type: ignore[attr-defined]
    return httpd
