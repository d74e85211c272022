"""The REST API of the Jupyter server extension, against real local jobs (pytest-jupyter's ``jp_fetch``).

Its specification is docs/rest-api.md: every route and every key of the answers are checked to be there, and
the sidebar's types (labextension/src/wire.ts) follow it.

pytest-jupyter's fixtures are imported into this module only (not registered
as a plugin): its plugin would otherwise put an event loop and a ServerApp
cleanup around every test of the suite. The tests are synchronous and drive
``jp_fetch`` on pytest-jupyter's loop.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import threading
import time
from pathlib import Path

import psutil
import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (jp_fetch, jp_serverapp and what they need)
from support import held_call, wait_until
from traitlets.config import Config

import nbburst
import nbburst.server
from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job

#: The keys the sidebar cannot do without in a job's summary (docs/rest-api.md, "Job", has them all).
INFO_KEYS = {
    "id",
    "name",
    "state",
    "attempt",
    "backend",
    "kind",
    "machine",
    "created",
    "started",
    "ended",
    "elapsed_s",
    "cost_usd",
    "cost_per_hour_usd",
    "progress",
    "message",
}
SPEC = Path(__file__).resolve().parents[1] / "docs" / "rest-api.md"
PRINTER = """\
import time
for i in range(4):
    print(f"line {i}", flush=True)
    time.sleep(0.6)
"""


@pytest.fixture
def store_env(burst_env):
    """burst_env (a private Store and state folder); every job still running is cancelled at teardown."""
    yield burst_env
    for job in Burst().jobs():
        if not job.state.terminal:
            job.cancel(wait_s=2)


@pytest.fixture
def server_options() -> dict:
    return {"NBBurstServer": {"supervise_interval": 0.3}, "NBBurst": {"timeout": "2h"}}


@pytest.fixture
def jp_server_config(store_env, server_options):
    return Config({"ServerApp": {"jpserver_extensions": {"nbburst": True}}, **server_options})


class Api:
    """Synchronous calls of ``/nbburst/api/...`` through pytest-jupyter's client."""

    def __init__(self, loop, fetch):
        self.loop, self.fetch = loop, fetch

    def call(
        self,
        *parts: str,
        method: str = "GET",
        params: dict | None = None,
        headers: dict | None = None,
        status: int = 200,
    ) -> dict:
        body = {"body": b""} if method == "POST" else {}  # tornado sends no POST without a body
        response = self.loop.run_until_complete(
            self.fetch(
                "nbburst", "api", *parts, method=method, params=params, headers=headers, raise_error=False, **body
            )
        )
        assert response.headers["Content-Type"].startswith("application/json"), response.headers
        body = json.loads(response.body)
        assert response.code == status, (response.code, body)
        return body

    def get(self, *parts: str, **params) -> dict:
        return self.call(*parts, params=params)


@pytest.fixture
def api(jp_serverapp, jp_fetch, jp_asyncio_loop):
    yield Api(jp_asyncio_loop, jp_fetch)
    nbburst.server.stop(jp_serverapp)


def spec_routes() -> set[tuple[str, str]]:
    """``(method, path)`` of every route the specification describes (its ``### `GET /nbburst/...``` headings)."""
    return set(re.findall(r"^### `([A-Z]+) (/nbburst/\S+)`$", SPEC.read_text(), re.M))


def spec_keys(title: str) -> set[str]:
    """The keys of the specification's object ``title``: the first column of its table under ``### title``."""
    section = SPEC.read_text().split(f"\n### {title}\n", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, re.M))


def submit_sleeper(burst: Burst, seconds: float = 60, name: str | None = None) -> Job:
    return burst.submit(time.sleep, seconds, options=burst.options(name=name))


def agent_pid(state: Path, job: Job) -> int:
    record = json.loads((state / "machines" / f"nbburst-{job.id}.json").read_text())
    return record["pid"]


def test_extension_points_name_the_built_extension():
    assert nbburst._jupyter_server_extension_points() == [{"module": "nbburst.server"}]
    (path,) = nbburst._jupyter_labextension_paths()
    source = Path(__file__).parents[1] / "labextension" / "package.json"
    assert path["dest"] == json.loads(source.read_text())["name"]
    assert (Path(nbburst.__file__).parent / path["src"]).name == "labextension"


def test_list_filter_and_detail(api, store_env):
    burst = Burst()
    done = burst.submit(print, "hello", options=burst.options(name="quick"))
    assert done.wait(30).value == "SUCCEEDED"
    sleeper = submit_sleeper(burst, name="sleeper")
    wait_until(lambda: api.get("jobs", sleeper.id)["state"] == "RUNNING")

    listed = api.get("jobs", state="all")["jobs"]
    assert [j["id"] for j in listed] == [sleeper.id, done.id]  # newest first
    assert all(set(j) >= INFO_KEYS for j in listed)
    assert listed[1]["state"] == "SUCCEEDED" and listed[1]["name"] == "quick"
    assert listed[0]["machine"]["type"] == "local" and listed[0]["kind"] == "call"
    assert [j["id"] for j in api.get("jobs")["jobs"]] == [sleeper.id, done.id]  # state=all is the default
    assert [j["id"] for j in api.get("jobs", state="running")["jobs"]] == [sleeper.id]

    detail = api.get("jobs", "sleeper")  # by name
    assert detail["id"] == sleeper.id and INFO_KEYS | {"attempts"} <= set(detail)
    assert [(a["attempt"], a["state"]) for a in detail["attempts"]] == [(1, "RUNNING")]
    assert detail["attempts"][0]["machine"] == f"nbburst-{sleeper.id}"
    finished = api.get("jobs", done.id)
    assert finished["state"] == "SUCCEEDED" and finished["ended"] >= finished["started"]
    assert [(a["attempt"], a["state"]) for a in finished["attempts"]] == [(1, "SUCCEEDED")]


def test_cancel_stops_the_machine(api, store_env):
    burst = Burst()
    job = submit_sleeper(burst, name="to-cancel")
    wait_until(lambda: api.get("jobs", job.id)["state"] == "RUNNING")
    proc = psutil.Process(agent_pid(store_env["state"], job))

    started = time.monotonic()
    assert api.call("jobs", "to-cancel", method="DELETE") == {"id": job.id, "state": "CANCELLED"}
    assert time.monotonic() - started < 15
    assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    assert api.get("jobs", job.id)["state"] == "CANCELLED"
    assert api.get("jobs", state="running")["jobs"] == []
    # Cancelling a finished job is harmless and says how it ended.
    assert api.call("jobs", job.id, method="DELETE") == {"id": job.id, "state": "CANCELLED"}


def test_logs_tail_by_offset(api, store_env, monkeypatch):
    burst = Burst()
    job = burst.submit_cell(PRINTER, capture(PRINTER, {}), burst.options(name="printer"))

    def first_output():
        reply = api.get("jobs", job.id, "logs")
        return reply if "line 0" in reply["text"] else None

    first = wait_until(first_output, 20, step=0.05)
    assert first["attempt"] == 1 and first["attempts"] == [1] and first["offset"] == 0
    assert not first["complete"] and "line 3" not in first["text"]
    assert first["next_offset"] == len(first["text"])

    pieces, offset, later = [first["text"]], first["next_offset"], None
    while True:  # tail: each call returns only what is new
        later = api.get("jobs", job.id, "logs", offset=str(offset), attempt="1")
        assert later["offset"] == offset and later["next_offset"] == offset + len(later["text"])
        assert "line 0" not in later["text"]
        pieces.append(later["text"])
        offset = later["next_offset"]
        if later["complete"]:
            break
        time.sleep(0.1)
    full = "".join(pieces)
    assert full == "line 0\nline 1\nline 2\nline 3\n" == job.logs()
    assert api.get("jobs", job.id, "logs")["text"] == full

    # Past the end: nothing new, and the offset says where the end is.
    past = api.get("jobs", job.id, "logs", offset=str(len(full) + 50))
    assert (past["text"], past["offset"], past["next_offset"], past["complete"]) == ("", len(full), len(full), True)

    # Long logs come in pages.
    monkeypatch.setattr("nbburst.server.manager.MAX_LOG_CHARS", 5)
    offset, paged = 0, []
    while True:
        page = api.get("jobs", job.id, "logs", offset=str(offset))
        assert len(page["text"]) <= 5
        if not page["text"]:
            break
        paged.append(page["text"])
        offset = page["next_offset"]
    assert "".join(paged) == full


def test_errors_are_json(api, store_env):
    burst = Burst()
    job = burst.submit(print, "x")
    job.wait(30)
    for parts in (("jobs", "nope"), ("jobs", "nope", "logs")):
        assert api.call(*parts, status=404)["message"].startswith("no job with id or name 'nope'")
    assert api.call("jobs", "nope", method="DELETE", status=404)["message"].startswith("no job")
    assert "no attempt 9" in api.call("jobs", job.id, "logs", params={"attempt": "9"}, status=404)["message"]
    assert "state" in api.call("jobs", params={"state": "done"}, status=400)["message"]
    for params in ({"offset": "-1"}, {"offset": "x"}, {"attempt": "0"}, {"attempt": "one"}):
        message = api.call("jobs", job.id, "logs", params=params, status=400)["message"]
        assert next(iter(params)) in message


def test_unauthenticated_requests_are_refused(api, store_env):
    job = Burst().submit(print, "secret")
    job.wait(30)
    anonymous = {"Authorization": ""}
    for parts, method in (
        (("jobs",), "GET"),
        (("jobs", job.id), "GET"),
        (("jobs", job.id, "logs"), "GET"),
        (("jobs", job.id), "DELETE"),
        (("config",), "GET"),
    ):
        body = api.call(*parts, method=method, headers=anonymous, status=403)
        assert job.id not in json.dumps(body) and "secret" not in json.dumps(body)
    assert api.get("jobs", job.id)["state"] == "SUCCEEDED"  # the refused DELETE did nothing
    wrong = {"Authorization": "token not-the-token"}
    api.call("jobs", headers=wrong, status=403)


def test_sessions_are_listed_with_their_cost_and_stopped(api, store_env):
    from nbburst.machines.base import GONE

    burst = Burst()
    session = burst.sessions.start(name="side", cores=1, idle="5m", timeout="10m", preload=[])
    try:
        (listed,) = api.get("sessions")["sessions"]
        assert {k: listed[k] for k in ("name", "state", "backend", "cores", "cells")} == {
            "name": "side",
            "state": "RUNNING",
            "backend": "local",
            "cores": 1,
            "cells": 0,
        }
        assert listed["cost_usd"] >= 0 and listed["until"] > time.time() > listed["started"]
        assert set(listed) == spec_keys("Session")
        assert api.call("sessions", headers={"Authorization": ""}, status=403)["message"] == "Forbidden"
        stopped = api.call("sessions", "side", "stop", method="POST")
        assert (stopped["name"], stopped["state"]) == ("side", "STOPPED")
        assert burst.machines("local").describe(session.machine).state == GONE
        assert api.get("sessions") == {"sessions": []}
        for name in ("side", "..%2Fmachines%2Fx"):
            assert api.call("sessions", name, "stop", method="POST", status=404)["message"].startswith("no session")
    finally:
        for left in burst.sessions.all():
            burst.sessions.stop(left.name)


def test_config_shows_values_and_sources(api, store_env):
    values = api.get("config")["values"]
    assert values["root"] == {"value": str(store_env["root"]), "source": "$NBBURST_ROOT"}
    assert values["backend"] == {"value": "local", "source": "$NBBURST_BACKEND"}
    assert values["timeout"] == {"value": "2h", "source": "config file"}  # c.NBBurst in the server's config
    assert values["max_restarts"]["source"] == "default"


def test_api_stays_responsive_while_cancelling(api, store_env, jp_fetch, jp_asyncio_loop, monkeypatch):
    from nbburst.server.manager import JobsManager

    job = submit_sleeper(Burst())
    wait_until(lambda: api.get("jobs", job.id)["state"] == "RUNNING")
    cancel = JobsManager.cancel
    listed = threading.Event()

    def slow_cancel(self, ref):  # a Compute Engine VM takes seconds to delete: this one, until the listing is back
        listed.wait(60)
        return cancel(self, ref)

    monkeypatch.setattr(JobsManager, "cancel", slow_cancel)

    async def both():
        cancelling = asyncio.ensure_future(jp_fetch("nbburst", "api", "jobs", job.id, method="DELETE"))
        await asyncio.sleep(0.1)
        listing = await jp_fetch("nbburst", "api", "jobs")
        waited = cancelling.done()
        listed.set()
        return listing, waited, await cancelling

    listing, waited, cancelled = jp_asyncio_loop.run_until_complete(both())
    assert not waited, "the listing waited for the cancellation"
    assert json.loads(listing.body)["jobs"][0]["id"] == job.id
    assert json.loads(cancelled.body)["state"] == "CANCELLED"


def test_hosted_supervisor_resumes_a_preempted_detached_job(api, store_env, jp_serverapp, tmp_path):
    extension = jp_serverapp.web_app.settings["nbburst"]
    assert extension.supervision is not None and extension.supervision.running
    burst = Burst()
    started = tmp_path / "started"
    job = burst.submit(held_call, str(started), options=burst.options(name="survivor"))
    wait_until(started.exists, what="the job to run")  # still running when preempted, however busy the machine

    job.preempt(grace_s=5)  # nobody in this process waits for the job: only the server can resume it
    wait_until(lambda: api.get("jobs", job.id)["state"] == "SUCCEEDED")
    detail = api.get("jobs", job.id)
    assert detail["attempt"] == 2
    assert [(a["attempt"], a["state"]) for a in detail["attempts"]] == [(1, "PREEMPTED"), (2, "SUCCEEDED")]

    nbburst.server.stop(jp_serverapp)
    assert not extension.supervision.running


@pytest.mark.parametrize("server_options", [{"NBBurstServer": {"supervise": False}}])
def test_supervisor_can_be_turned_off(api, jp_serverapp, server_options):
    assert jp_serverapp.web_app.settings["nbburst"].supervision is None
    assert api.get("jobs") == {"jobs": []}


def test_hosted_supervisor_leaves_jobs_it_cannot_resume(store_env):
    """A job whose key is not in this server's key ring (someone else's) is never touched."""
    from nbburst.client.supervision.supervisor import Lease
    from nbburst.server.manager import JobsManager
    from nbburst.server.supervision import SupervisionThread

    burst = Burst()
    job = submit_sleeper(burst, seconds=30)
    wait_until(lambda: job.state.value == "RUNNING")
    job.preempt(grace_s=5)
    assert job.state.value == "PREEMPTED"
    key_file = store_env["state"] / "keys" / f"{job.id}.key"
    key = key_file.read_bytes()
    key_file.unlink()

    supervisor = SupervisionThread(JobsManager(Burst()))
    assert supervisor.round() == 0
    assert job.state.value == "PREEMPTED" and job.attempt == 1  # not relaunched, and not failed either

    key_file.write_bytes(key)
    assert supervisor.round() == 1
    assert job.attempt == 2

    supervisor.stop()  # hands the job's lease back: another supervisor may take over at once
    _number, lease = Lease(job).current()
    assert lease["expires"] == 0.0


class _Dashboard(http.server.BaseHTTPRequestHandler):
    """A stand-in for a Dask dashboard: answers every GET with its path."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/":
            self.send_response(302)
            self.send_header("Location", "/status")
            self.end_headers()
            return
        body = f"dashboard page {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_dask_dashboard_is_proxied_from_the_verified_cluster_record(api, store_env):
    burst = Burst()
    job = burst.submit(print, "hello")
    assert job.wait(30).value == "SUCCEEDED"

    def fetch(*path: str, **params: str):
        return api.loop.run_until_complete(
            api.fetch("nbburst", "dask", job.id, *path, params=params, raise_error=False, follow_redirects=False)
        )

    answer = fetch("status")
    assert answer.code == 404 and "no Dask dashboard" in json.loads(answer.body)["message"]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        record = {"attempt": 1, "address": "tls://127.0.0.1:1", "dashboard": f"http://127.0.0.1:{port}/status"}
        job.folder.put_record(job.layout.cluster(1), json.dumps(record).encode())
        answer = fetch("status", x="1")
        assert answer.code == 200 and answer.body == b"dashboard page /status?x=1"
        answer = fetch()
        assert answer.code == 302 and answer.headers["Location"].endswith(f"/nbburst/dask/{job.id}/status")
    finally:
        server.shutdown()
        server.server_close()
    # the server cannot reach it (here: nothing listens any more): the browser gets the direct address
    assert fetch("status").code == 302 and fetch("status").headers["Location"] == f"http://127.0.0.1:{port}/status"

    forged = {"attempt": 2, "dashboard": "http://127.0.0.1:9/status"}  # not sealed by the job: passed over
    job.store.put(job.layout.cluster(2), json.dumps(forged).encode())
    answer = fetch("status")
    assert answer.code == 302 and answer.headers["Location"] == f"http://127.0.0.1:{port}/status", answer.body


def test_the_specification_describes_every_route():
    from nbburst.server.handlers import handlers

    served = set()
    for pattern, handler in handlers("/"):
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern).replace("/?{", "/{").removesuffix("/?")
        served |= {
            (method.upper(), path) for method in ("get", "post", "put", "patch", "delete") if method in vars(handler)
        }
    assert ("GET", "/nbburst/api/jobs/{ref}/logs") in served and ("GET", "/nbburst/dask/{ref}/{path}") in served
    assert served == spec_routes()


def test_the_specification_names_every_key_of_the_answers(api, store_env):
    from nbburst.client.job import unverified_info
    from nbburst.protocol import budget, signing

    burst = Burst()
    job = burst.submit(nbburst.progress, 3, 10, "fits", options=burst.options(name="spec"))
    assert job.wait(30).value == "SUCCEEDED"
    detail = api.get("jobs", "spec")
    assert set(detail) == (spec_keys("Job") - {"unverified"}) | {"attempts"}
    assert set(api.get("jobs")["jobs"][0]) == spec_keys("Job") - {"unverified"}
    assert set(unverified_info(job.id, signing.NoKey("no key for the job"))) == spec_keys("Job") - {"workers"}
    assert spec_keys("Job") >= INFO_KEYS
    assert set(detail["machine"]) == spec_keys("Machine")
    assert set(detail["progress"]) == spec_keys("Progress")
    assert [set(a) for a in detail["attempts"]] == [spec_keys("Attempt")]
    assert set(budget.view(2.5, 0.5)) == spec_keys("Budget")
    assert set(api.get("jobs", job.id, "logs")) == spec_keys("Log slice")
    assert set(api.call("jobs", job.id, method="DELETE")) == {"id", "state"}
