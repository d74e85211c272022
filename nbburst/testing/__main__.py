"""`python -m nbburst.testing`: start the Compute Engine, Secret Manager and GCS emulators and hand their environment
(the variables that point nbburst at them) to whatever should use them.

    python -m nbburst.testing                      print `export KEY=VALUE` lines, serve until Ctrl-C or SIGTERM
    python -m nbburst.testing --env-file emu.env   also write KEY=VALUE lines to emu.env while they run
    python -m nbburst.testing -- jupyter lab       run a command with the environment set; stop with it

With a command the emulators live exactly as long as it: they stop when it exits, and its exit code
is this program's (128+N when a signal N ended it). Ctrl-C reaches the command from the terminal
(it may ask before quitting, as `jupyter lab` does); SIGTERM and SIGHUP are passed on to it.
The env file appears once the emulators answer (so a script can wait for it) and is removed when they
stop. The GCS emulator needs `pip install 'nbburst[emulator]'`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from nbburst.testing.compute.emulator import ComputeEmulator
from nbburst.testing.secretmanager import SecretManagerEmulator

PROG = "python -m nbburst.testing"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [options] [--env-file PATH] [-- COMMAND ...]",
        description="Start the Compute Engine and GCS emulators and print, write (--env-file) or pass to a "
        "command (after --) the environment that points nbburst at them.",
    )
    p.add_argument("--port", type=int, default=0, help="Compute emulator port (default: a free one)")
    p.add_argument("--gcs-port", type=int, default=0, help="GCS emulator port (default: a free one)")
    p.add_argument("--project", default="nbburst-test")
    p.add_argument("--zone", default="us-central1-a")
    p.add_argument("--bucket", default="nbburst-test", help="bucket created in the GCS emulator")
    p.add_argument("--base-dir", default=None, help="where instance disks live (default: a temp dir)")
    p.add_argument("--preemption-grace", type=float, default=30.0, help="seconds, as on GCE")
    p.add_argument("--stop-grace", type=float, default=90.0)
    p.add_argument("--no-gcs", action="store_true", help="start only the Compute emulator")
    p.add_argument(
        "--iam-delay",
        type=float,
        default=0.0,
        help="seconds before a role granted on a secret or a bucket takes effect for a VM, as IAM propagates "
        "(Google: about 2 minutes, sometimes 7 or more; default 0)",
    )
    p.add_argument(
        "--latest-lag",
        type=float,
        default=0.0,
        help="seconds before Secret Manager's alias `latest` names a new version (default 0)",
    )
    p.add_argument(
        "--env-file",
        metavar="PATH",
        help="write the environment to PATH, one KEY=VALUE a line (for docker --env-file, python-dotenv, "
        "an IDE's env file, or `set -a; . PATH`); removed when the emulators stop",
    )
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``[options..., "--", command...]`` -> (options, command)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """KEY=VALUE lines, written whole (a reader never sees half a file)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(f"{key}={value}\n" for key, value in sorted(env.items())))
    os.replace(partial, path)


def run_command(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` with ``env`` added to ours; its exit code (128+N for signal N)."""
    try:
        child = subprocess.Popen(command, env={**os.environ, **env})
    except OSError as exc:
        print(f"{PROG}: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),  # the terminal sends it to the command too
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum)),
        signal.SIGHUP: signal.signal(signal.SIGHUP, lambda signum, _frame: child.send_signal(signum)),
    }
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else 128 - code


def serve() -> None:
    """Block until Ctrl-C or SIGTERM."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    options, command = split_command(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(options)
    env_file = Path(args.env_file) if args.env_file else None
    compute = ComputeEmulator(
        args.base_dir,
        port=args.port,
        project=args.project,
        zone=args.zone,
        preemption_grace=args.preemption_grace,
        stop_grace=args.stop_grace,
    )
    gcs = None
    secret_manager = SecretManagerEmulator(args.project, iam_delay=args.iam_delay, latest_lag=args.latest_lag)
    written: Path | None = None  # the env file, once written: removed at the end
    try:
        compute.start()
        secret_manager.start()  # jobs hand their keys to their VMs through it
        compute.instance_env.update(secret_manager.env())
        env = {**compute.env(), **secret_manager.env()}
        if not args.no_gcs:
            from nbburst.testing.gcs import GCSEmulator

            try:
                gcs = GCSEmulator(port=args.gcs_port).start()
            except ImportError as exc:
                print(
                    f"{PROG}: no GCS emulator here ({exc}): pip install 'nbburst[emulator]', or pass --no-gcs",
                    file=sys.stderr,
                )
                return 1
            gcs.create_bucket(args.bucket)
            if gcs.iam is not None:  # VMs run as the default compute service account: let it use the bucket
                gcs.iam.propagation_delay = args.iam_delay
                member = f"serviceAccount:{compute.default_service_account}"
                gcs.iam.grant(args.bucket, member, "roles/storage.objectUser")
            env.update(gcs.env())
            compute.instance_env.update(gcs.env())  # instances reach the GCS emulator too
            env.update({"NBBURST_ROOT": f"gs://{args.bucket}/nbburst"})
        env.update({"NBBURST_BACKEND": "gce", "GOOGLE_CLOUD_PROJECT": args.project})
        if env_file is not None:
            write_env_file(env_file, env)
            written = env_file
        where = (
            f"Compute Engine emulator at {compute.endpoint} (disks in {compute.base_dir}), "
            f"Secret Manager at {secret_manager.endpoint}"
        )
        if gcs is not None:
            where += f", GCS emulator at {gcs.endpoint} (bucket {args.bucket})"
        if command:
            print(f"# {where}; running {shlex.join(command)}", file=sys.stderr, flush=True)
            return run_command(command, env)
        for key, value in sorted(env.items()):
            print(f"export {key}={shlex.quote(value)}")
        print(f"# {where}; Ctrl-C to stop.", file=sys.stderr)
        sys.stdout.flush()
        serve()
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        if written is not None:
            written.unlink(missing_ok=True)
        compute.stop()
        secret_manager.stop()
        if gcs is not None:
            gcs.stop()


if __name__ == "__main__":
    sys.exit(main())
