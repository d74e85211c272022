# shellcheck shell=bash
# nbburst: the startup script of a watcher VM, after prelude.sh. Runs on every boot: the image's python3 runs
# watchboot.py (nbburst in a venv on the disk), then the watcher supervises the Store's jobs until none is
# left and deletes its VM; the VM powers off whatever happens.
# shellcheck disable=SC2034  # say() in prelude.sh reads it
SAY=nbburst-watch
powerdown() {
  say "$1; powering off"
  power_off 1
}
vm_folder || powerdown "cannot create $BASE"
PY="$(command -v python3 || command -v python)"
say "begin (python: ${PY:-none}, folder: $BASE)"
[ -n "$PY" ] || powerdown "the image has no python3"
write_programs "$BASE/vm" || powerdown "cannot write the bootstrap to $BASE/vm"
"$PY" "$BASE/vm/watchboot.py" "$BASE" || powerdown "could not install nbburst on this VM (see above)"
say "watcher starting"
"$BASE/watcher-venv/bin/python" -m nbburst.client.supervision.watchervm "$BASE"
say "watcher exited with status $?"
powerdown "the watcher is done"
