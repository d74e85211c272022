"""Supervision: a preempted job is relaunched by whoever is around, wherever that is.

- :mod:`.supervisor`: one job's supervisor (relaunch it after a preemption, under the job's lease, with
  backoff and zone rotation when there is no capacity); :mod:`.history`: its attempts as a table.
- :mod:`.loop`: the one loop that supervises every unfinished job of a Store, round after round.

Where it runs, each host in the module named after the place:

- the waiting cell: ``Job.wait`` steps its own job's supervisor on every poll (client/job.py), the fast
  path while the notebook waits;
- the Jupyter server: :mod:`nbburst.server.supervision`, the loop in a thread of the server, for detached
  jobs and kernels that were shut down;
- this computer: :mod:`.laptop`, the loop as a background process of its own that a submission on the local
  backend starts, for jobs whose submitter has exited with no server around;
- the watcher VM: :mod:`.watchervm`, the loop on a small VM on Google's side that a submission on Compute
  Engine makes sure of, so that a detached job survives with the laptop closed.

``nbburst supervise`` (nbburst/ui/cli.py) runs the loop in a terminal too. Any number of them may run at once:
the job's lease keeps them from relaunching the same attempt twice.
"""
