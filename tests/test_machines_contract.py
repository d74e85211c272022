"""The Machines contract (:mod:`nbburst.testing.contracts.machines`), run against nbburst's adapters: LocalMachines,
and GCEMachines on the Compute emulator. Only the fixtures that reach each adapter are here."""

from __future__ import annotations

from typing import Any

import pytest
from support.gce import Compute, instance

from nbburst.client.burst import Burst
from nbburst.machines.base import Machines
from nbburst.testing.contracts.machines import MachinesContract, NoCapacityContract

pytestmark = [pytest.mark.compute_emulator(operation_delay=0.02, preemption_grace=1.0), pytest.mark.timeout(180)]


class TestLocalMachines(MachinesContract):
    """Each machine is an agent process group on this computer; the jobs' Store is a local folder."""

    @pytest.fixture
    def burst(self, burst_env: Any) -> Burst:
        return Burst()

    @pytest.fixture
    def machines(self, burst: Burst) -> Machines:
        return burst.machines("local")


class TestGCEMachines(MachinesContract, NoCapacityContract):
    """Each machine is a VM of the Compute emulator; the jobs' Store is a bucket of the GCS emulator."""

    @pytest.fixture
    def burst(self, gce_env: Any) -> Burst:
        return Burst()

    @pytest.fixture
    def machines(self, burst: Burst) -> Machines:
        return burst.machines("gce")

    @pytest.fixture
    def size(self) -> dict[str, Any]:
        return {"cores": 2}  # the smallest machine the emulator's catalogue offers

    @pytest.fixture
    def someone_elses_machine(self, compute_emulator: Any) -> None:
        """A VM in the same project that is not nbburst's."""
        Compute(compute_emulator).create(instance("someone-elses-vm"))

    @pytest.fixture
    def exhaust(self, compute_emulator: Any) -> Any:
        def exhaust() -> str:
            compute_emulator.set_zone_capacity(compute_emulator.zone, available=False)
            return compute_emulator.zone

        return exhaust
