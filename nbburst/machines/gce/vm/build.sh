# shellcheck shell=bash
# nbburst: the startup script of an image builder VM (`nbburst image build`), after prelude.sh.
# The image's python3 runs bake.py: the notebook's Python (from uv when the image has another version), its
# packages and nbburst in a venv on the boot disk, as a job's bootstrap on a stock image would; then it says
# SUCCESS and powers off. WANT is the notebook's Python (nbburst/machines/gce/image.py fills it in).
# shellcheck disable=SC2034  # say() in prelude.sh reads it
SAY=nbburst-image-build
fail() {
  say "FAILED: $1"
  power_off 1
}
vm_folder || fail "cannot create $BASE"
WANT="__PYTHON__"
PY="$(command -v python3 || command -v python)"
say "begin (Python $WANT wanted, the image's: ${PY:-none}, folder: $BASE)"
[ -n "$PY" ] || fail "this image has no python3 to run the build"
write_programs "$BASE/vm" || fail "cannot write the build's programs to $BASE/vm"
"$PY" "$BASE/vm/bake.py" "$BASE" "$WANT" || fail "the packages or nbburst could not be installed (see above)"
rm -rf "$BASE/wheels" "$BASE/vm" "$BASE/uv-cache"
say "SUCCESS: the disk is ready to become an image"
power_off 0
