"""Warm sessions on Compute Engine (the emulators): one spot VM carries the cells, which reach it through the Store."""

from __future__ import annotations

import functools
import json
import socket
import ssl
import threading
import time
from typing import Any

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag
from support import held_cell, unreachable_push, wait_until

from nbburst.agent.session.relay import IDLE_POLL_SECONDS, POLL_SECONDS, STORE_BUSY_SECONDS, Relay
from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.job import Job
from nbburst.client.session import mailbox
from nbburst.client.session.mailbox import PushedNews
from nbburst.errors import UsageError
from nbburst.machines.base import machine_name
from nbburst.protocol import overlay, sessionpush, sessionwire
from nbburst.protocol.job import QUICK_STALE_SECONDS, State, blob_key
from nbburst.protocol.sealed import Refused
from nbburst.store import AlreadyExists, NotFound, Store, open_store
from nbburst.ui import cli

#: The cell's warm parent: the parent of its controller (the runner's parent).
PARENT = "import os, psutil\nparent = psutil.Process(os.getppid()).ppid()\n"


@pytest.fixture
def burst(gce_env, monkeypatch):
    monkeypatch.setenv("NBBURST_WATCHER", "0")  # cells' relaunches are the notebook's here (test_gce_watcher.py)
    b = Burst()
    yield b
    for session in b.sessions.all():
        b.sessions.stop(session.name)


def run(b: Burst, code: str, ns: dict[str, Any], **options: Any) -> Any:
    """Run ``code`` as a %%burst cell (on the default session) and merge its variables into ``ns``."""
    job = b.submit_cell(code, capture(code, ns, None), b.options(**options))
    job.wait(timeout=120)
    if job.state == State.SUCCEEDED:
        job.outcome(ns).merge_into(ns)
    return job


def inserts(emu) -> list[dict]:
    return [r for r in emu.request_log if r["method"] == "POST" and r["path"].endswith("/instances")]


def test_requests_are_sealed_to_their_place_and_boot_and_hide_the_job_key():
    secret, other = bytes(range(16)), bytes(16)
    key = bytes(range(32, 64))
    place, raw = sessionwire.seal_request(secret, "session-a-1", 2, sessionwire.CELL, job="gs://b/jobs/x", key=key)
    assert place.startswith(sessionwire.requests_prefix("session-a-1"))
    assert key.hex().encode() not in raw and key not in raw
    request = sessionwire.open_request(secret, "session-a-1", 2, place, raw)
    assert (request["kind"], request["job"], request["key"]) == ("cell", "gs://b/jobs/x", key.hex())
    with pytest.raises(Refused):  # an earlier boot's request, replayed to the revived machine
        sessionwire.open_request(secret, "session-a-1", 3, place, raw)
    with pytest.raises(Refused):  # copied under another name
        sessionwire.open_request(secret, "session-a-1", 2, place.replace(".json", "0.json"), raw)
    with pytest.raises(Refused):  # not the session's secret
        sessionwire.open_request(other, "session-a-1", 2, place, raw)
    forged = json.loads(raw)
    forged["job"] = "gs://b/jobs/evil"
    with pytest.raises(Refused):
        sessionwire.open_request(secret, "session-a-1", 2, place, json.dumps(forged).encode())
    fields = json.loads(raw)  # the key encrypted for another place, sealed anew by the secret's holder: still bound
    _, moved = sessionwire.seal_request(secret, "session-a-1", 2, sessionwire.CELL, key=key)
    fields["key_sealed"] = json.loads(moved)["key_sealed"]
    fields.pop("seal")
    resealed = sessionwire.sealed.seal_record(secret, "session-a-1", place, json.dumps(fields).encode())
    with pytest.raises(InvalidTag):
        sessionwire.open_request(secret, "session-a-1", 2, place, resealed)


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_cells_run_on_the_one_session_vm_and_unchanged_inputs_stay_put(burst, compute_emulator, capsys):
    t0 = time.monotonic()
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=["numpy"])
    (insert,) = inserts(compute_emulator)
    body = insert["body"]
    assert body["name"] == session.machine and body["labels"]["nbburst-session"] == "1"
    sched = body["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["instanceTerminationAction"] == "DELETE"
    assert 540 < int(sched["maxRunDuration"]["seconds"]) <= 660  # the session's 10 minutes, and a margin
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert "nbburst.agent.session.relay" in items["startup-script"]
    assert json.loads(items["nbburst-session"])["idle"] == 300
    token = session.record.token
    assert all(token not in value for value in items.values())  # the secret is in Secret Manager only

    ns: dict[str, Any] = {"big": np.arange(1 << 20, dtype=np.float64)}
    first = run(burst, PARENT + "total = float(big.sum())", ns)
    assert first.state == State.SUCCEEDED, first.logs()
    warm = session.ask({})
    assert ns["parent"] == warm["pid"] and ns["total"] == float(np.arange(1 << 20).sum())
    assert first.statuses()[-1].machine == session.machine
    store = burst.store_for("gce")
    held = set(warm["held"]) & {key.rsplit("/", 1)[-1] for key in store.list("blobs/")}
    assert held, "the input's blob is held by the warm parent"
    for digest in held:  # spoiled in the bucket: a cell that uploads or reads it again would show it
        store.put(blob_key(digest), b"not the input")

    second = run(burst, PARENT + "total2 = float(big[::2].sum())", ns)
    assert second.state == State.SUCCEEDED, second.logs()
    assert ns["parent"] == warm["pid"], "the second cell ran on the same warm parent"
    assert ns["total2"] == float(np.arange(1 << 20)[::2].sum())
    # a pushed cell's record is written behind it: read once the VM (or the notebook) has stored it
    wait_until(lambda: store.exists(second.layout.inputs), timeout=60, what="the second cell's record in the Store")
    manifest = json.loads(store.get(second.layout.inputs))
    new = {manifest["state"], *manifest["values"].values()} - set(warm["held"])  # the kernel's state may change
    assert manifest["values"]["big"] in held and manifest["values"]["big"] not in new
    assert session.ask({})["reads"] == warm["reads"] + len(new), "only what changed was read from the bucket"
    assert all(store.get(blob_key(digest)) == b"not the input" for digest in held)
    names = [r["body"]["name"] for r in inserts(compute_emulator)]
    assert names == [session.machine], "no VM of its own for either cell"
    assert machine_name(second.id) not in {i["name"] for i in compute_emulator.instances()}

    cli.main(["gc", "--backend", "gce"])  # a live session's VM is not a leftover
    assert compute_emulator.instance(session.machine)["status"] == "RUNNING"
    assert cli.main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert "default" in out and "RUNNING" in out

    info = burst.sessions.stop()
    assert info["state"] == "STOPPED" and info["cells"] == 2
    assert compute_emulator.wait_for_status(session.machine, "DELETED", timeout=30) == "DELETED"
    assert not store.list(sessionwire.folder(session.record.session_id))
    print(f"gce session, two cells and stop: {time.monotonic() - t0:.1f} s")


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_an_idle_session_vm_ends_itself(burst, compute_emulator):
    session = burst.sessions.start(cores=2, idle="2s", timeout="10m", preload=[])
    assert compute_emulator.wait_for_status(session.machine, "DELETED", timeout=60) == "DELETED"
    deleted = [r for r in compute_emulator.request_log if r["method"] == "DELETE" and session.machine in r["path"]]
    assert len(deleted) == 1, "the VM deleted itself (its warm parent, 2 s without a cell)"
    assert burst.sessions.get().info()["state"] == "ENDED"


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0)
def test_a_session_vm_preempted_between_cells_comes_back_with_the_next_cell(burst, compute_emulator):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    compute_emulator.preempt(session.machine, wait=True)
    assert compute_emulator.wait_for_status(session.machine, "DELETED", timeout=30) == "DELETED"
    ns: dict[str, Any] = {}
    job = run(burst, PARENT + "y = 7", ns)
    assert job.state == State.SUCCEEDED and ns["y"] == 7, job.logs()
    assert job.session.revived and job.attempt == 1
    revived = burst.sessions.get()
    assert revived.machine != session.machine and revived.record.restarts == 1
    assert ns["parent"] == revived.ask({})["pid"]
    wait_until(lambda: len(inserts(compute_emulator)) == 2, what="one VM more: the revived session's")


@pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=2.0)
def test_the_next_cell_takes_the_connection_dialed_while_the_last_one_ran_unless_the_vm_went(
    burst, compute_emulator, monkeypatch
):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    boot = (session.record.session_id, session.record.restarts)
    ns: dict[str, Any] = {}
    assert run(burst, "x = 1", ns).state == State.SUCCEEDED
    ahead = wait_until(lambda: mailbox._ahead.get(boot), what="a connection dialed for the next cell")
    dialed: list[Any] = []
    connect = sessionpush.connect
    monkeypatch.setattr(sessionpush, "connect", lambda *a, **k: dialed.append(a) or connect(*a, **k))
    job = burst.submit_cell("y = x + 1", capture("y = x + 1", ns, None), burst.options())
    assert isinstance(job.wake, PushedNews) and job.wake.conn is ahead, "the cell went down the connection dialed ahead"
    assert job.wait(timeout=120) == State.SUCCEEDED and job.outcome(ns).values["y"] == 2
    wait_until(lambda: mailbox._ahead.get(boot), what="the next one, dialed while this cell ran")
    assert len(dialed) == 1

    compute_emulator.preempt(session.machine, wait=True)  # the VM goes; the connection dialed for it ends with it
    assert compute_emulator.wait_for_status(session.machine, "DELETED", timeout=30) == "DELETED"
    job = run(burst, "z = 3", ns)
    assert job.state == State.SUCCEEDED and ns["z"] == 3, job.logs()
    assert job.session.revived, "the session came back on a new VM: the dead connection was not taken for its VM"


def test_a_connection_dialed_ahead_is_taken_only_while_it_is_open():
    mine, relays = socket.socketpair()
    try:
        assert sessionpush.idle_and_open(mine)  # type: ignore[arg-type] - select looks at the descriptor only
        relays.close()  # the relay ended it (its VM went, or it waited too long for a request)
        assert not sessionpush.idle_and_open(mine)  # type: ignore[arg-type]
    finally:
        mine.close()
    assert not sessionpush.idle_and_open(mine)  # type: ignore[arg-type]


def test_a_cell_in_flight_on_a_preempted_session_vm_recovers_on_a_vm_of_its_own(burst, compute_emulator, tmp_path):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    ns: dict[str, Any] = {}
    started = tmp_path / "started"
    code = held_cell(started, "v = 5")
    job = burst.submit_cell(code, capture(code, ns, None), burst.options(max_restarts=2))
    wait_until(started.exists, timeout=120, what="the cell runs on the session's VM")
    assert isinstance(job.wake, PushedNews), "the cell went down the push channel with its job's objects"
    compute_emulator.preempt(session.machine)
    assert job.wait(timeout=240) == State.SUCCEEDED, job.logs()
    store = burst.store_for("gce")
    assert store.exists(job.layout.spec) and store.exists(job.layout.status(1)), "attempt 1 is in the record"
    job.outcome(ns).merge_into(ns)
    assert ns["v"] == 5 and job.attempt == 2
    machines = [s.machine for s in job.statuses()]
    assert machines == [session.machine, machine_name(job.id)], "attempt 2 ran as a plain job on a VM of its own"
    assert compute_emulator.wait_for_status(session.machine, "DELETED", timeout=30) == "DELETED"


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_session_vm_that_cannot_boot_says_why_and_is_deleted(burst, compute_emulator, monkeypatch):
    secrets = burst.machines("gce").key_secrets
    put = secrets.put
    monkeypatch.setattr(secrets, "put", lambda *args: put(*args).replace("nbburst-key-", "nbburst-nokey-"))
    monkeypatch.setitem(compute_emulator.instance_env, "NBBURST_IAM_WAIT_SECONDS", "5")  # not 10 min for access
    with pytest.raises(UsageError, match="did not start(.|\n)*cannot read the job key from Secret Manager"):
        burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    (insert,) = inserts(compute_emulator)
    assert compute_emulator.wait_for_status(insert["body"]["name"], "DELETED", timeout=30) == "DELETED"


def _answer(push: dict[str, Any], identity: dict[str, str], line: bytes) -> bytes:
    """What the push channel at ``push`` answers ``line`` from a client presenting ``identity`` (b"": nothing)."""
    try:
        with sessionpush.connect(push, identity, 10.0) as conn:
            conn.settimeout(30.0)
            conn.sendall(line)
            return sessionpush.read_line(conn)
    except (ssl.SSLError, OSError):
        return b""


def test_the_push_channel_trusts_the_other_sides_certificate_only():
    client, vm, stranger = (sessionpush.identity(name) for name in ("client", "vm", "stranger"))
    server = socket.create_server(("127.0.0.1", 0))
    push = {"host": "127.0.0.1", "port": server.getsockname()[1], "cert": vm["cert"]}

    def serve() -> None:
        for _ in range(2):
            raw, _ = server.accept()
            raw.settimeout(10.0)
            try:
                with sessionpush.context(vm, client["cert"], server=True).wrap_socket(raw, server_side=True) as conn:
                    conn.sendall(sessionpush.read_line(conn).upper())
            except (ssl.SSLError, OSError):
                raw.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert _answer(push, client, b"hello\n") == b"HELLO\n"
        assert _answer(push, stranger, b"hello\n") == b"", "a client the VM does not know is refused"
        with pytest.raises((ssl.SSLError, OSError)):  # a VM the client does not know: nothing is sent to it
            sessionpush.connect({**push, "cert": stranger["cert"]}, client, 10.0)
    finally:
        thread.join(timeout=30)
        server.close()


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_cells_are_pushed_to_a_session_vm_and_go_through_the_store_when_it_cannot_be_reached(burst, compute_emulator):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    assert session.record.push["port"] and session.record.push["cert"].startswith("-----BEGIN CERTIFICATE")
    ns: dict[str, Any] = {}
    job = run(burst, PARENT + "a = 1", ns)
    assert job.state == State.SUCCEEDED and ns["a"] == 1, job.logs()
    machines = burst.machines("gce")
    assert "handed over from the push channel" in machines.console(session.machine)
    assert session.ask({})["pid"] == ns["parent"]

    unreachable_push(burst.sessions.folder, session.name)
    job = run(burst, PARENT + "b = 2", ns)
    assert job.state == State.SUCCEEDED and ns["b"] == 2, job.logs()
    assert "handed over from the Store" in machines.console(session.machine)
    assert burst.sessions.get().ask({})["pid"] == ns["parent"], "the same warm parent, reached through the Store"


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_stranger_or_a_forged_request_on_the_push_channel_is_refused(burst, compute_emulator):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    record = session.record
    push = record.push
    cell = {"job": "gs://b/jobs/evil", "key": bytes(32), "attempt": 1}
    place, raw = sessionwire.seal_request(bytes.fromhex(record.token), record.session_id, 0, sessionwire.CELL, **cell)
    line = sessionpush.request_line(place, raw)
    with socket.create_connection((push["host"], push["port"]), timeout=10.0) as plain:  # no TLS at all
        plain.settimeout(30.0)
        plain.sendall(line)
        try:
            heard = plain.recv(4096)
        except ConnectionResetError:  # the handshake failed: the relay hung up
            heard = b""
        assert b"carried" not in heard
    assert _answer(push, sessionpush.identity("stranger"), line) == b"", "a sealed request from a stranger's TLS"
    _, forged = sessionwire.seal_request(bytes(16), record.session_id, 0, sessionwire.CELL, **cell)
    assert _answer(push, record.tls, sessionpush.request_line(place, forged)) == b"", "not sealed by the session"
    console = burst.machines("gce").console(session.machine)
    assert "evil" not in console and console.count("push connection ended") >= 3
    ns: dict[str, Any] = {}
    job = run(burst, PARENT + "c = 3", ns)
    assert job.state == State.SUCCEEDED and ns["c"] == 3, job.logs()


def test_the_relay_lists_slowly_once_cells_come_by_push_and_at_once_again_when_one_comes_through_the_store(tmp_path):
    relay = Relay(open_store(str(tmp_path / "store")), "session-a-1", bytes(16), 0, str(tmp_path))
    assert relay.poll_seconds() == POLL_SECONDS, "no push yet: a client that cannot reach the VM is served at once"
    relay.pushed = True
    assert relay.poll_seconds() == POLL_SECONDS, "a request came through the Store lately (the start)"
    relay.stored_at = time.monotonic() - STORE_BUSY_SECONDS - 1
    assert relay.poll_seconds() == IDLE_POLL_SECONDS
    assert 60 / IDLE_POLL_SECONDS <= 3, "an idle session pushing its cells: a few Store operations a minute"
    relay.stored_at = time.monotonic()
    assert relay.poll_seconds() == POLL_SECONDS


#: The Store's operations, and those of them that read it.
STORE_OPERATIONS = ("get", "get_buffer", "get_file", "exists", "size", "updated", "list", "age", "now")
STORE_OPERATIONS += ("put", "create", "put_chunks", "put_addressed", "put_file", "delete", "delete_prefix")


def count_operations(store: Store, monkeypatch) -> list[tuple[str, str]]:
    """Every operation on ``store`` from now on, as (operation, key)."""
    done: list[tuple[str, str]] = []
    for name in STORE_OPERATIONS:
        real = getattr(store, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            done.append((_name, str(args[0]) if args else ""))
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    return done


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_pushed_cell_waits_on_no_store_operation_and_its_record_is_written_behind_it(
    burst, compute_emulator, monkeypatch
):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    assert session.record.push, "the channel is up"
    store = burst.store_for("gce")
    operations = count_operations(store, monkeypatch)
    api = burst.machines("gce").api
    requests: list[str] = []
    real_call = api.call
    monkeypatch.setattr(api, "call", lambda what, *a, **k: requests.append(what) or real_call(what, *a, **k))
    for n in range(2):  # the first cell, and one whose unchanged inputs the session's cells have stored already
        operations.clear()
        requests.clear()
        ns: dict[str, Any] = {"n": n}
        began = time.monotonic()
        job = burst.submit_cell("x = n + 1", capture("x = n + 1", ns, None), burst.options())
        assert job.wait(timeout=120) == State.SUCCEEDED, job.logs()
        job.outcome(ns).merge_into(ns)
        took = time.monotonic() - began
        assert ns["x"] == n + 1
        assert operations == [], "from the submission to the cell's values, the notebook waited on no Store operation"
        if took < QUICK_STALE_SECONDS:
            assert requests == [], (
                "nor on Compute Engine: the session's VM that ran the cell runs on, the session's own"
            )
        else:  # a machine so busy that the VM wrote no status for that long: whether it is gone is asked, only that
            assert set(requests) <= {"describing the VM"}, requests
        assert isinstance(job.wake, PushedNews)
        assert job.wake.over.wait(60), "the VM said the job's record is in the Store"
        assert operations == [], "the VM wrote the record: the notebook wrote nothing"
        record = Job(burst, job.id, store)  # the job as any reader finds it: from the Store alone
        assert record.state == State.SUCCEEDED and record.attempt == 1
        assert record.outcome({"n": n}).values["x"] == n + 1
    assert "handed over from the push channel" in burst.machines("gce").console(session.machine)


def test_the_next_pushed_cell_runs_while_the_record_of_the_one_before_is_still_being_written(burst, gcs_emulator):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    assert session.record.push, "the channel is up"
    released = gcs_emulator.hold_writes("terminal.json")  # the Store takes no job's end until released
    try:
        ns: dict[str, Any] = {}
        first = burst.submit_cell("x = 1", capture("x = 1", ns, None), burst.options())
        assert first.wait(timeout=120) == State.SUCCEEDED, first.logs()
        second = burst.submit_cell("y = x + 1", capture("y = x + 1", {"x": 1}, None), burst.options())
        assert second.wait(timeout=60) == State.SUCCEEDED, "the second cell waited for the first one's record"
        assert second.outcome(ns).values["y"] == 2
        assert isinstance(first.wake, PushedNews) and not first.wake.over.is_set(), "the first record is unwritten"
    finally:
        released.set()
    assert isinstance(second.wake, PushedNews)
    assert first.wake.over.wait(60) and second.wake.over.wait(60), "the VM said both records are in the Store"
    assert isinstance(first.store, overlay.Overlay) and not first.store.objects, "read and stored: let go of"
    store = burst.store_for("gce")
    assert [Job(burst, job.id, store).state for job in (first, second)] == [State.SUCCEEDED, State.SUCCEEDED]


def test_an_overlay_holds_a_cells_objects_and_writes_them_in_order(tmp_path):
    backing = open_store(str(tmp_path / "store"))
    held = overlay.Overlay(backing, "jobs/a/", overlay.HOLD, shared=["jobs/a/cancel.json"])
    held.put("jobs/a/spec.json", b"spec")
    held.create("jobs/a/status/0001.json", b"claim")
    with pytest.raises(AlreadyExists):
        held.create("jobs/a/status/0001.json", b"again")
    assert held.get("jobs/a/spec.json") == b"spec" and not backing.list("jobs/")
    assert held.list("jobs/a/") == ["jobs/a/spec.json", "jobs/a/status/0001.json"]
    with pytest.raises(NotFound):  # the job's folder is the two sides': nothing else is looked for
        held.get("jobs/a/terminal.json")
    held.create("jobs/a/cancel.json", b"cancel")  # anyone's to write: straight to the Store
    assert backing.get("jobs/a/cancel.json") == b"cancel"

    queued = overlay.Overlay(backing, "jobs/a/", overlay.QUEUE, ops=held.held)  # the VM, given the cell's objects
    sent: list[overlay.Op] = []
    queued.on_write = sent.append
    queued.put("jobs/a/result.pkl", b"result")
    queued.flush()
    assert backing.get("jobs/a/spec.json") == b"spec" and backing.get("jobs/a/result.pkl") == b"result"
    assert sent == [("put", "jobs/a/result.pkl", b"result")]
    for op in sent:
        held.receive(op)
    assert held.get("jobs/a/result.pkl") == b"result"

    read_first = overlay.Overlay(backing, "jobs/c/", overlay.HOLD)  # a cell read before its record is stored
    read_first.put("jobs/c/spec.json", b"spec c")
    read_first.forget()
    assert read_first.get("jobs/c/spec.json") == b"spec c", "held until the record is in the Store"
    read_first.stored()
    assert not read_first.objects and not read_first.local

    backing.put("jobs/a/status/0001.json", b"the VM's newer status")
    lost = overlay.Overlay(backing, "jobs/b/", overlay.HOLD)  # a cell whose VM went before it wrote the record
    lost.put("jobs/b/spec.json", b"spec b")
    lost.receive(("put", "jobs/b/status/0001.json", b"running"))
    lost.release()
    assert backing.get("jobs/b/spec.json") == b"spec b" and backing.get("jobs/b/status/0001.json") == b"running"
    assert not lost.local and lost.mode == overlay.THROUGH


def test_a_pushed_cell_whose_channel_falls_silent_or_is_refused_is_written_to_the_store_by_the_notebook(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(mailbox, "SILENT_SECONDS", 0.5)
    backing = open_store(str(tmp_path / "store"))
    for answer, carried in ((b'{"carried": true}\n', True), (b"{}\n", False)):
        held = overlay.Overlay(backing, "jobs/c/", overlay.HOLD)
        held.put("jobs/c/spec.json", b"spec")
        handed: list[bool] = []
        ours, relay = socket.socketpair()
        with ours, relay:
            news = PushedNews(ours, held, functools.partial(handed.append, True))
            relay.sendall(answer)
            if carried:
                relay.sendall(sessionpush.news_line(sessionpush.OBJECTS, [("put", "jobs/c/status/0001.json", b"run")]))
            assert news.over.wait(60), "the notebook gave the channel up"
        assert backing.get("jobs/c/spec.json") == b"spec", "the job is in the Store, written by the notebook"
        assert handed == ([] if carried else [True]), "a cell the relay did not take goes through the Store"
        if carried:
            assert backing.get("jobs/c/status/0001.json") == b"run", "with what the VM sent"
        assert not held.local
        backing.delete_prefix("jobs/")
