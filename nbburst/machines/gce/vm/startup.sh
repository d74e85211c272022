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
# the package index the bootstrap found in the metadata (c.NBBurst.package_index): the agent's installs use it too
INDEX="$(cat "$BASE/package-index" 2>/dev/null)"
[ -z "$INDEX" ] || export UV_DEFAULT_INDEX="$INDEX" PIP_INDEX_URL="$INDEX"
# The agent runs in a session of its own, its output in its own log file that tail copies to the serial
# console. The guest agent's runner reads this script's output line by line (a line over 64 KiB stops it) and,
# at a spot VM's soft-off, is stopped alone (KillMode=process): this script's pipe then breaks and nothing
# is signalled. Nothing the agent prints can block or kill it that way; the metadata server tells it of the
# preemption (https://cloud.google.com/compute/docs/instances/spot#preemption-process).
LOG="$BASE/agent.log"
: >>"$LOG"
SEEN="$(stat -c %s "$LOG")"  # a restarted VM's log goes on: the console gets this boot's part
say "agent starting (log: $LOG)"
setsid -w "$BASE/venv/bin/python" -m "${PROGRAM:-nbburst.agent}" "$(cat "$BASE/job-url")" >>"$LOG" 2>&1 </dev/null &
AGENT=$!
tail -c +"$((SEEN + 1))" -s 0.5 --pid="$AGENT" -F "$LOG" 2>/dev/null &
TAIL=$!
wait "$AGENT"
STATUS=$?
sleep 1
kill "$TAIL" 2>/dev/null  # a console that stopped reading (a line over 64 KiB) holds it
say "agent exited with status $STATUS"
powerdown "the agent is done"
