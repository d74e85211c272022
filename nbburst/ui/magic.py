"""``%%burst`` and ``%burst``: parse options, call the client API, render.

The cell magic is a thin front end: capture the cell, submit it, stream its
output into the cell while it runs, then put its variables into the notebook
namespace, exactly as if the cell had run here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import publish_display_data

from .. import config
from ..client.burst import Burst
from ..client.capture import capture
from ..client.cellcode import check_syntax
from ..client.job import Job
from ..client.result import CellResult
from ..client.session.manager import DEFAULT_IDLE, DEFAULT_NAME, DEFAULT_TIMEOUT
from ..errors import UsageError
from ..options import CELL_OPTIONS
from ..protocol import backends
from .records import compact, show_record
from .sessions import SessionsTable
from .tables import RECENT_JOBS, ConfigTable, JobsTable, select_infos


def _parse(func: Any, line: str) -> Any:
    """parse_argstring that raises UsageError instead of exiting the kernel's argparse."""
    try:
        return parse_argstring(func, line)
    except SystemExit:
        raise UsageError(f"invalid options: {line!r}; see %%burst? for the options") from None
    except Exception as exc:  # argparse's UsageError from IPython names the option
        raise UsageError(str(exc)) from None


def cell_options(func: Any) -> Any:
    """A flag of ``%%burst`` for each declared cell option, in their order (nbburst/options.py).

    As ipyparallel's ``exec_args`` gives ``%%px`` and ``%pxconfig`` one set of flags, the one declaration
    also makes Options.build's checks, nbburst.submit's keywords and docs/options.md. A flag not given
    reads as None (a switch as False) and is left out, so the configuration's default applies."""
    for option in reversed(CELL_OPTIONS):  # decorators apply from the last: the first option ends on top
        func = argument(option.flag, **option.argparse())(func)
    return func


class _LineParser(argparse.ArgumentParser):
    """argparse for %burst sub-commands: errors become UsageError, --help prints and returns."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        if message:
            print(message, file=sys.stderr)
        raise _HelpShown()


class _HelpShown(Exception):
    pass


@magics_class
class BurstMagics(Magics):
    def __init__(self, shell: Any):
        super().__init__(shell)
        self.overrides: dict[str, Any] = {}
        self._client: Burst | None = None

    @property
    def client(self) -> Burst:
        """The session, configured from the kernel's traitlets config on first use."""
        if self._client is None:
            self._client = Burst(config.load(getattr(self.shell, "config", None), self.overrides))
        return self._client

    @magic_arguments()
    @cell_options
    @cell_magic
    def burst(self, line: str, cell: str) -> Any:
        """Run this cell on a burst machine and bring its variables back."""
        __tracebackhide__ = True
        args = _parse(BurstMagics.burst, line)
        given = {name: value for name, value in vars(args).items() if value is not None and value is not False}
        opts = self.client.options(**given)
        code = self.shell.transform_cell(cell)
        check_syntax(code, f"Cell In[{self.shell.execution_count}]", first_line=2)  # the %%burst line is line 1
        cap = capture(code, self.shell.user_ns, opts.out, getattr(self.shell, "user_ns_hidden", None))
        cap.count = self.shell.execution_count
        # The name the kernel gives this code run plainly: a warning or traceback from it names it on the machine
        # as in the kernel, and a function it defines shows its lines here (inspect.getsource, later tracebacks).
        # IPython hands a cell magic its body with a newline the cell itself has not.
        raw = cell.removesuffix("\n")
        cap.code_name = self.shell.compile.get_code_name(raw, code, cap.count)
        self.shell.compile.cache(code, cap.count, raw_code=raw)
        job = self.client.submit_cell(code, cap, opts)
        if job.session is not None and job.session.revived:
            print(f"nbburst: session {job.session.name}'s machine had ended; it runs again", file=sys.stderr)
        if opts.detach:
            print(f"nbburst: job {job.name} ({job.id}) submitted; `%burst attach {job.name}` brings its outputs in")
            view = self._view(job)
            if view is not None:
                view.start("background")
            return job
        return self._wait_and_collect(job)

    def _view(self, job: Job, tail: Any = None) -> Any:
        """The live job view, shown in the cell (reading on from ``tail``); None outside a kernel (plain IPython,
        scripts)."""
        from .view import JobView, in_kernel

        if not in_kernel(self.shell):
            return None
        try:
            return JobView(job, tail).show()
        except Exception as exc:  # the view is a convenience: never fail the cell for it
            print(f"nbburst: no live view ({type(exc).__name__}: {exc})", file=sys.stderr)
            return None

    def _wait_and_collect(self, job: Job, backlog: bool = False) -> Any:
        """Wait for ``job``, showing its output, then bring its variables in. ``backlog``: the job ran before
        this cell (``%burst attach``): what it printed so far is shown compactly first."""
        __tracebackhide__ = True
        view = None
        out_shown = False  # the machine's displayhook showed the cell's Out (a "result" record), in its place
        before_view: list[dict[str, Any]] = []  # what a warm cell showed before its view came

        def on_record(record: dict[str, Any]) -> None:
            nonlocal out_shown
            out_shown = out_shown or record.get("s") == "result"
            show_record(record)
            if view is not None:
                view.feed(record)
            else:
                before_view.append(record)

        try:
            tail = job.tail()
            # A cell on a warm session is often over in a few milliseconds: then, as a plain cell, it shows only
            # its own output. Its view comes if it runs on.
            quick = self.client.settings.view_after
            if job.session is None or backlog or not job.wait(quick, on_record, tail=tail).terminal:
                view = self._view(job, tail)
            if view is not None:
                for record in before_view:
                    view.feed(record)
                view.start("blocking")
            if backlog:
                for record in compact(list(tail.poll())):
                    on_record(record)
            job.wait(on_record=on_record, tail=tail)
        except KeyboardInterrupt:
            message = (
                f"nbburst: detached from job {job.name} ({job.id}); it keeps running. "
                f"`%burst attach {job.name}` brings its outputs in, `%burst cancel {job.name}` stops it."
            )
            if view is not None:  # it follows the job from now on; the message is said once, below
                view.background()
            print("\n" + message)
            return None
        except BaseException:
            if view is not None:
                view.detach()
            raise
        if view is not None:
            view.finish()
        if job.spec.kind == "cell":  # its files into the notebook's folder, as a plain cell leaves them
            for line in job.bring_back():
                print(f"nbburst: {line}", file=sys.stderr)
        # raises the cell's own exception (what it did first stays, as here), or why there is no result
        outcome = job.outcome(self.shell.user_ns, before=self._merge)
        self._merge(outcome)
        if out_shown:  # only `_` and Out[n] are left to set, as the kernel's displayhook would
            if outcome.has_last:
                self.shell.displayhook.update_user_ns(outcome.last)
            return None
        if outcome.last_bundle:
            publish_display_data(*outcome.last_bundle)
            return None
        return outcome.last if outcome.has_last else None

    def _merge(self, outcome: CellResult) -> None:
        outcome.merge_into(self.shell.user_ns)
        for warning in outcome.warnings:
            print(f"nbburst: {warning}", file=sys.stderr)

    # -- line magic ---------------------------------------------------------------------
    @line_magic("burst")
    def burst_line(self, line: str) -> Any:
        """%burst jobs | logs JOB [--follow] [--attempt N] | attach JOB | result JOB | download JOB [DEST] |
        cancel JOB | preempt JOB | config [key=value ...] | session start|stop|list"""
        __tracebackhide__ = True
        words = shlex.split(line)
        if not words:
            raise UsageError(
                "usage: %burst jobs | logs JOB | attach JOB | result JOB | download JOB [DEST] | cancel JOB | "
                "preempt JOB | config [key=value ...] | session start|stop|list"
            )
        command, rest = words[0], words[1:]
        handler = getattr(self, f"_cmd_{command}", None)
        if handler is None:
            raise UsageError(
                f"%burst: unknown command {command!r}; "
                "use jobs, logs, attach, result, download, cancel, preempt, config or session"
            )
        try:
            return handler(rest)
        except _HelpShown:
            return None

    def _one_job(self, rest: list[str], command: str) -> Job:
        if not rest:
            raise UsageError(f"%burst {command}: name the job (id or --name), e.g. %burst {command} my-search")
        return self.client.job(rest[0])

    def _cmd_jobs(self, rest: list[str]) -> JobsTable:
        p = _LineParser(prog="%burst jobs", description="List jobs in the Store, newest first.")
        p.add_argument(
            "--all", action="store_true", help=f"all jobs (default: unfinished ones and the {RECENT_JOBS} newest)"
        )
        p.add_argument("--state", help="only these states, comma-separated (running, failed, active, done, ...)")
        args = p.parse_args(rest)
        return JobsTable(select_infos(self.client, all_jobs=args.all, states=args.state), with_totals=True)

    def _cmd_logs(self, rest: list[str]) -> None:
        p = _LineParser(prog="%burst logs", description="Print a job's output.")
        p.add_argument("job")
        p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
        p.add_argument("--attempt", type=int, help="only this attempt (1, 2, ...)")
        args = p.parse_args(rest)
        job = self.client.job(args.job)
        if args.follow:

            def show(record: dict[str, Any]) -> None:
                if args.attempt is None or record.get("attempt") == args.attempt:
                    show_record(record)

            try:
                job.wait(on_record=show, supervise=False)
            except KeyboardInterrupt:
                print(f"\nnbburst: stopped following job {job.name}; it keeps running")
        else:
            print(job.logs(args.attempt), end="")

    def _cmd_attach(self, rest: list[str]) -> Any:
        __tracebackhide__ = True
        return self._wait_and_collect(self._one_job(rest, "attach"), backlog=True)

    def _cmd_result(self, rest: list[str]) -> Any:
        __tracebackhide__ = True
        job = self._one_job(rest, "result")
        return job.value_of(job.outcome())

    def _cmd_download(self, rest: list[str]) -> None:
        p = _LineParser(prog="%burst download", description="Fetch the files a job's cell wrote in its working folder.")
        p.add_argument("job")
        p.add_argument("dest", nargs="?", default=".", help="the folder to put them in (default: this one)")
        args = p.parse_args(rest)
        job = self.client.job(args.job)
        arrival = job.download(args.dest)
        for line in arrival.lines(job.name, asked=True):
            print(f"nbburst: {line}")

    def _cmd_cancel(self, rest: list[str]) -> None:
        job = self._one_job(rest, "cancel")
        print(f"nbburst: job {job.name} is {job.cancel().value}")

    def _cmd_preempt(self, rest: list[str]) -> None:
        p = _LineParser(prog="%burst preempt", description="Simulate an eviction of a job's machine.")
        p.add_argument("job")
        p.add_argument("--grace", type=float, default=3.0, help="seconds between the soft-off signal and power-off")
        args = p.parse_args(rest)
        job = self.client.job(args.job)
        job.preempt(args.grace)
        print(f"nbburst: preempted the machine of job {job.name}; it will be relaunched")

    def _cmd_config(self, rest: list[str]) -> ConfigTable:
        settings = self.client.settings
        for item in rest:
            key, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"%burst config: write key=value, got {item!r}")
            config.set_value(settings, key.strip(), value.strip(), "%burst config")
            self.overrides[key.strip()] = value.strip()
        if rest:
            default = self.client.sessions.default
            self._client = None  # a new session: Store, machines and key ring follow the new settings
            self.client.sessions.default = default
        return ConfigTable(config.describe(self.client.settings))

    def _cmd_session(self, rest: list[str]) -> SessionsTable | None:
        p = _LineParser(prog="%burst session", description="Warm sessions: one machine kept for later cells.")
        sub = p.add_subparsers(dest="action", required=True)
        start = sub.add_parser("start", help="start a session; later %%burst cells run on it")
        start.add_argument("--cores", type=int, help="vCPUs of the session's machine")
        start.add_argument("--idle", default=DEFAULT_IDLE, help=f"end after this long without a cell ({DEFAULT_IDLE})")
        start.add_argument("--timeout", default=DEFAULT_TIMEOUT, help=f"hard time limit ({DEFAULT_TIMEOUT})")
        start.add_argument("--name", default=DEFAULT_NAME, help=f"the session's name ({DEFAULT_NAME})")
        start.add_argument("--backend", choices=backends.names(), help="where to run (default from config)")
        start.add_argument(
            "--preload", help="modules the machine imports ahead, comma-separated (default: the kernel's packages)"
        )
        stop = sub.add_parser("stop", help="end a session and its machine")
        stop.add_argument("name", nargs="?", help="the session (default: the current one)")
        sub.add_parser("list", help="the sessions, with their cost so far")
        args = p.parse_args(rest)
        sessions = self.client.sessions
        if args.action == "start":
            preload = None if args.preload is None else [m for m in args.preload.split(",") if m]
            session = sessions.start(args.name, args.cores, args.idle, args.timeout, args.backend, preload)
            print(
                f"nbburst: session {session.name} is up ({session.record.cores} cores); "
                f"%%burst cells run on it until `%burst session stop`"
            )
            return None
        if args.action == "stop":
            info = sessions.stop(args.name)
            print(f"nbburst: session {info['name']} stopped after {info['cells']} cells; cost ${info['cost_usd']:.4f}")
            return None
        return SessionsTable([s.info() for s in sessions.all()])
