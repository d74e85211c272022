"""What an idle session VM costs in Store operations: its relay's listings of the mailbox, counted on a wrapped
Store while the relay's own clock runs through idle minutes (its loop: list, then wait ``poll_seconds()``)."""

from __future__ import annotations

import threading
import time
import types
from collections import Counter
from typing import Any

import pytest
from support import wait_until

from nbburst.agent.session import relay as relay_module
from nbburst.agent.session.relay import IDLE_POLL_SECONDS, POLL_SECONDS, STORE_BUSY_SECONDS, Relay
from nbburst.protocol import sessionwire
from nbburst.store import Store, open_store
from nbburst.testing.metadata import MetadataServer


class CountingStore:
    """A Store whose every call is counted by name (what a bucket bills as operations)."""

    def __init__(self, store: Store):
        self.store, self.ops = store, Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.ops[name] += 1
            return attr(*args, **kwargs)

        return counted


@pytest.fixture
def clock(monkeypatch):
    """The relay's monotonic clock, moved by the test instead of by waiting."""
    now = [1000.0]
    monkeypatch.setattr(relay_module, "time", types.SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    return now


def idle_ops_per_minute(relay: Relay, store: CountingStore, clock: list[float], minutes: float) -> float:
    """The relay's loop for ``minutes`` of its clock with no request: Store operations per minute."""
    store.ops.clear()
    end = clock[0] + minutes * 60
    while clock[0] < end:
        relay.step()
        clock[0] += relay.poll_seconds()
    return sum(store.ops.values()) / minutes


def test_an_idle_session_whose_notebook_pushes_lists_its_mailbox_a_few_times_a_minute(tmp_path, clock):
    store = CountingStore(open_store(str(tmp_path / "store")))
    relay = Relay(store, "session-idle-1", bytes(16), 0, str(tmp_path))
    # Before any cell, or while a client writes its requests to the Store, it lists every POLL_SECONDS.
    fast = idle_ops_per_minute(relay, store, clock, 1)
    assert fast == pytest.approx(60 / POLL_SECONDS, rel=0.02) and set(store.ops) == {"list"}

    relay.pushed = True  # a cell came down the push channel (the firewall rule admits the notebook)
    relay.stored_at = clock[0] - STORE_BUSY_SECONDS - 1  # and none through the Store for a while
    idle = idle_ops_per_minute(relay, store, clock, 60)
    assert set(store.ops) == {"list"} and idle <= 5, f"{idle} Store operations a minute"

    # A request through the Store (a client that could not push) brings the fast listing back for a while.
    place, raw = sessionwire.seal_request(bytes(16), "session-idle-1", 0, sessionwire.STATE)
    store.store.put(place, raw)
    relay.step()  # carried (its answer cannot be published: no warm parent here), then deleted
    assert not store.store.list(sessionwire.requests_prefix("session-idle-1"))
    busy = idle_ops_per_minute(relay, store, clock, STORE_BUSY_SECONDS / 60)
    assert busy > 10 * idle
    assert idle_ops_per_minute(relay, store, clock, 60) <= 5, "quiet again: a few a minute"
    print(
        f"idle session: {idle:.1f} Store operations a minute with the push channel, {fast:.0f} for "
        f"{STORE_BUSY_SECONDS:.0f} s after its start or a request through the Store"
    )


def test_an_idle_session_without_push_lists_a_few_times_a_minute_and_its_wake_attribute_brings_a_request_at_once(
    tmp_path, clock
):
    """No push channel (no firewall rule for its port): once quiet, the relay lists slowly while it watches its
    instance's wake attribute on the metadata server, whose change (the client's setMetadata after writing a
    request) makes it list at once instead of at its next slow listing."""
    store = CountingStore(open_store(str(tmp_path / "store")))
    relay = Relay(store, "session-idle-2", bytes(16), 0, str(tmp_path))
    with MetadataServer({f"instance/attributes/{sessionwire.WAKE_ATTRIBUTE}": "0"}) as server:
        watch = threading.Thread(target=relay.watch_wake, args=(server.host,), daemon=True)
        watch.start()
        wait_until(lambda: relay.wakeable, what="the relay watches its wake attribute")
        relay.stored_at = clock[0] - STORE_BUSY_SECONDS - 1  # no request through the Store for a while
        idle = idle_ops_per_minute(relay, store, clock, 60)
        assert set(store.ops) == {"list"} and idle <= 5, f"{idle} Store operations a minute without push"
        assert relay.poll_seconds() == IDLE_POLL_SECONDS and not relay.woken.is_set()

        place, raw = sessionwire.seal_request(bytes(16), "session-idle-2", 0, sessionwire.STATE)
        store.store.create(place, raw)  # the client's request, then its wake
        server.set(f"instance/attributes/{sessionwire.WAKE_ATTRIBUTE}", place.rsplit("/", 1)[-1])
        assert relay.woken.wait(120), "the change of the attribute wakes the relay"
        relay.step()  # the listing the wake brings, not the slow one IDLE_POLL_SECONDS later
        assert not store.store.list(sessionwire.requests_prefix("session-idle-2")), "carried, then deleted"
        assert relay.poll_seconds() == POLL_SECONDS, "a request came through the Store: listing fast for a while"
        relay.over.set()  # the server's stop answers the watch's hanging read (503), and the watch ends
    watch.join(timeout=120)
    assert not watch.is_alive()
    print(f"idle session without push, watching its wake attribute: {idle:.1f} Store operations a minute")


def test_a_relay_whose_instance_has_no_wake_attribute_keeps_listing_fast(tmp_path, clock):
    relay = Relay(open_store(str(tmp_path / "store")), "session-idle-3", bytes(16), 0, str(tmp_path))
    with MetadataServer({"instance/attributes/other": "1"}) as server:
        relay.watch_wake(server.host)  # a 404: the watch ends at once
    relay.stored_at = clock[0] - STORE_BUSY_SECONDS - 1
    assert not relay.wakeable and relay.poll_seconds() == POLL_SECONDS, "nothing would wake a slow listing"
