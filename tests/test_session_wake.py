"""A gce session whose notebook cannot reach the VM's push channel: once quiet, its relay lists the Store slowly,
and a cell written there wakes it through the instance's wake attribute (setMetadata, then the metadata server's
wait-for-change on the VM), on the Compute Engine, GCS and Secret Manager emulators."""

from __future__ import annotations

from typing import Any

import pytest
from support import unreachable_push, wait_until

from nbburst.client.burst import Burst
from nbburst.client.capture import capture
from nbburst.client.session import mailbox
from nbburst.protocol import sessionwire
from nbburst.protocol.job import State


@pytest.fixture
def burst(gce_env, compute_emulator, monkeypatch):
    # The relay is quiet 1 s after a request through the Store, and then would list only once an hour: a cell that
    # runs at all was brought by the wake.
    compute_emulator.instance_env.update({"NBBURST_SESSION_BUSY": "1", "NBBURST_SESSION_IDLE_POLL": "3600"})
    monkeypatch.setattr(mailbox, "QUIET_SECONDS", 0.0)  # every request through the Store wakes the relay
    b = Burst()
    yield b
    for session in b.sessions.all():
        b.sessions.stop(session.name)


@pytest.mark.compute_emulator(operation_delay=0.02)
def test_a_cell_through_the_store_to_a_quiet_session_wakes_its_relay_through_the_metadata_server(
    burst, compute_emulator
):
    session = burst.sessions.start(cores=2, idle="5m", timeout="10m", preload=[])
    machines = burst.machines("gce")
    # quiet: a cell written to the Store now is found only by the wake
    wait_until(lambda: "it lists the requests every 3600.0 s" in machines.console(session.machine))
    unreachable_push(burst.sessions.folder, session.name)

    ns: dict[str, Any] = {}
    code = "a = 41 + 1"
    job = burst.submit_cell(code, capture(code, ns, None), burst.options())
    job.wait(timeout=300)
    assert job.state == State.SUCCEEDED, job.logs()
    job.outcome(ns).merge_into(ns)
    assert ns["a"] == 42
    console = machines.console(session.machine)
    woken = console.find("woken by the nbburst-wake attribute")
    handed = console.find(f"cell {job.url} attempt 1 handed over from the Store")
    assert 0 <= woken < handed, f"the wake brought the cell, not a listing:\n{console[-3000:]}"
    wakes = [r for r in compute_emulator.request_log if r["path"].endswith(f"/instances/{session.machine}/setMetadata")]
    assert wakes, "the client set the wake attribute with instances.setMetadata"
    zone = wakes[-1]["path"].split("/zones/")[1].split("/")[0]
    items = compute_emulator.api_get(compute_emulator.project, zone, session.machine)["metadata"]["items"]
    attributes = {i["key"]: i["value"] for i in items}
    assert attributes[sessionwire.WAKE_ATTRIBUTE] != "0" and "nbburst-session" in attributes, "the others kept"

    # The client's wake set on an instance read before another change: its stale fingerprint is refused (412
    # conditionNotMet), the instance read again and the change made.
    stale = machines.api.instance(zone, session.machine)
    machines.wake_session(session.machine, "second")
    count = len(compute_emulator.request_log)
    machines._set_item(stale, zone, sessionwire.WAKE_ATTRIBUTE, "third", "waking the session's relay")
    sent = [r["path"] for r in compute_emulator.request_log[count:] if r["method"] == "POST"]
    assert [p.rsplit("/", 1)[-1] for p in sent] == ["setMetadata", "setMetadata"], "refused once, then made"
    items = compute_emulator.api_get(compute_emulator.project, zone, session.machine)["metadata"]["items"]
    assert {i["key"]: i["value"] for i in items}[sessionwire.WAKE_ATTRIBUTE] == "third"
