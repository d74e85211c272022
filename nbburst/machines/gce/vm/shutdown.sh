# shellcheck shell=bash
# nbburst: the shutdown script of a job's VM, after prelude.sh (best effort: a spot VM has 30 s).
# Marks the attempt PREEMPTED when the agent could not say so itself (python -m nbburst.agent.machine.gce shutdown).
# shellcheck disable=SC2034  # say() in prelude.sh reads it
SAY=nbburst-shutdown
BASE="$(vm_base)"
export NBBURST_HOME="$BASE"  # the agent module reads the job key there
say "begin"
sync
if [ -x "$BASE/venv/bin/python" ]; then
  timeout 25 "$BASE/venv/bin/python" -m nbburst.agent.machine.gce shutdown || true
fi
sync
say "done"
