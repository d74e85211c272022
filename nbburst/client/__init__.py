"""The notebook side: :class:`Burst` submits jobs, :class:`Job` follows one, supervision relaunches
preempted ones (while a cell waits, and in a background process or on Compute Engine's side while none does,
see supervision), capture finds what a cell reads and writes."""

from .burst import Burst
from .job import Job

__all__ = ["Burst", "Job"]
