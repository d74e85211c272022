"""The programs a Compute Engine VM runs: real files shipped with nbburst, read here and never imported.

A VM receives its programs as instance metadata, each one bash script (``startup-script``,
``shutdown-script``). :func:`script` assembles one from the files of this folder:

* ``prelude.sh``, what every script starts with: ``say`` (serial-console lines), ``power_off``,
  ``vm_base`` (nbburst's folder on the boot disk: ``/var/lib/nbburst``; under the emulator, the
  instance's disk folder) and ``vm_env`` (uv, its cache and its Pythons under that folder);
* a ``write_programs FOLDER`` function that writes the script's Python programs there (the script calls
  it, then runs them from ``BASE/vm``). They run before nbburst is on the VM, with the image's own Python
  (any version) and nothing but its standard library and the image's standard tools: the bucket through
  Cloud Storage's JSON API with the VM's token, packages with uv, which they fetch from the package index
  when the image has none. ``vmlib.py`` holds what they share;
* the script's own body.

The scripts are the same for every job: what differs (the job URL, the key's secret, the attempt) is read
from the instance's metadata attributes, so a restarted VM picks up the new attempt without new scripts.

A job's VM, on every boot (``startup.sh``): ``bootstrap.py`` reads the job's signed
``dist/manifest.json``, checks its HMAC with the job key (read from the Secret Manager secret the metadata
names, with the VM's token: only the VM's service account may read it), and makes the venv on
the disk hold the notebook's environment and the client's nbburst wheel (on a stock image: the notebook's
Python minor version from uv, the stored environment of ``ROOT/envs/`` the manifest names, then the
notebook's versions of what is still missing; nothing when the venv is there already: a restart, or an
image baked by ``nbburst image build``); then ``python -m nbburst.agent JOB_URL`` runs the job, and the
agent deletes the VM when the job ends. The guest agent runs a startup script as a systemd service (no HOME,
in ``/``, its output read line by line through a pipe that breaks at a spot VM's soft-off, when only the
script's runner is stopped): so the VM's programs get HOME (``BASE/home``), USER and LANG from ``prelude.sh``,
and the agent runs in a session of its own with its output in ``BASE/agent.log``, which ``tail`` copies to the
serial console; it hears of a preemption from the metadata server. Whatever happens, the script powers the
VM off at the end, so a broken boot never idles: the client then shows the serial console tail and deletes
the VM. On shutdown (``shutdown.sh``, best effort: spot VMs have 30 s) ``python -m nbburst.agent.machine.gce
shutdown`` marks the attempt PREEMPTED if the agent could not.

A watcher VM (``watch.sh``): ``watchboot.py`` installs the client's nbburst wheel (with its dependencies
unless the image has them), then ``python -m nbburst.client.supervision.watchervm`` relaunches the Store's
preempted jobs until none is left and deletes its VM.

A warm session's VM boots the same way, from the session's own manifest (its key is the session's secret), and
runs ``python -m nbburst.agent.session.relay`` instead of the agent (:func:`session_startup_script`).

An image builder (``build.sh``): ``bake.py`` makes the venv as the bootstrap does on a stock image and
installs the notebook's packages and the wheel into it (see :mod:`nbburst.machines.gce.image`).

Each step prints ``<script>: <step> t=<epoch>`` to the serial console: the client reads how a boot
ended from these lines, and bench/launch.py the boot's timeline.
"""

from __future__ import annotations

from importlib.resources import files

#: The instance metadata key naming the package index the VM installs from (c.NBBurst.package_index): the
#: bootstrap gives it to uv (``UV_DEFAULT_INDEX``) and pip (``PIP_INDEX_URL``), and leaves it in
#: ``BASE/package-index`` for startup.sh to give the agent (see ``vmlib.use_package_index``).
PACKAGE_INDEX_KEY = "nbburst-package-index"


def read(name: str) -> str:
    """The text of the file ``name`` of this folder."""
    return files(__name__).joinpath(name).read_text()


def programs_writer(*programs: str) -> str:
    """A bash function ``write_programs FOLDER`` that writes these files of this folder into FOLDER."""
    writes = []
    for name in programs:
        end = "NBBURST_" + name.replace(".", "_").upper()
        writes.append(f"  cat > \"$1/{name}\" <<'{end}' || return 1\n{read(name).rstrip()}\n{end}\n")
    return 'write_programs() {  # FOLDER\n  mkdir -p "$1" || return 1\n' + "".join(writes) + "}\n"


def script(body: str, *programs: str, program: str = "") -> str:
    """A script of the VM: ``prelude.sh``, then (with ``programs``) :func:`programs_writer`, then ``body``;
    ``program``: the Python module startup.sh runs once nbburst is installed (default: the agent)."""
    chosen = f"PROGRAM={program}\n" if program else ""
    parts = [read("prelude.sh"), chosen, programs_writer(*programs) if programs else "", read(body)]
    return "\n".join(part for part in parts if part)


def startup_script() -> str:
    """The ``startup-script`` of a job's VM."""
    return script("startup.sh", "vmlib.py", "bootstrap.py")


def session_startup_script() -> str:
    """The ``startup-script`` of a warm session's VM: a job VM's, whose program is the session's relay (it runs
    the warm parent and carries the client's requests to it, nbburst/agent/session/relay.py)."""
    return script("startup.sh", "vmlib.py", "bootstrap.py", program="nbburst.agent.session.relay")


def shutdown_script() -> str:
    """The ``shutdown-script`` of a job's VM."""
    return script("shutdown.sh")


def watcher_script() -> str:
    """The ``startup-script`` of a watcher VM (see :mod:`nbburst.machines.gce.watcher`)."""
    return script("watch.sh", "vmlib.py", "watchboot.py")
