"""What the client and the agent agree on: the job's states and folder layout, the payload
format, signing, the commit of a job's end, environment manifests, the wheel shipped to the
machine, durations, prices and the metadata server. Imports nothing above the Store."""
