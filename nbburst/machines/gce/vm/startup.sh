# shellcheck shell=bash
# nbburst: the startup script of a job's VM, after prelude.sh. Runs on every boot: the image's python3 runs
# bootstrap.py (the notebook's Python and packages, and the job's nbburst, in a venv on the disk), then the
# agent runs from the venv; the VM powers off whatever happens.
# shellcheck disable=SC2034  # say() in prelude.sh reads it
SAY=nbburst-startup
powerdown() {
  say "$1; powering off"
  power_off 1
}
vm_folder || powerdown "cannot create $BASE"
PY="$(command -v python3 || command -v python)"
[ -n "$PY" ] || { [ -x "$BASE/venv/bin/python" ] && PY="$BASE/venv/bin/python"; }
say "begin (python: ${PY:-none}, folder: $BASE)"
[ -n "$PY" ] || powerdown "the image has no python3"
write_programs "$BASE/vm" || powerdown "cannot write the bootstrap to $BASE/vm"
"$PY" "$BASE/vm/bootstrap.py" "$BASE" || powerdown "could not install nbburst on this VM (see above)"
say "agent starting"
"$BASE/venv/bin/python" -m "${PROGRAM:-nbburst.agent}" "$(cat "$BASE/job-url")"
say "agent exited with status $?"
powerdown "the agent is done"
