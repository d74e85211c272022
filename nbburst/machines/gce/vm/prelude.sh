#!/bin/bash
# nbburst: the start of every script a VM runs; startup.sh, shutdown.sh or build.sh follows it
# (assembled by nbburst/machines/gce/vm/__init__.py). It defines what they share.
export GCE_METADATA_HOST="${GCE_METADATA_HOST:-metadata.google.internal}"

# say MESSAGE: a line "$SAY: MESSAGE t=EPOCH" on the serial console (the client and bench/launch.py read them).
say() { echo "${SAY:-nbburst}: $* t=$(date +%s.%N 2>/dev/null || date +%s)"; }

# power_off STATUS: flush the disks and power the VM off (on the emulator, the emulated VM).
power_off() {
  sync
  poweroff || sudo -n poweroff || shutdown -h now
  exit "$1"
}

# vm_base: nbburst's folder on the boot disk.
vm_base() {
  if [ -n "${NBBURST_HOME:-}" ]; then printf '%s\n' "$NBBURST_HOME"
  elif [ -n "${NBBURST_EMULATOR_DISK:-}" ]; then printf '%s\n' "$NBBURST_EMULATOR_DISK/nbburst"  # the emulator
  else printf '%s\n' /var/lib/nbburst; fi
}

# vm_env BASE: uv (fetched into BASE/bin when the image has none), its cache and the Pythons it installs live
# under BASE, for the programs of the script and the agent after them.
vm_env() {
  export PATH="$1/bin:$PATH" UV_CACHE_DIR="$1/uv-cache" UV_PYTHON_INSTALL_DIR="$1/python" UV_NO_PROGRESS=1
}

# vm_folder: nbburst's folder on the boot disk as BASE, created, with the environment its programs run in.
# The guest agent runs a startup script as a systemd service: no HOME, no USER, in / (see
# https://cloud.google.com/compute/docs/instances/startup-scripts/linux), while users' code (matplotlib,
# Hugging Face, Path.home()) needs a home: BASE/home when none is given, and a UTF-8 locale.
vm_folder() {
  BASE="$(vm_base)"
  HOME="${HOME:-$BASE/home}"
  USER="${USER:-$(id -un 2>/dev/null || echo root)}"
  export NBBURST_HOME="$BASE" PYTHONUNBUFFERED=1 HOME USER LOGNAME="$USER" LANG="${LANG:-C.UTF-8}"
  vm_env "$BASE"
  mkdir -p "$BASE" "$HOME"
}
