"""The notebook side: :class:`Burst` submits jobs, :class:`Job` follows one, the supervisor
relaunches preempted ones (also in the background, see daemon, and on Compute Engine's side, see
watch), capture finds what a cell reads and writes."""

from .burst import Burst, Job

__all__ = ["Burst", "Job"]
