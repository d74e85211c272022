"""What an idle session VM costs in Store operations: its relay's listings of the mailbox, counted on a wrapped
Store while the relay's own clock runs through idle minutes (its loop: list, then wait ``poll_seconds()``)."""

from __future__ import annotations

import time
import types
from collections import Counter
from typing import Any

import pytest

from nbburst.agent.session import relay as relay_module
from nbburst.agent.session.relay import POLL_SECONDS, STORE_BUSY_SECONDS, Relay
from nbburst.protocol import sessionwire
from nbburst.store import Store, open_store


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
        f"idle session: {idle:.1f} Store operations a minute with the push channel, {fast:.0f} without "
        f"(or for {STORE_BUSY_SECONDS:.0f} s after a request through the Store)"
    )
