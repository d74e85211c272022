"""The bootstrap of a watcher VM: nbburst in a venv on the boot disk, for
``python -m nbburst.client.supervision.watchervm``.

``python3 watchboot.py BASE``, run by watch.sh at every boot with the image's own Python (standard library
only: see vmlib.py). The instance metadata names the Store (``nbburst-watch-root``) and the client's nbburst
wheel there (``nbburst-watch-wheel``: blob, SHA-256, file name, and the distributions nbburst needs). The
venv ``BASE/watcher-venv`` sees the image's packages when the image has every one of them (an image prepared for
nbburst); otherwise uv makes it from the image's Python and installs the wheel with its dependencies from
the package index. A venv that holds that very wheel already (a restart) is kept.

Exit status 0 = the venv is ready; otherwise the serial console says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

from vmlib import (
    Bucket,
    Console,
    Unreadable,
    clean_venv,
    has_distributions,
    has_pip,
    install_wheels,
    md,
    package_index,
    python_minor,
    save_wheel,
    shared_venv,
    split_gs,
    uv_binary,
    uv_install,
)

console = Console("nbburst-watch")
say, die = console.say, console.die


def install(base: str, venv: str, path: str, requires: list[str]) -> int:
    """Make the venv and install the wheel at ``path`` into it; the installer's exit status."""
    python = os.path.join(venv, "bin", "python")
    if has_distributions(requires):
        shared_venv(venv)
        say("venv created (it sees the image's packages)")
        uv = shutil.which("uv")
        if uv is None and not has_pip(python):
            uv = uv_binary(base, say)
        return install_wheels(uv, python, [path])
    uv = uv_binary(base, say)
    clean_venv(uv, venv, python_minor(), say)
    say(f"installing nbburst and its {len(requires)} dependencies with uv")
    return uv_install(uv, python, ["--compile-bytecode", path], package_index())[0]


def main(base: str) -> None:
    root = md("instance/attributes/nbburst-watch-root")
    wheel = json.loads(md("instance/attributes/nbburst-watch-wheel") or "{}")
    if not root or not root.startswith("gs://") or not wheel:
        die("instance metadata has no nbburst-watch-root/nbburst-watch-wheel: this VM was not made by nbburst")
    venv = os.path.join(base, "watcher-venv")  # not a baked image's job venv, which lacks nbburst's own needs
    marker = os.path.join(venv, ".nbburst-wheel")
    try:
        with open(marker) as f:
            if f.read().strip() == wheel["sha256"]:
                say("nbburst already installed")
                return
    except OSError:
        pass
    shutil.rmtree(venv, ignore_errors=True)  # another wheel, or a boot that ended half way
    bucket_name, prefix = split_gs(root)
    try:
        data = Bucket(bucket_name).read(prefix + wheel["blob"])
        if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
            die(f"{wheel['blob']} does not match its SHA-256; refusing to install it")
        status = install(base, venv, save_wheel(base, wheel["file"], data), list(wheel.get("requires") or []))
    except Unreadable as exc:
        die(str(exc))
    if status:
        die(f"could not install {wheel['file']} (see above)")
    with open(marker, "w") as f:
        f.write(wheel["sha256"])
    say(f"nbburst installed ({wheel['file']})")


if __name__ == "__main__":
    main(sys.argv[1])
