"""The ``nbburst`` command: list, follow, fetch, cancel and clean up jobs from a terminal, and bake images.

It reads the same configuration as the notebook (Jupyter config files, then
``NBBURST_*`` variables, then ``--root``/``--backend``/``--set``) and the same
Store, so jobs started in a notebook are visible here and the other way round.

Exit codes (stable, for scripts):

==  =========================================================================
0   success (for ``result`` and ``logs -f``: the job SUCCEEDED)
1   the job FAILED or was CANCELLED (``result``, ``logs -f``); the image build failed (``image build``)
2   usage error: a bad option or argument; nothing was done
3   not found: no job with that id or name
4   configuration or credentials: settings, Store, signing key, ``doctor`` failures
5   the job has not finished (``result --no-wait`` or ``--timeout``)
130 interrupted (Ctrl-C)
==  =========================================================================

Errors are one line on stderr (``nbburst: ...``), never a traceback, except the
remote traceback of a cell that raised, which ``result`` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .. import __version__, config
from ..errors import BurstError, JobFailed, JobNotFound, UsageError
from ..options import BACKENDS
from ..protocol.durations import format_duration, parse_duration
from ..protocol.job import JobLayout, State, valid_job_id

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFIG, EXIT_NOT_DONE = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130


class Exit(Exception):
    """Stop with ``code`` after printing ``message`` (one line) to stderr."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message)
        self.code, self.message = code, message


# -- session ---------------------------------------------------------------------------------


def session(args: argparse.Namespace, open_store: bool = True) -> Any:
    """A configured :class:`~nbburst.client.Burst`; configuration problems exit with 4."""
    from ..client.burst import Burst

    try:
        settings = config.load()
        for item in args.set or []:
            key, sep, value = item.partition("=")
            if not sep:
                raise Exit(EXIT_USAGE, f"--set: write key=value, got {item!r}")
            config.set_value(settings, key.strip(), value.strip(), "--set")
        if args.root:
            config.set_value(settings, "root", args.root, "--root")
        if args.backend:
            config.set_value(settings, "backend", args.backend, "--backend")
        burst = Burst(settings)
        if open_store:
            burst.store  # noqa: B018 - fail now (exit 4) if the Store cannot be opened
        return burst
    except Exit:
        raise
    except BurstError as exc:
        raise Exit(EXIT_CONFIG, f"configuration: {exc}") from None
    except Exception as exc:  # a bad bucket, missing credentials, ...
        raise Exit(EXIT_CONFIG, f"configuration: {type(exc).__name__}: {exc}") from None


def find_job(burst: Any, ref: str) -> Any:
    try:
        job = burst.job(ref)
        job.spec  # noqa: B018 - load it now, so "not found" is reported here
        return job
    except JobNotFound as exc:
        raise Exit(EXIT_NOT_FOUND, str(exc).replace("`%burst jobs`", "`nbburst jobs`")) from None


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def job_exit(state: State) -> int:
    return EXIT_OK if state == State.SUCCEEDED else EXIT_FAILED if state.terminal else EXIT_NOT_DONE


# -- commands ----------------------------------------------------------------------------------


def cmd_jobs(args: argparse.Namespace) -> int:
    from .tables import rich_table, select_infos, totals

    burst = session(args)
    infos = select_infos(burst, all_jobs=args.all, states=args.state)
    if args.json:
        out: Any = {"jobs": infos}
        if args.cost:
            out["totals"] = totals(infos)
        print(json.dumps(out, indent=1, default=str))
        return EXIT_OK
    if not infos:
        print(f"no jobs in {burst.store.url}" + ("" if args.all or args.state else " (try --all)"))
        return EXIT_OK
    console().print(rich_table(infos, with_totals=args.cost))
    return EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    info = job.info()
    info["url"], info["plan"] = job.url, job.spec.plan
    print(json.dumps(info, indent=1, default=str))
    return EXIT_OK


def _write_record(record: dict[str, Any]) -> None:
    from ..client.burst import render_text

    stream = sys.stderr if record.get("s") in ("stderr", "event") else sys.stdout
    stream.write(render_text(record))
    stream.flush()


def cmd_logs(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    if not args.follow:
        sys.stdout.write(job.logs(args.attempt))
        return EXIT_OK

    def show(record: dict[str, Any]) -> None:
        if args.attempt is None or record.get("attempt") == args.attempt:
            _write_record(record)

    state = job.wait(on_record=show)
    if state != State.SUCCEEDED:
        terminal = job.terminal()
        print(
            f"nbburst: job {job.name} {state.value}" + (f": {terminal.reason}" if terminal and terminal.reason else ""),
            file=sys.stderr,
        )
    return job_exit(state)


def cmd_result(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    if args.no_wait:
        state = job.state
    else:
        state = job.wait(timeout=parse_duration(args.timeout, "--timeout") if args.timeout else None)
    if not state.terminal:
        raise Exit(
            EXIT_NOT_DONE,
            f"job {job.name} has not finished (it is {state.value}); `nbburst logs -f {job.name}` follows it",
        )
    if state != State.SUCCEEDED:
        if state == State.FAILED and job.store.exists(job.layout.error):
            try:
                info = job.remote_error()
                sys.stderr.write(info.get("traceback") or f"{info.get('type')}: {info.get('message')}\n")
            except Exception as exc:
                print(f"nbburst: the job's error cannot be loaded here: {exc}", file=sys.stderr)
        terminal = job.terminal()
        raise Exit(
            EXIT_FAILED,
            f"job {job.name} {state.value}" + (f": {terminal.reason}" if terminal and terminal.reason else ""),
        )
    outcome = job.outcome()
    value = job.value_of(outcome)
    for warning in outcome.warnings:
        print(f"nbburst: {warning}", file=sys.stderr)
    if args.output:
        with open(args.output, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        what = "the return value" if job.spec.kind == "call" else f"{len(value)} variables ({', '.join(value)})"
        print(f"nbburst: wrote {what} of job {job.name} to {args.output}", file=sys.stderr)
        return EXIT_OK
    if job.spec.kind == "call":
        print(repr(value))
    else:
        for name, v in value.items():
            print(f"{name} = {_short_repr(v)}")
        if outcome.has_last and outcome.last is not None:
            print(_short_repr(outcome.last))
    return EXIT_OK


def _short_repr(value: Any, limit: int = 2000) -> str:
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__}: repr failed: {exc}>"
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def cmd_cancel(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    before = job.terminal()
    if before is not None:
        print(f"job {job.name} had already ended: {before.state.value}")
        return EXIT_OK
    print(f"job {job.name} is {job.cancel().value}")
    return EXIT_OK


def cmd_preempt(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    if job.state.terminal:
        raise Exit(EXIT_USAGE, f"job {job.name} has ended ({job.state.value}); there is no machine to preempt")
    job.preempt(args.grace)
    print(
        f"preempted the machine of job {job.name}; a supervisor relaunches it "
        f"(a waiting notebook cell, the Jupyter server, or `nbburst supervise`)"
    )
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    from ..client.burst import Job

    burst = session(args)
    older = parse_duration(args.older_than, "--older-than") if args.older_than else None
    backends = [args.backend] if args.backend else list(dict.fromkeys([burst.settings.backend, "local"]))
    me = _as_label(config.owner(burst.settings))
    verb = "would delete" if args.dry_run else "deleted"
    machines_done = folders_done = 0
    problems = 0
    for backend in backends:
        try:
            machines = burst.machines(backend)
            store = burst.store_for(backend)
            listed = machines.list()
        except Exception as exc:
            print(f"nbburst: skipped the {backend} backend: {type(exc).__name__}: {exc}", file=sys.stderr)
            problems += 1
            continue
        for m in listed:
            job_id = m.job_id or m.labels.get("nbburst-job", "")
            owner = m.labels.get("nbburst-owner")
            if owner and _as_label(owner) != me and not args.any_owner:
                continue  # someone else's machine: their gc, not ours
            if not job_id or not valid_job_id(job_id) or not store.exists(JobLayout(job_id).spec):
                why = "its job is unknown in " + store.url
            else:
                terminal = Job(burst, job_id, store).terminal()
                if terminal is None:
                    continue  # the job is still alive: leave its machine alone
                why = f"its job ended ({terminal.state.value})"
            if not args.dry_run:
                try:
                    machines.delete(m.name)
                except Exception as exc:
                    print(f"nbburst: could not delete machine {m.name}: {exc}", file=sys.stderr)
                    problems += 1
                    continue
            machines_done += 1
            print(f"{verb} machine {m.name} ({backend}): {why}")
        if older is None:
            continue
        cutoff = time.time() - older
        for job in burst.jobs(store=store):
            try:
                terminal = job.terminal()
                if terminal is None or job.spec.created > cutoff:
                    continue
            except Exception:
                continue
            if not args.dry_run:
                store.delete_prefix(job.layout.prefix)
                burst.keyring.delete(job.id)
            folders_done += 1
            print(
                f"{verb} job {job.id}"
                + (f" ({job.spec.name})" if job.spec.name != job.id else "")
                + f": {terminal.state.value}, {format_duration(time.time() - job.spec.created)} old"
            )
    print(
        f"gc: {verb} {machines_done} machine(s)"
        + (f" and {folders_done} job folder(s)" if older else "")
        + (" (dry run)" if args.dry_run else ""),
        file=sys.stderr,
    )
    return EXIT_CONFIG if problems else EXIT_OK


def _as_label(value: str) -> str:
    """An owner as Compute Engine labels spell it (lowercase, [a-z0-9_-], at most 63 characters)."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63] or "unknown"


def doctor_checks(burst: Any) -> list[Any]:
    """Checks every backend shares (configuration, Store, state folder), then the backend's own."""
    import secrets

    from ..machines.base import Check

    settings = burst.settings
    described = config.describe(settings)
    checks = [
        Check(
            "configuration",
            True,
            f"backend {settings.backend} ({described['backend']['source']}), "
            f"root {described['root']['value']} ({described['root']['source']})",
        )
    ]
    state = config.state_dir(settings)
    try:
        (state / "keys").mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = state / f".doctor-{secrets.token_hex(4)}"
        probe.write_text("ok")
        probe.unlink()
        mode = (state / "keys").stat().st_mode & 0o077
        checks.append(
            Check(
                "state dir",
                True,
                f"{state} is writable" + ("" if not mode else "; the keys folder is readable by others"),
                warning=False,
                fix="chmod 700 " + str(state / "keys") if mode else "",
            )
        )
    except OSError as exc:
        checks.append(
            Check(
                "state dir",
                False,
                f"{state}: {exc}",
                fix="set a writable folder: c.NBBurst.state_dir or $NBBURST_STATE_DIR",
            )
        )
    try:
        store = burst.store
        key = f"doctor/probe-{secrets.token_hex(6)}"
        store.put(key, b"ok")
        ok = store.get(key) == b"ok"
        store.delete(key)
        checks.append(Check("store", ok, f"{store.url} is writable and readable"))
    except Exception as exc:
        checks.append(
            Check(
                "store",
                False,
                f"{type(exc).__name__}: {exc}",
                fix="check root/bucket (c.NBBurst.root, $NBBURST_ROOT) and access to it",
            )
        )
    checks.append(Check("nbburst", True, f"version {__version__}, Python {sys.version.split()[0]} at {sys.executable}"))
    try:
        checks.extend(burst.machines().doctor())
    except Exception as exc:
        checks.append(
            Check(
                f"{settings.backend} backend",
                False,
                f"{type(exc).__name__}: {exc}",
                fix="see the backend's configuration in docs/job-view-and-cli.md",
            )
        )
    return checks


def cmd_doctor(args: argparse.Namespace) -> int:
    burst = session(args, open_store=False)  # a Store that cannot be opened is one of the findings
    checks = doctor_checks(burst)
    out = console()
    marks = {"ok": "[green]✔[/]", "warn": "[yellow]![/]", "fail": "[bold red]✖[/]"}
    from rich.markup import escape

    for check in checks:
        out.print(f"{marks[check.level]} {escape(check.name)}: {escape(check.detail)}")
        if check.fix and not check.ok:
            out.print(f"    fix: {escape(check.fix)}")
    failed = [c for c in checks if c.level == "fail"]
    if failed:
        print(f"nbburst: {len(failed)} check(s) failed", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK


def cmd_supervise(args: argparse.Namespace) -> int:
    """Relaunch preempted jobs until Ctrl-C or SIGTERM (for a server without the Jupyter extension)."""
    from ..client import supervisor

    burst = session(args)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    interval = parse_duration(args.interval, "--interval")
    print(
        f"nbburst supervise: watching unfinished jobs in {burst.store.url} every {format_duration(interval)}; "
        "Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    last: dict[str, str] = {}

    def report(job: Any, state: State) -> None:
        shown = f"{state.value}" + (f" (attempt {job.attempt})" if job.attempt > 1 else "")
        if last.get(job.id) != shown:
            last[job.id] = shown
            print(f"{time.strftime('%H:%M:%S')} {job.id} {job.spec.name}: {shown}", flush=True)

    try:
        if args.once:
            supervisors: dict[str, Any] = {}
            supervisor.run_once(burst, supervisors, report)
            for sup in supervisors.values():
                sup.lease.release()
        else:
            supervisor.run_forever(burst, interval, stop, report)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def cmd_image_build(args: argparse.Namespace) -> int:
    from ..machines.gce.image import run_cli

    return run_cli(session(args, open_store=False), args)


# -- parser ------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", help="Store URL (default: configuration)")
    common.add_argument("--backend", choices=BACKENDS, help="backend (default: configuration)")
    common.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting (repeatable)")

    p = argparse.ArgumentParser(
        prog="nbburst",
        description="Manage nbburst jobs: the ones %%burst cells and nbburst.submit started.",
        epilog="Exit codes: 0 ok, 1 job failed or cancelled, 2 usage error, 3 job not found, "
        "4 configuration or credentials, 5 job not finished, 130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"nbburst {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("jobs", parents=[common], help="list jobs (unfinished ones and the newest)")
    s.add_argument("--all", action="store_true", help="all jobs")
    s.add_argument("--state", help="only these states, comma-separated: running, failed, active, done, ...")
    s.add_argument("--cost", action="store_true", help="add totals: cost, machine-hours, saving vs on-demand")
    s.add_argument("--json", action="store_true", help="JSON (Job.info() of each job) instead of a table")
    s.set_defaults(func=cmd_jobs)

    s = sub.add_parser("info", parents=[common], help="one job's details as JSON")
    s.add_argument("job", help="job id or name")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("logs", parents=[common], help="print a job's output")
    s.add_argument("job", help="job id or name")
    s.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing until the job ends; the exit code is the job's (0 succeeded, 1 failed or cancelled)",
    )
    s.add_argument("--attempt", type=int, help="only this attempt (1, 2, ...)")
    s.set_defaults(func=cmd_logs)

    s = sub.add_parser("result", parents=[common], help="a finished job's variables (or return value)")
    s.add_argument("job", help="job id or name")
    s.add_argument("-o", "--output", metavar="FILE", help="pickle the result to FILE instead of printing it")
    s.add_argument("--no-wait", action="store_true", help="do not wait for an unfinished job (exit 5)")
    s.add_argument("--timeout", help="wait at most this long (90s, 30m, 2h), then exit 5")
    s.set_defaults(func=cmd_result)

    s = sub.add_parser("cancel", parents=[common], help="stop a job and delete its machine")
    s.add_argument("job", help="job id or name")
    s.set_defaults(func=cmd_cancel)

    s = sub.add_parser("preempt", parents=[common], help="simulate an eviction of a job's machine")
    s.add_argument("job", help="job id or name")
    s.add_argument("--grace", type=float, default=3.0, help="seconds between soft-off and power-off (default 3)")
    s.set_defaults(func=cmd_preempt)

    s = sub.add_parser("gc", parents=[common], help="delete leftover machines (and, with --older-than, old jobs)")
    s.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    s.add_argument("--older-than", metavar="AGE", help="also delete folders of ended jobs older than AGE (7d, 12h)")
    s.add_argument("--any-owner", action="store_true", help="also machines labelled with another owner")
    s.set_defaults(func=cmd_gc)

    s = sub.add_parser("doctor", parents=[common], help="check configuration, Store and backend")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("supervise", parents=[common], help="relaunch preempted jobs until stopped")
    s.add_argument("--interval", default="5s", help="time between rounds (default 5s)")
    s.add_argument("--once", action="store_true", help="one round, then exit")
    s.set_defaults(func=cmd_supervise)

    s = sub.add_parser("image", help="Compute Engine images with this notebook's Python and packages")
    image = s.add_subparsers(dest="image_command", metavar="IMAGE_COMMAND", required=True)
    s = image.add_parser(
        "build",
        parents=[common],
        help="bake an image with this Python's packages and nbburst",
        description="Bake a Compute Engine image with this notebook's Python version, its package "
        "versions and nbburst, so job VMs boot without installing anything.",
    )
    s.add_argument("--family", help="image family (default nbburst-pyXY for this Python)")
    base = s.add_mutually_exclusive_group()
    base.add_argument("--base-image", metavar="IMAGE", help="start from this image (projects/P/global/images/NAME)")
    base.add_argument("--base-family", metavar="FAMILY", help="start from the newest image of this family")
    s.add_argument("--base-project", metavar="PROJECT", help="project of --base-family (default: the project)")
    s.add_argument("--zone", help="zone of the builder VM (default: configuration)")
    s.add_argument("--machine-type", metavar="TYPE", help="builder machine type (default e2-standard-4)")
    s.add_argument(
        "--requirements",
        metavar="FILE",
        help="bake these requirements instead of this Python's "
        "installed packages (nbburst's own dependencies are added)",
    )
    s.add_argument("--timeout", default="1h", help="give up on the build after this long (default 1h)")
    s.add_argument(
        "--dry-run", action="store_true", help="print the plan (base image, packages, builder) and create nothing"
    )
    s.set_defaults(func=cmd_image_build)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)  # exits with 2 on a usage error
    try:
        return int(args.func(args) or 0)
    except Exit as exc:
        if exc.message:
            print(f"nbburst: {exc.message}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("nbburst: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `nbburst logs JOB | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except UsageError as exc:
        print(f"nbburst: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except JobNotFound as exc:
        print(f"nbburst: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except BurstError as exc:
        print(f"nbburst: {exc}", file=sys.stderr)
        return EXIT_FAILED if isinstance(exc, JobFailed) else EXIT_CONFIG
    except Exception as exc:
        from ..protocol.signing import SignatureError

        if isinstance(exc, SignatureError):
            print(f"nbburst: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        raise


if __name__ == "__main__":
    sys.exit(main())
