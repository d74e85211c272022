"""What the client and the agent agree on: the job's states and folder layout, the payload
format, signing and the seals of a job folder's objects, the commit of a job's end and the
fence between attempts, an attempt's processes (their marker), environment manifests, the
wheel shipped to the machine, durations, prices and the metadata server. Imports nothing
above the Store."""
