"""`python -m nbburst.testing`: start the Compute Engine and GCS emulators, print the
environment that points nbburst at them, serve until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading

from nbburst.testing.compute.emulator import ComputeEmulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbburst.testing", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="Compute emulator port (default: a free one)")
    parser.add_argument("--gcs-port", type=int, default=0, help="GCS emulator port (default: a free one)")
    parser.add_argument("--project", default="nbburst-test")
    parser.add_argument("--zone", default="us-central1-a")
    parser.add_argument("--bucket", default="nbburst-test", help="bucket created in the GCS emulator")
    parser.add_argument("--base-dir", default=None, help="where instance disks live (default: a temp dir)")
    parser.add_argument("--preemption-grace", type=float, default=30.0, help="seconds, as on GCE")
    parser.add_argument("--stop-grace", type=float, default=90.0)
    parser.add_argument("--no-gcs", action="store_true", help="start only the Compute emulator")
    args = parser.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    compute = ComputeEmulator(
        args.base_dir,
        port=args.port,
        project=args.project,
        zone=args.zone,
        preemption_grace=args.preemption_grace,
        stop_grace=args.stop_grace,
    )
    gcs = None
    try:
        compute.start()
        env = dict(compute.env())
        if not args.no_gcs:
            from nbburst.testing.gcs import GCSEmulator

            gcs = GCSEmulator(port=args.gcs_port).start()
            gcs.create_bucket(args.bucket)
            env.update(gcs.env())
            # Instances reach the GCS emulator too.
            compute.instance_env.update(gcs.env())
        env.update(
            {
                "NBBURST_ROOT": f"gs://{args.bucket}/nbburst",
                "NBBURST_BACKEND": "gce",
                "GOOGLE_CLOUD_PROJECT": args.project,
            }
        )
        for key, value in sorted(env.items()):
            print(f"export {key}={shlex.quote(value)}")
        print(
            f"# Compute Engine emulator at {compute.endpoint} (disks in {compute.base_dir}); Ctrl-C to stop.",
            file=sys.stderr,
        )
        sys.stdout.flush()
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        compute.stop()
        if gcs is not None:
            gcs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
