"""A job as the job view sees it, without a Store or a machine: the view's tests set its info and records."""

from __future__ import annotations

import time


class FakeTail:
    def __init__(self):
        self.records: list[dict] = []

    def poll(self):
        records, self.records = self.records, []
        yield from records


class FakeJob:
    """Just what JobView reads: info(), tail(), name, id, supervise(), cancel()."""

    def __init__(self, **info):
        now = time.time()
        self.id, self.name = "b20261121-000000-abcdef", "search"
        self._tail = FakeTail()
        self.cancelled = False
        self.data = {
            "id": self.id,
            "name": self.name,
            "state": "RUNNING",
            "attempt": 2,
            "backend": "gce",
            "kind": "cell",
            "machine": {
                "type": "n2-standard-64",
                "cores": 64,
                "memory_gb": 256,
                "gpu": None,
                "gpu_count": 0,
                "spot": True,
                "zone": "us-central1-a",
            },
            "created": now - 90,
            "started": now - 60,
            "ended": None,
            "elapsed_s": 60.0,
            "cost_usd": 0.0123,
            "cost_per_hour_usd": 0.7588,
            "saving_usd": 0.04,
            "cost": {"total": 0.0123, "on_demand": 0.0523, "saving": 0.04, "per_hour": 0.7588, "seconds": 60},
            "progress": {"done": 45, "total": 100, "desc": "fit"},
            "message": "",
        }
        self.data.update(info)

    def info(self):
        return dict(self.data)

    def tail(self):
        return self._tail

    def supervise(self):
        from nbburst.protocol.job import State

        return State(self.data["state"])

    def cancel(self):
        self.cancelled = True
        self.data.update(state="CANCELLED", ended=time.time(), message="cancelled by the user")
