"""Waiting on Compute Engine's operations as Google answers them.

``zoneOperations.wait`` returns after about 2 minutes with the operation still running
(https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait); a wait that gets no answer
says nothing of the VM being created, which must not be deleted for it."""

from __future__ import annotations

import pytest
from support.gce import submit

from nbburst.client.burst import Burst
from nbburst.machines.gce.api import ComputeAPI
from nbburst.protocol.job import State

pytestmark = pytest.mark.timeout(300)


# The emulator answers a wait after 1 s (Google's 2 minutes, shortened), the insert takes 6 s and more, and the
# client gives each wait 0.5 s: every wait of the launch times out on the way, as one whose own timeout is
# shorter than Google's 2 minutes would.
@pytest.mark.compute_emulator(operation_delay=6.0, operation_wait_timeout=1.0)
def test_a_wait_without_answer_is_asked_again_and_the_vm_being_created_stays(gce_env, compute_emulator, monkeypatch):
    monkeypatch.setattr(ComputeAPI, "wait_request_s", 0.5)
    job = submit(Burst(), sum, [1, 2], cores=2)
    assert job.wait(timeout=240) == State.SUCCEEDED and job.result() == 3 and job.attempt == 1
    requests = [(r["method"], r["path"]) for r in compute_emulator.request_log]
    inserts = [p for m, p in requests if m == "POST" and p.endswith("/instances")]
    waits = [p for m, p in requests if p.endswith("/wait")]
    assert len(inserts) == 1 and len(waits) > 1
