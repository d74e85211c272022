"""The ``nbburst`` command: list, follow, fetch, cancel and clean up jobs from a terminal, set up, bake images.

It reads the same configuration as the notebook (Jupyter config files, then
``NBBURST_*`` variables, then ``--root``/``--backend``/``--set``) and the same
Store, so jobs started in a notebook are visible here and the other way round.

Exit codes (stable, for scripts):

==  =========================================================================
0   success (for ``result`` and ``logs -f``: the job SUCCEEDED)
1   the job FAILED or was CANCELLED (``result``, ``logs -f``); the image build failed (``image build``)
2   usage error: a bad option or argument; nothing was done
3   not found: no job with that id or name
4   configuration, credentials or environment: settings, Store, signing key, ``doctor`` failures, a result
    that needs a module missing here
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
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .. import __version__, config
from ..errors import BurstError, JobFailed, JobNotFound, UsageError
from ..protocol import backends
from ..protocol.durations import format_duration, parse_duration
from ..protocol.job import JobLayout, State, valid_job_id
from .records import print_record
from .viewmodel import files_text

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
    from .tables import plain_lines, rich_table, select_infos, totals

    burst = session(args)
    infos = select_infos(burst, all_jobs=args.all, states=args.state)
    if args.json:  # a list of Job.info(); with --cost, {"jobs": [...], "totals": {...}}
        print(json.dumps({"jobs": infos, "totals": totals(infos)} if args.cost else infos, indent=1, default=str))
        return EXIT_OK
    if not infos:
        print(f"no jobs in {burst.store.url}" + ("" if args.all or args.state else " (try --all)"))
        return EXIT_OK
    if args.plain or not sys.stdout.isatty():
        print("\n".join(plain_lines(infos, with_totals=args.cost)))
        return EXIT_OK
    out = console()
    out.print(rich_table(infos, with_totals=args.cost, width=out.width), crop=False)
    return EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    info = job.info()
    info["url"], info["plan"] = job.url, job.spec.plan
    print(json.dumps(info, indent=1, default=str))
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    if not args.follow:
        sys.stdout.write(job.logs(args.attempt))
        say_files(job)
        return EXIT_OK

    def show(record: dict[str, Any]) -> None:
        if args.attempt is None or record.get("attempt") == args.attempt:
            print_record(record)

    state = job.wait(on_record=show)
    print(f"nbburst: {verdict(job, state)}", file=sys.stderr)
    say_files(job)
    return job_exit(state)


def say_files(job: Any) -> None:
    """The files the job's cell wrote in its working folder, on stderr: its log says nothing of them (a plain
    cell prints nothing of the files it writes)."""
    kept = job.files()
    if kept:
        print(f"nbburst: {files_text(kept)}; `nbburst download {job.name}` fetches them", file=sys.stderr)


def verdict(job: Any, state: State) -> str:
    """``job NAME SUCCEEDED in 1m 02s``, or ``job NAME FAILED: why``: how a followed job ended."""
    if state == State.SUCCEEDED:
        return f"job {job.name} {state.value} in {format_duration(job.info()['elapsed_s'])}"
    terminal = job.terminal()
    return f"job {job.name} {state.value}" + (f": {terminal.reason}" if terminal and terminal.reason else "")


def cmd_result(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    if args.no_wait:
        state = job.state
    else:
        timeout = parse_duration(args.timeout, "--timeout") if args.timeout else None
        state = job.state
        if not state.terminal:
            print(
                f"nbburst: waiting for job {job.name} ({state.value}); Ctrl-C stops waiting, the job goes on",
                file=sys.stderr,
                flush=True,
            )
        state = job.wait(timeout=timeout)
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
        raise Exit(EXIT_FAILED, verdict(job, state))
    try:
        outcome = job.outcome()
    except ImportError as exc:  # the result as a whole needs what is not here
        raise Exit(EXIT_CONFIG, unloadable(job, {"": f"{type(exc).__name__}: {exc}"})) from None
    if outcome.failed:  # a partial result is no result: nothing is printed or written
        raise Exit(EXIT_CONFIG, unloadable(job, outcome.failed))
    value = job.value_of(outcome)
    for warning in outcome.warnings:
        print(f"nbburst: {warning}", file=sys.stderr)
    say_files(job)
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


_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def unloadable(job: Any, failed: dict[str, str]) -> str:
    """One line on a finished job's values that cannot be loaded in this environment (name -> why)."""
    from ..protocol.transfer import LAST

    missing = sorted({m.group(1) for why in failed.values() if (m := _MISSING_MODULE.search(why))})
    if missing:
        modules = ", ".join(repr(m) for m in missing)
        return (
            f"the result of job {job.name} needs the module{'s' if len(missing) > 1 else ''} {modules}, "
            f"not installed for {sys.executable}: install it here, or read the result where the job was submitted"
        )
    names = ", ".join(repr(n) for n in failed if n and n != LAST)
    return (
        f"the result of job {job.name} cannot be loaded here"
        + (f" ({names})" if names else "")
        + f": {next(iter(failed.values()))}; read it in the environment the job was submitted from"
    )


def _short_repr(value: Any, limit: int = 2000) -> str:
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__}: repr failed: {exc}>"
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def cmd_download(args: argparse.Namespace) -> int:
    job = find_job(session(args), args.job)
    arrival = job.download(args.dest)
    for line in arrival.lines(job.name, asked=True):
        print(line)
    return EXIT_OK


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
        f"(a waiting notebook cell, the Jupyter server, `nbburst supervise`, or on Compute Engine the watcher VM)"
    )
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """Machines whose job ended or is unknown; with ``--older-than``, ended jobs; and what interrupted
    submissions and deleted jobs left in the Store (see :mod:`nbburst.client.gc`), older than ``--grace``."""
    from ..client import gc

    started = time.time()  # keys are judged as of the start: the run itself ages nothing
    burst = session(args)
    older = parse_duration(args.older_than, "--older-than") if args.older_than else None
    grace = parse_duration(args.grace, "--grace")
    local_ones = [n for n in backends.names() if not backends.is_remote(n)]
    chosen = [args.backend] if args.backend else list(dict.fromkeys([burst.settings.backend, *local_ones]))
    verb = "would delete" if args.dry_run else "deleted"
    done: dict[str, int] = {}
    problems = 0
    stores: dict[str, Any] = {}
    for backend in chosen:
        try:
            machines = burst.machines(backend)
            store = burst.store_for(backend)
            listed = machines.list()
        except Exception as exc:
            print(f"nbburst: skipped the {backend} backend: {type(exc).__name__}: {exc}", file=sys.stderr)
            problems += 1
            continue
        problems += _gc_machines(args, burst, backend, machines, store, listed, verb, done)
        problems += _gc_held_keys(args, burst, backend, machines, store, verb, done)
        problems += _gc_watchers(args, backend, machines, store, verb, done)
        if store.url in stores:
            continue  # two backends, one Store: swept once
        stores[store.url] = store
        dropped = _gc_old_jobs(args, burst, store, older, verb, done) if older else []
        leftovers = gc.sweep(store, grace, dropped)
        _gc_report(leftovers, verb, done)
        if not args.dry_run:
            gc.remove(store, burst.keyring, leftovers)
    keys = gc.orphan_keys(burst.keyring, list(stores.values()), grace, now=started)
    _gc_report(keys, verb, done)
    if not args.dry_run:
        gc.remove(None, burst.keyring, keys)
    summary = ", ".join(f"{n} {kind}(s)" for kind, n in done.items()) or "nothing"
    print(f"gc: {verb} {summary}" + (" (dry run)" if args.dry_run else ""), file=sys.stderr)
    return EXIT_CONFIG if problems else EXIT_OK


def _gc_machines(
    args: argparse.Namespace,
    burst: Any,
    backend: str,
    machines: Any,
    store: Any,
    listed: list[Any],
    verb: str,
    done: dict[str, int],
) -> int:
    """Delete the machines whose job ended or is unknown in ``store``; returns how many deletions failed."""
    me = _as_label(config.owner(burst.settings))
    problems = 0
    for m in listed:
        job_id = m.job_id or m.labels.get("nbburst-job", "")
        owner = m.labels.get("nbburst-owner")
        if owner and _as_label(owner) != me and not args.any_owner:
            continue  # someone else's machine: their gc, not ours
        if m.labels.get("nbburst-session") == "1":
            continue  # a warm session's VM ends itself (idle, its limit); `nbburst sessions --stop` ends it
        why = _job_over(burst, store, job_id, f"machine {m.name}")
        if why is not None:
            line = f"{verb} machine {m.name} ({backend}): {why}"
            problems += _gc_delete(args, done, "machine", f"machine {m.name}", partial(machines.delete, m.name), line)
    return problems


def _gc_watchers(
    args: argparse.Namespace, backend: str, machines: Any, store: Any, verb: str, done: dict[str, int]
) -> int:
    """Delete the watcher VMs of ``store`` once it has no unfinished job (see :func:`gc.idle_watchers`); returns
    how many deletions failed."""
    from ..client import gc

    problems = 0
    try:
        idle = gc.idle_watchers(machines, store)
    except Exception as exc:
        print(f"nbburst: could not list the {backend} backend's watchers: {exc}", file=sys.stderr)
        return 1
    for name in idle:
        line = f"{verb} watcher {name} ({backend}): no unfinished job in {store.url}"
        problems += _gc_delete(
            args, done, "watcher", f"the watcher {name}", partial(machines.delete_watcher, name), line
        )
    return problems


def _job_over(burst: Any, store: Any, job_id: str, what: str) -> str | None:
    """Why what belongs to job ``job_id`` may go (its job ended, or is unknown in ``store``); None while the job
    lives or cannot be verified here."""
    from ..client.job import Job
    from ..protocol.signing import SignatureError

    if not job_id or not valid_job_id(job_id) or not store.exists(JobLayout(job_id).spec):
        return "its job is unknown in " + store.url
    try:
        terminal = Job(burst, job_id, store).terminal()
    except SignatureError as exc:
        print(f"nbburst: left {what} alone: its job cannot be verified here ({exc})", file=sys.stderr)
        return None
    return None if terminal is None else f"its job ended ({terminal.state.value})"


def _gc_held_keys(
    args: argparse.Namespace, burst: Any, backend: str, machines: Any, store: Any, verb: str, done: dict[str, int]
) -> int:
    """Delete the job keys the backend holds outside the Store (Compute Engine: Secret Manager secrets) whose
    job ended or is unknown in ``store``; returns how many deletions failed."""
    me = _as_label(config.owner(burst.settings))
    problems = 0
    try:
        held = machines.held_keys()
    except Exception as exc:
        print(f"nbburst: could not list the {backend} backend's job keys: {exc}", file=sys.stderr)
        return 1
    for job_id, owner in held:
        if owner and _as_label(owner) != me and not args.any_owner:
            continue
        why = _job_over(burst, store, job_id, f"the key of job {job_id}")
        if why is not None:
            line = f"{verb} the {backend} key of job {job_id}: {why}"
            what = f"the key of job {job_id}"
            problems += _gc_delete(args, done, "held key", what, partial(machines.release_key, job_id), line)
    return problems


def _gc_delete(
    args: argparse.Namespace, done: dict[str, int], kind: str, what: str, delete: Callable[[], Any], line: str
) -> int:
    """Delete one thing (unless ``--dry-run``), count it as a ``kind`` and print ``line``; returns 1 if the
    deletion failed (it is said, naming ``what``), else 0."""
    if not args.dry_run:
        try:
            delete()
        except Exception as exc:
            print(f"nbburst: could not delete {what}: {exc}", file=sys.stderr)
            return 1
    done[kind] = done.get(kind, 0) + 1
    print(line)
    return 0


def _gc_old_jobs(
    args: argparse.Namespace, burst: Any, store: Any, older: float, verb: str, done: dict[str, int]
) -> list[str]:
    """Delete the folders (and keys) of jobs that ended more than ``older`` seconds after they were made;
    returns their ids."""
    cutoff = time.time() - older
    dropped = []
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
        dropped.append(job.id)
        done["job folder"] = done.get("job folder", 0) + 1
        print(
            f"{verb} job {job.id}"
            + (f" ({job.spec.name})" if job.spec.name != job.id else "")
            + f": {terminal.state.value}, {format_duration(time.time() - job.spec.created)} old"
        )
    return dropped


def _gc_report(items: list[Any], verb: str, done: dict[str, int]) -> None:
    for item in items:
        size = f"{_size(item.size)}, " if item.size else ""
        print(f"{verb} {item.kind} {item.name} ({size}{format_duration(item.age)} old): {item.why}")
        done[item.kind] = done.get(item.kind, 0) + 1


def _size(n: float) -> str:
    """``812 bytes``, ``3.4 MB``, ``1.4 GB``."""
    for unit in ("bytes", "KB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


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
                not mode,
                f"{state} is writable"
                + ("; its keys folder (the jobs' signing keys) is open to others" if mode else ""),
                warning=True,  # jobs run, but others who can read the keys can forge their results
                fix=f"chmod 700 {state / 'keys'}",
            )
        )
    except OSError as exc:
        checks.append(
            Check(
                "state dir",
                False,
                f"{state}: {exc}",
                fix=f"make {state} a writable folder, or set c.NBBurst.state_dir or $NBBURST_STATE_DIR to one",
            )
        )
    try:
        store = burst.store
        key = f"doctor/probe-{secrets.token_hex(6)}"
        store.put(key, b"ok")
        ok = store.get(key) == b"ok"
        store.delete(key)
        detail = f"{store.url} is writable and readable" if ok else f"{store.url} gave back other bytes than written"
        checks.append(Check("store", ok, detail, fix=store_fix(settings)))
    except Exception as exc:
        checks.append(Check("store", False, f"{type(exc).__name__}: {exc}", fix=store_fix(settings)))
    checks.append(Check("nbburst", True, f"version {__version__}, Python {sys.version.split()[0]} at {sys.executable}"))
    try:
        checks.extend(burst.machines().doctor())
    except Exception as exc:  # the backend could not even be opened (its own checks never raise)
        fix = (
            f"install what it needs ({exc.name}): pip install --upgrade nbburst"
            if isinstance(exc, ImportError) and exc.name
            else f"correct the {settings.backend} backend's settings named above (`nbburst doctor --set KEY=VALUE` "
            "tries a value), or use --backend local, which needs none"
        )
        checks.append(Check(f"{settings.backend} backend", False, f"{type(exc).__name__}: {exc}", fix=fix))
    return checks


def store_fix(settings: Any) -> str:
    """What to do when the Store cannot be written and read back, for where it is."""
    try:
        url = config.store_url(settings)
    except BurstError:  # a remote backend without a bucket
        return "set c.NBBurst.bucket or $NBBURST_BUCKET (`nbburst setup` then creates the bucket)"
    if url.startswith("gs://"):
        bucket = url[len("gs://") :].split("/", 1)[0]
        return (
            f"check that gs://{bucket} exists (`nbburst setup` creates it) and that these credentials may write "
            "to it (gcloud auth application-default login)"
        )
    return f"make {url} a writable folder, or set c.NBBurst.root or $NBBURST_ROOT (or --root) to one"


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..machines.base import Check

    try:
        burst = session(args, open_store=False)  # a Store that cannot be opened is one of the findings
    except Exit as exc:
        if exc.code != EXIT_CONFIG:
            raise
        found = Check(
            "configuration",
            False,
            exc.message.removeprefix("configuration: "),
            fix="correct that setting where it is set: a Jupyter config file (c.NBBurst...), an $NBBURST_... "
            "variable or --set",
        )
        return print_checks([found])
    checks = doctor_checks(burst)
    if not args.smoke:
        return print_checks(checks)
    if burst.settings.backend != "gce":
        raise Exit(EXIT_USAGE, "--smoke runs jobs on Compute Engine: add --backend gce (or set backend=gce)")
    from .smoke import SmokeRun

    report = SmokeRun(burst, say=lambda line: print(line, flush=True)).run(checks, gpu=args.gpu)
    print(f"the report to paste:\n{report.text()}")
    return EXIT_OK if report.ok else EXIT_CONFIG


def cmd_setup(args: argparse.Namespace) -> int:
    from ..machines.gce.context import GCEContext
    from ..machines.gce.setup import setup

    burst = session(args, open_store=False)  # the bucket may not exist yet: making it is the point
    checks = setup(
        GCEContext(burst.settings),
        args.location,
        args.blob_days,
        grant=not args.no_grant,
        session_sources=args.session_source,
    )
    return print_checks(checks)


def print_checks(checks: list[Any]) -> int:
    """Print findings (``doctor``, ``setup``) one a line, each problem with its fix; exit 4 if one failed."""
    out = console()
    marks = {"ok": "[green]✔[/]", "warn": "[yellow]![/]", "fail": "[bold red]✖[/]"}
    from rich.markup import escape

    for check in checks:  # one line each, however long: the terminal wraps it, a pipe keeps it whole
        out.print(f"{marks[check.level]} {escape(check.name)}: {escape(check.detail)}", soft_wrap=True)
        if check.fix and not check.ok:
            out.print(f"    fix: {escape(check.fix)}", soft_wrap=True)
    failed = [c for c in checks if c.level == "fail"]
    if failed:
        print(f"nbburst: {len(failed)} check(s) failed", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK


def cmd_supervise(args: argparse.Namespace) -> int:
    """Relaunch preempted jobs until Ctrl-C or SIGTERM (for a server without the Jupyter extension)."""
    from ..client.supervision.loop import Loop

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

    def report(job: Any, state: State, relaunched: bool) -> None:
        shown = f"{state.value}" + (f" (attempt {job.attempt})" if job.attempt > 1 else "")
        if last.get(job.id) != shown:
            last[job.id] = shown
            print(f"{time.strftime('%H:%M:%S')} {job.id} {job.spec.name}: {shown}", flush=True)

    try:
        loop = Loop(burst, interval, report=report)
        if args.once:
            loop.round()
            loop.release()
        else:
            loop.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    """Show the warm sessions with their cost so far; ``--stop NAME`` ends one (``--stop all``: every one)."""
    from .sessions import lines

    burst = session(args, open_store=False)
    sessions = burst.sessions
    if args.stop:
        names = [s.name for s in sessions.all()] if args.stop == "all" else [args.stop]
        for name in names:
            info = sessions.stop(name)
            print(f"stopped session {info['name']} after {info['cells']} cells; cost ${info['cost_usd']:.4f}")
        return EXIT_OK
    infos = [s.info() for s in sessions.all()]
    if args.json:
        print(json.dumps(infos, indent=1))
    else:
        print("\n".join(lines(infos)) if infos else "no sessions")
    return EXIT_OK


def cmd_image_build(args: argparse.Namespace) -> int:
    from ..machines.gce.image import run_cli

    return run_cli(session(args, open_store=False), args)


# -- parser ------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", help="Store URL (default: configuration)")
    common.add_argument("--backend", choices=backends.names(), help="backend (default: configuration)")
    common.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting (repeatable)")

    p = argparse.ArgumentParser(
        prog="nbburst",
        description="Manage nbburst jobs: the ones %%burst cells and nbburst.submit started.",
        epilog="Exit codes: 0 ok, 1 job failed or cancelled, 2 usage error, 3 job not found, "
        "4 configuration, credentials or environment, 5 job not finished, 130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"nbburst {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("jobs", parents=[common], help="list jobs (unfinished ones and the newest)")
    s.add_argument("--all", action="store_true", help="all jobs")
    s.add_argument("--state", help="only these states, comma-separated: running, failed, active, done, ...")
    s.add_argument("--cost", action="store_true", help="add totals: cost, machine-hours, saving vs on-demand")
    s.add_argument(
        "--json",
        action="store_true",
        help="a JSON list of Job.info() of each job (with --cost: an object with jobs and totals)",
    )
    s.add_argument(
        "--plain",
        action="store_true",
        help="one job a line, tab-separated: ID NAME STATE AGE MACHINE ELAPSED COST, nothing cut, no header "
        "(the default when the output is not a terminal)",
    )
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

    s = sub.add_parser("download", parents=[common], help="fetch the files a job's cell wrote in its working folder")
    s.add_argument("job", help="job id or name")
    s.add_argument("dest", nargs="?", default=".", help="the folder to put them in (default: the current one)")
    s.set_defaults(func=cmd_download)

    s = sub.add_parser("cancel", parents=[common], help="stop a job and delete its machine")
    s.add_argument("job", help="job id or name")
    s.set_defaults(func=cmd_cancel)

    s = sub.add_parser("preempt", parents=[common], help="simulate an eviction of a job's machine")
    s.add_argument("job", help="job id or name")
    s.add_argument("--grace", type=float, default=3.0, help="seconds between soft-off and power-off (default 3)")
    s.set_defaults(func=cmd_preempt)

    s = sub.add_parser(
        "gc",
        parents=[common],
        help="delete leftover machines, half-written jobs, unreferenced blobs and orphan keys "
        "(and, with --older-than, old jobs)",
    )
    s.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    s.add_argument("--older-than", metavar="AGE", help="also delete folders of ended jobs older than AGE (7d, 12h)")
    s.add_argument(
        "--grace",
        default="1d",
        metavar="AGE",
        help="leave Store leftovers (spec-less job folders, unfinished writes, unreferenced blobs, "
        "orphan keys) younger than AGE alone: an upload may still be in progress (default 1d)",
    )
    s.add_argument("--any-owner", action="store_true", help="also machines labelled with another owner")
    s.set_defaults(func=cmd_gc)

    s = sub.add_parser("doctor", parents=[common], help="check configuration, Store and backend")
    s.add_argument(
        "--smoke",
        action="store_true",
        help="then run real jobs on Compute Engine (about 15 minutes, a few cents): a 4-core cell, a preemption "
        "and its recovery, another zone, the watcher; each step timed, with a report to paste",
    )
    s.add_argument("--gpu", metavar="TYPE[:COUNT]", help="with --smoke: also a job on this GPU (e.g. nvidia-l4)")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser(
        "setup",
        parents=[common],
        help="create the gce bucket if it is missing and let the VMs use it",
        description="Create the gce backend's bucket when it does not exist (uniform bucket-level access, "
        "public access prevention, a lifecycle rule for old values), grant the VMs' service account "
        "roles/storage.objectUser on it, then check who may use it.",
    )
    s.add_argument("--location", metavar="REGION", help="where a new bucket goes (default: the zone's region)")
    s.add_argument(
        "--blob-days",
        type=int,
        default=30,
        metavar="N",
        help="delete stored values (PREFIX/blobs/) older than N days (default 30; 0: keep them)",
    )
    s.add_argument("--no-grant", action="store_true", help="leave the bucket's IAM policy as it is")
    s.add_argument(
        "--session-source",
        action="append",
        metavar="CIDR",
        help="the notebook's address range: create the firewall rule admitting it to session VMs' relay port",
    )
    s.set_defaults(func=cmd_setup)

    s = sub.add_parser("supervise", parents=[common], help="relaunch preempted jobs until stopped")
    s.add_argument("--interval", default="5s", help="time between rounds (default 5s)")
    s.add_argument("--once", action="store_true", help="one round, then exit")
    s.set_defaults(func=cmd_supervise)

    s = sub.add_parser("sessions", parents=[common], help="warm sessions, with their cost so far; --stop ends one")
    s.add_argument("--stop", metavar="NAME", help="end this session and its machine (all: every session)")
    s.add_argument("--json", action="store_true", help="a JSON list of each session's summary")
    s.set_defaults(func=cmd_sessions)

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
        from ..store import StoreError

        if isinstance(exc, (SignatureError, StoreError)):  # a Store's says what failed, where, and what to do
            print(f"nbburst: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        raise


if __name__ == "__main__":
    sys.exit(main())
