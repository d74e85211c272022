"""The agent: the only nbburst code that runs on the machine.

It reads the job from the Store, checks the environment, runs the cell in a
child of its own session that dies with it (so a timeout or cancellation can
stop everything the cell started, and nothing outlives the agent), ships its
output and status back through the Store, commits the verdict the child hands
over unless a later attempt has taken over, and ends its machine. It shares nothing with the client but the Store
and the job protocol (:mod:`nbburst.protocol.job`).
"""
