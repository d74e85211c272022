"""One emulated instance: its folders, its processes, its metadata server contents."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from nbburst.testing import tokens
from nbburst.testing.compute import catalog as cat
from nbburst.testing.compute.guest import ScriptRun
from nbburst.testing.compute.resources import InstancePlan
from nbburst.testing.metadata import MetadataServer

log = logging.getLogger("nbburst.testing")

# Every instance process carries MARKER=<emulator uid>/<instance id> in its environment, so
# processes that leave their process group (setsid, daemons) are still found and killed.
MARKER = "NBBURST_EMULATOR_MARKER"

_POWER_SHIM = """\
import json, os, sys, urllib.request
cmd, args = os.path.basename(sys.argv[0]), sys.argv[1:]
if cmd == "shutdown" and "-c" in args:
    sys.exit(0)
reboot = cmd == "reboot" or (cmd == "shutdown" and "-r" in args)
endpoint, inst = os.environ.get("NBBURST_COMPUTE_ENDPOINT"), os.environ.get("NBBURST_EMULATOR_INSTANCE")
if not endpoint or not inst:
    sys.exit(f"{cmd}: not running on an emulated instance")
boot = os.environ.get("NBBURST_EMULATOR_BOOT")  # the boot that asks: a request cannot outlive it
req = urllib.request.Request(f"{endpoint}/emulator/{inst}/poweroff", method="POST",
                             data=json.dumps({"reboot": reboot, "boot": int(boot) if boot else None}).encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
"""
_SUDO_SHIM = """\
#!/bin/sh
# sudo on an emulated instance: run the command as it is (the emulator's user).
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -u|-g|-C|-p|-U|-h|-r|-t|-D) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec "$@"
"""


def write_shims(bin_dir: Path) -> None:
    """`poweroff`, `halt`, `shutdown`, `reboot` and `sudo` for instance PATHs: they act on the
    emulated machine (through the emulator's control endpoint), never on the host."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = sys.executable
    python = exe if len(exe) < 120 and " " not in exe else "/usr/bin/env python3"
    power = bin_dir / "poweroff"
    power.write_text(f"#!{python}\n# Power button of an emulated Compute Engine instance.\n{_POWER_SHIM}")
    power.chmod(0o755)
    for alias in ("halt", "shutdown", "reboot"):
        (bin_dir / alias).unlink(missing_ok=True)
        (bin_dir / alias).symlink_to("poweroff")
    sudo = bin_dir / "sudo"
    sudo.write_text(_SUDO_SHIM)
    sudo.chmod(0o755)


_NVIDIA_SMI = """\
#!/bin/sh
# nvidia-smi of an emulated Compute Engine instance whose image has an NVIDIA driver.
case " $* " in
  *" -L "*|*" --list-gpus "*) cat <<'EOF'
{listing}
EOF
  ;;
  *) cat <<'EOF'
NVIDIA-SMI (emulated)    Driver Version: 580.95.05    CUDA Version: 12.9
{table}
EOF
  ;;
esac
"""


def write_nvidia_smi(bin_dir: Path, gpus: list[str]) -> None:
    """An ``nvidia-smi`` in ``bin_dir`` that answers as a working driver does on a machine with ``gpus``
    (their descriptions): ``-L`` lists them, anything else prints a short table of them."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    listing = "\n".join(f"GPU {i}: {name} (UUID: GPU-{i:08d}-emulated)" for i, name in enumerate(gpus))
    table = "\n".join(f"|   {i}  {name:<40} Off |" for i, name in enumerate(gpus))
    path = bin_dir / "nvidia-smi"
    path.write_text(_NVIDIA_SMI.format(listing=listing, table=table))
    path.chmod(0o755)


_OTHER_PYTHON = """\
# python3 of an emulated stock image whose Python is another minor version than this machine's: this
# machine's Python without site-packages (run with -E -s -S), saying it is that version, enough to run a
# program (python3 FILE ARGS, -c CODE, -m MODULE) as the image's python3 would.
import collections, os, runpy, sys

major, minor = __VERSION__
sys.version_info = collections.namedtuple("version_info", "major minor micro releaselevel serial")(
    major, minor, 0, "final", 0
)
sys.version = f"{major}.{minor}.0 " + sys.version.partition(" ")[2]
args = sys.argv[1:]
if not args:
    sys.exit("this emulated python3 runs programs, not an interactive session")
if args[0] in ("-V", "--version"):
    print(f"Python {major}.{minor}.0")
elif args[0] == "-c":
    sys.argv = ["-c", *args[2:]]
    exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
elif args[0] == "-m":
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    runpy.run_path(args[0], run_name="__main__")
"""
_SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: Programs a stock image does not have (this machine's Pythons and package tools, its GPU driver).
_NOT_STOCK = re.compile(r"^(python|pip|pydoc|idle|2to3|easy_install|virtualenv|uv|uvx|conda|pyenv|nvidia-)")


def stock_path(root: Path, python: str) -> list[str]:
    """The PATH of an instance of a stock image whose system Python is ``python`` (``3.12``), made once under
    ``root``: a ``python3`` (and ``pythonX.Y``) with nothing but the standard library (this machine's Python run
    without any site-packages, ``-E -s -S``, and when ``python`` is another minor version, saying it is that
    one); then this machine's system programs except its other Pythons, package tools (uv, pip) and GPU
    driver, as links."""
    host = os.path.realpath(sys.executable)
    own = root / f"python-{python}"
    if not (own / "python3").exists():
        own.mkdir(parents=True, exist_ok=True)
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if python == here:
            body = f'exec "{host}" -E -s -S "$@"\n'
        else:
            program = own / "python3.py"
            program.write_text(_OTHER_PYTHON.replace("__VERSION__", ", ".join(python.split(".")[:2])))
            body = f'exec "{host}" -E -s -S "{program}" "$@"\n'
        shim = own / "python3.tmp"
        shim.write_text(f"#!/bin/sh\n# python3 of an emulated stock image (Python {python})\n{body}")
        shim.chmod(0o755)
        (own / f"python{python}").unlink(missing_ok=True)
        (own / f"python{python}").symlink_to("python3")
        shim.replace(own / "python3")
    tools = root / "tools"
    if not tools.exists():
        staging = root / f"tools.{os.getpid()}.{threading.get_ident()}"
        staging.mkdir(parents=True, exist_ok=True)
        for folder in _SYSTEM_DIRS:
            try:
                entries = sorted(os.listdir(folder))
            except OSError:
                continue
            for entry in entries:
                path = os.path.join(folder, entry)
                if _NOT_STOCK.match(entry) or (staging / entry).exists() or not os.access(path, os.X_OK):
                    continue
                (staging / entry).symlink_to(path)
        try:
            staging.rename(tools)
        except OSError:  # another instance made it first
            shutil.rmtree(staging, ignore_errors=True)
    return [str(own), str(tools)]


class Instance:
    def __init__(self, project: str, zone: str, plan: InstancePlan, dir_: Path, emulator_uid: str):
        self.project, self.zone, self.plan = project, zone, plan
        self.resource = plan.resource
        self.name: str = plan.resource["name"]
        self.id = 10**18 + secrets.randbelow(9 * 10**18)
        self.marker = f"{emulator_uid}/{self.id}"
        self.dir, self.disk, self.console = dir_, dir_ / "disk", dir_ / "serial-console.log"
        self.metadata: MetadataServer | None = None
        self.transition = threading.Lock()  # one lifecycle change at a time
        self.proc: subprocess.Popen | None = None
        self.shutdown_proc: subprocess.Popen | None = None
        self.runs: dict[str, ScriptRun] = {}  # the script runner of each metadata script, by key
        self.exit_logged = True
        self.deadline: float | None = None  # monotonic time when maxRunDuration ends
        self.boots = 0
        self.deleted = False
        self.preempted = False
        self.maintenance_event = "NONE"

    @property
    def status(self) -> str:
        return self.resource["status"]

    @status.setter
    def status(self, value: str) -> None:
        self.resource["status"] = value

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"

    def gpus(self) -> list[str]:
        """Descriptions of the instance's GPUs, attached or built into its machine type, one per card."""
        counts = dict(self.plan.accelerators)
        machine = self.plan.machine
        if machine.accelerator:
            counts[machine.accelerator] = counts.get(machine.accelerator, 0) + machine.accelerator_count
        return [cat.ACCELERATORS[name].description for name, n in counts.items() for _ in range(n)]

    @property
    def nvidia_driver(self) -> bool:
        """Whether the instance's boot image has a working NVIDIA driver."""
        return bool(self.plan.image and self.plan.image.nvidia_driver)

    def attribute(self, key: str) -> str | None:
        for item in self.resource["metadata"]["items"]:
            if item["key"] == key:
                return item["value"]
        return None

    def log(self, line: str) -> None:
        """Append a line to the serial console."""
        try:
            with open(self.console, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass

    # ---- processes ---------------------------------------------------------------------------
    def run_script(self, key: str, script: str, env: dict[str, str]) -> subprocess.Popen:
        """Run a metadata script as the guest's script runner does (:mod:`.guest`: in ``/``, no HOME, output
        read line by line into the serial console), in a new session."""
        path = self.dir / key
        path.write_text(script)
        path.chmod(0o700)
        run = ScriptRun(key, path, self.console, {**env, MARKER: self.marker})
        self.runs[key] = run
        return run.proc

    def stop_runners(self) -> None:
        """The soft-off of the script runners' units (KillMode=process): their scripts' output pipes break."""
        for run in list(self.runs.values()):
            run.stop_runner()

    def unreaped(self) -> list[subprocess.Popen]:
        return [p for p in (self.proc, self.shutdown_proc) if p is not None and p.returncode is None]

    def signal(self, sig: int) -> None:
        # A group is addressed by its leader's pid only while that leader is unreaped (so the
        # number cannot have been reused); processes that escaped it are found by their marker.
        for p in self.unreaped():
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in scan_processes(self.marker):
            kill(pid, sig)

    def alive(self) -> bool:
        return bool(scan_processes(self.marker, [p.pid for p in self.unreaped()]))

    def live_pids(self) -> list[int]:
        return scan_processes(self.marker, [p.pid for p in self.unreaped()])

    def hard_kill(self) -> None:
        """SIGKILL every process of the instance, reap the ones this process started, and wait
        (bounded) until none is left: a VM that is off runs nothing."""
        self.signal(signal.SIGKILL)
        self.stop_runners()
        deadline = time.monotonic() + 5
        while self.live_pids() and time.monotonic() < deadline:
            time.sleep(0.02)
            self.signal(signal.SIGKILL)
        for name, p in (("startup-script", self.proc), ("shutdown-script", self.shutdown_proc)):
            if p is not None:
                was_running = p.returncode is None
                reap(p)
                if name == "startup-script" and was_running and not self.exit_logged:
                    self.exit_logged = True
                    self.log(f"nbburst-emulator: {name} exit status {p.returncode}")

    def info(self) -> dict:
        procs = {"startup": self.proc, "shutdown": self.shutdown_proc}
        sched = self.resource["scheduling"]
        return {
            "project": self.project,
            "zone": self.zone,
            "name": self.name,
            "id": str(self.id),
            "status": self.status,
            "boots": self.boots,
            "preempted": self.preempted,
            "maintenance_event": self.maintenance_event,
            "labels": dict(self.resource["labels"]),
            "provisioning_model": sched["provisioningModel"],
            "termination_action": sched.get("instanceTerminationAction"),
            "dir": str(self.dir),
            "disk": str(self.disk),
            "serial_console": str(self.console),
            "metadata_host": self.metadata.host if self.metadata else None,
            "processes": {k: {"pid": p.pid, "returncode": p.poll()} for k, p in procs.items() if p},
            "live_pids": self.live_pids(),
        }

    # ---- metadata server contents ------------------------------------------------------------
    def metadata_tree(self) -> dict[str, Any]:
        r, project, number = self.resource, self.project, cat.project_number(self.project)
        accounts: dict[str, Any] = {}
        for i, sa in enumerate(r["serviceAccounts"]):
            entry = {
                "aliases": "default",
                "email": sa["email"],
                "scopes": "".join(s + "\n" for s in sa["scopes"]),
                "token": _token_for(sa["email"]),
                "identity": _identity_for(sa["email"]),
            }
            accounts[sa["email"]] = entry
            if i == 0:
                accounts["default"] = dict(entry)
        img = self.plan.image
        sched = r["scheduling"]
        nics = {
            str(i): {
                # Instances are processes of this computer: the VPC is the loopback, where 10.128.a.b is
                # 127.128.a.b (all of 127/8 is local on Linux), so instances reach each other's internal address.
                "ip": "127." + n["networkIP"].split(".", 1)[1],
                "network": f"projects/{number}/networks/default",
                "mac": f"42:01:0a:80:00:{i + 2:02x}",
            }
            for i, n in enumerate(r["networkInterfaces"])
        }
        return {
            "instance": {
                "attributes": {item["key"]: item["value"] for item in r["metadata"]["items"]},
                "cpu-platform": "Intel Cascade Lake",
                "description": r["description"],
                "disks": {
                    str(d["index"]): {
                        "device-name": d["deviceName"],
                        "index": d["index"],
                        "mode": d["mode"],
                        "type": d["type"],
                    }
                    for d in r["disks"]
                },
                "hostname": f"{self.name}.{self.zone}.c.{project}.internal",
                "id": self.id,
                "image": f"projects/{img.project}/global/images/{img.name}" if img else "",
                "machine-type": f"projects/{number}/machineTypes/{self.plan.machine.name}",
                "maintenance-event": "NONE",
                "name": self.name,
                "network-interfaces": nics,
                "preempted": "FALSE",
                "scheduling": {
                    "automatic-restart": str(sched["automaticRestart"]).upper(),
                    "on-host-maintenance": sched["onHostMaintenance"],
                    "preemptible": str(sched["preemptible"]).upper(),
                    "provisioning-model": sched["provisioningModel"],
                },
                "service-accounts": accounts,
                "tags": list(r["tags"]["items"]),
                "zone": f"projects/{number}/zones/{self.zone}",
            },
            "project": {"attributes": {}, "numeric-project-id": number, "project-id": project},
        }


def fingerprint() -> str:
    return base64.b64encode(secrets.token_bytes(8)).decode()


def _token_for(email: str):
    def token(_query) -> dict:
        return tokens.mint(email)

    return token


def _identity_for(email: str):
    def identity(query) -> str:
        def b64(obj) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

        now = int(time.time())
        claims = {
            "aud": query.get("audience", ""),
            "azp": email,
            "email": email,
            "email_verified": True,
            "exp": now + 3600,
            "iat": now,
            "iss": "https://accounts.google.com",
            "sub": "1" * 21,
        }
        return f"{b64({'alg': 'RS256', 'typ': 'JWT'})}.{b64(claims)}.ZW11bGF0ZWQ"

    return identity


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def reap(p: subprocess.Popen) -> None:
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("compute emulator: process %s did not exit after SIGKILL", p.pid)


def scan_processes(marker: str, pgids=()) -> list[int]:
    """Live (non-zombie) processes whose environment holds MARKER=<marker...> or whose process
    group is one of `pgids`. Uses Linux /proc; elsewhere only `pgids` can be seen (via killpg)."""
    needle = f"\0{MARKER}={marker}".encode()
    pgids = set(pgids)
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [g for g in pgids if _group_exists(g)]
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):
                continue
            if int(fields[2]) in pgids:
                found.append(int(entry))
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except (OSError, ValueError, IndexError):
            continue
        if needle in environ:
            found.append(int(entry))
    return found


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
