"""The agent: the nbburst code that runs on a job's machine (the watcher VM runs the client's supervision loop).

It reads the job from the Store, checks the environment, runs the cell in a
child of its own session that dies with it (so a timeout or cancellation can
stop everything the cell started, and nothing outlives the agent), ships its
output and status back through the Store, commits the verdict the child hands
over unless a later attempt has taken over, and ends its machine. It shares nothing with the client but the Store
and the job protocol (:mod:`nbburst.protocol.job`).

Its rooms, by role:

- ``attempt/``: one attempt of a job: the controller (``python -m nbburst.agent JOB_URL``, never runs user
  code) and the runner it forks (runs the cell in a kernel-like IPython), with what passes between them.
- ``session/``: a warm session's machine: the warm parent, each cell's controller forked from it, the relay
  that carries cells through the Store on Compute Engine, and what the parent holds for its cells.
- ``machine/``: the machine itself: its packages matched to the notebook's, its GPUs, ending its VM.
- ``hooks/``: patches applied to the cell's libraries on import (tqdm and joblib progress, joblib task reuse).
- ``scaleout.py``: ``--workers``: the Dask scheduler beside the cell and the workers that join it.
"""
