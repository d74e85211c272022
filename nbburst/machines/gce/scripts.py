"""The startup and shutdown scripts of a job's VM (instance metadata ``startup-script``/``shutdown-script``).

The scripts are the same for every job: what differs (the job URL, the key,
the attempt) is read from the instance's metadata attributes, so a restarted
VM picks up the new attempt without new scripts.

Startup (bash, on every boot):

1. finds ``python3`` (the image's Python), makes a working folder on the boot
   disk (``/var/lib/nbburst``; under the emulator, the instance's disk folder);
   on an image baked by ``nbburst image build`` the venv is there already, with
   nbburst's dependencies, and its Python runs the bootstrap;
2. bootstrap (Python, standard library + google-cloud-storage): reads the
   job's signed ``dist/manifest.json``, checks its HMAC with the job key from
   the metadata server, downloads the nbburst wheel of the client (a blob,
   checked against its SHA-256) and installs it with ``pip install --no-deps``
   into a venv on the disk that sees the image's site-packages. A reboot with
   the same wheel skips all of it (a marker file holds the installed digest);
3. runs ``python -m nbburst.agent JOB_URL``; the agent deletes the VM when the
   job ends. Whatever happens (bootstrap failure, agent exit), the script
   powers the VM off at the end, so a broken boot never idles: the client
   then shows the serial console tail and deletes the VM.

Shutdown (best effort, spot VMs have 30 s): flushes disks and runs
``python -m nbburst.agent.gce shutdown``, which marks the attempt PREEMPTED if
the agent could not (it normally does on the soft-off signal).

Each step prints ``nbburst-startup: <step> t=<epoch>`` to the serial console:
bench/launch.py reads the boot timeline from these lines.
"""

from __future__ import annotations

# The bootstrap runs with the image's python3 before nbburst is installed: standard library and
# google-cloud-storage only. argv: BASE folder. Exit status 0 = the venv has the job's wheel.
# The metadata server, read from a script on the VM before nbburst is installed there (retries: the
# server may not answer in the first seconds of a boot). Shared by every script that runs on a VM.
METADATA_PY = r"""
def md(path, default=None):
    host = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    req = urllib.request.Request(f"http://{host}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"})
    for _ in range(30):
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return default
        except OSError:
            pass
        time.sleep(1)
    return default
"""

BOOTSTRAP = r"""
import hashlib, hmac, json, os, subprocess, sys, time, urllib.error, urllib.request

BASE = sys.argv[1]


def say(msg):
    print(f"nbburst-startup: {msg} t={time.time():.3f}", flush=True)


def die(msg):
    say("ERROR: " + msg)
    sys.exit(1)


__METADATA__


url = md("instance/attributes/nbburst-job-url")
key_hex = md("instance/attributes/nbburst-key")
if not url or not key_hex:
    die("instance metadata has no nbburst-job-url/nbburst-key: this VM was not made by nbburst")
if not url.startswith("gs://") or "/jobs/" not in url:
    die(f"job URL {url!r} is not gs://BUCKET/PREFIX/jobs/ID")
with open(os.path.join(BASE, "job-url"), "w") as f:
    f.write(url)
root, _, job_id = url.rstrip("/").rpartition("/jobs/")
bucket_name, _, prefix = root[len("gs://"):].partition("/")
prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

try:
    from google.cloud import storage
except ImportError:
    die(f"the image's Python ({sys.executable}) lacks google-cloud-storage; install nbburst's dependencies "
        "in the image (see `nbburst image build`)")
if os.environ.get("STORAGE_EMULATOR_HOST"):
    from google.auth.credentials import AnonymousCredentials
    client = storage.Client(project=os.environ.get("NBBURST_PROJECT") or "test", credentials=AnonymousCredentials())
else:
    client = storage.Client(project=md("project/project-id"))
bucket = client.bucket(bucket_name)


def fetch(key):
    from google.api_core import exceptions as gexc

    try:
        return bucket.blob(prefix + key).download_as_bytes(timeout=60)
    except gexc.NotFound:
        die(f"cannot read {root}/{key}: it does not exist (a wrong job URL, or the job was deleted)")
    except gexc.Forbidden as exc:
        die(f"cannot read {root}/{key}: permission denied; the VM's service account needs read/write access "
            f"to gs://{bucket_name} ({exc.message})")
    except Exception as exc:
        die(f"cannot read {root}/{key}: {type(exc).__name__}: {exc}")


say(f"job {url}")
raw = fetch(f"jobs/{job_id}/dist/manifest.json")
manifest = json.loads(raw)
signature = manifest.pop("signature", "")
body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
if not hmac.compare_digest(hmac.new(bytes.fromhex(key_hex), body, hashlib.sha256).hexdigest(), signature):
    die("dist/manifest.json failed its signature check under the job key; refusing to install it")
wheel = manifest["wheel"]
venv = os.path.join(BASE, "venv")
vpy = os.path.join(venv, "bin", "python")
marker = os.path.join(venv, ".nbburst-wheel")
have = open(marker).read().strip() if os.path.exists(marker) else ""
if have == wheel["sha256"] and os.path.exists(vpy):
    say(f"nbburst {manifest['version']} already installed")
    sys.exit(0)
if not os.path.exists(vpy):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    import site
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    out = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out, "_nbburst_image_site.pth"), "w") as f:
        f.write("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
    say("venv created")
data = fetch(wheel["blob"])
if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
    die(f"{wheel['blob']} does not match its SHA-256; refusing to install it")
os.makedirs(os.path.join(BASE, "wheels"), exist_ok=True)
path = os.path.join(BASE, "wheels", wheel["file"])
with open(path, "wb") as f:
    f.write(data)
say(f"wheel {wheel['file']} downloaded ({len(data)} bytes)")
pip = subprocess.run([vpy, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet",
                      "--disable-pip-version-check", "--no-warn-script-location", path])
if pip.returncode:
    die(f"pip could not install {wheel['file']} (exit status {pip.returncode}); does the image have pip?")
with open(marker, "w") as f:
    f.write(wheel["sha256"])
say(f"nbburst {manifest['version']} installed")
""".replace("__METADATA__", METADATA_PY.strip("\n"))

STARTUP = r"""#!/bin/bash
# nbburst: startup script of a job's VM. Runs on every boot; see nbburst/machines/gce_scripts.py.
say() { echo "nbburst-startup: $* t=$(date +%s.%N 2>/dev/null || date +%s)"; }
powerdown() {
  say "$1; powering off"
  sync
  poweroff || sudo -n poweroff || shutdown -h now
  exit 1
}
if [ -n "${NBBURST_HOME:-}" ]; then BASE="$NBBURST_HOME"
elif [ -n "${NBBURST_EMULATOR_INSTANCE:-}" ]; then BASE="$PWD/nbburst"  # the emulator: the instance's disk
else BASE=/var/lib/nbburst; fi
export NBBURST_HOME="$BASE"
export GCE_METADATA_HOST="${GCE_METADATA_HOST:-metadata.google.internal}"
export PYTHONUNBUFFERED=1
mkdir -p "$BASE" || powerdown "cannot create $BASE"
if [ -x "$BASE/venv/bin/python" ]; then PY="$BASE/venv/bin/python"  # a baked image, or a restart
else PY="$(command -v python3 || command -v python)"; fi
say "begin (python: ${PY:-none}, folder: $BASE)"
[ -n "$PY" ] || powerdown "the image has no python3"
"$PY" - "$BASE" <<'NBBURST_BOOTSTRAP' || powerdown "could not install nbburst on this VM (see above)"
__BOOTSTRAP__
NBBURST_BOOTSTRAP
say "agent starting"
"$BASE/venv/bin/python" -m nbburst.agent "$(cat "$BASE/job-url")"
say "agent exited with status $?"
powerdown "the agent is done"
""".replace("__BOOTSTRAP__", BOOTSTRAP.strip("\n"))

SHUTDOWN = r"""#!/bin/bash
# nbburst: shutdown script of a job's VM (best effort: a spot VM has 30 s).
if [ -n "${NBBURST_HOME:-}" ]; then BASE="$NBBURST_HOME"
elif [ -n "${NBBURST_EMULATOR_INSTANCE:-}" ]; then BASE="$PWD/nbburst"
else BASE=/var/lib/nbburst; fi
export GCE_METADATA_HOST="${GCE_METADATA_HOST:-metadata.google.internal}"
echo "nbburst-shutdown: begin t=$(date +%s.%N 2>/dev/null || date +%s)"
sync
if [ -x "$BASE/venv/bin/python" ]; then
  timeout 25 "$BASE/venv/bin/python" -m nbburst.agent.gce shutdown || true
fi
sync
echo "nbburst-shutdown: done t=$(date +%s.%N 2>/dev/null || date +%s)"
"""


def startup_script() -> str:
    return STARTUP


def shutdown_script() -> str:
    return SHUTDOWN
