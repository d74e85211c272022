"""``%%burst`` and ``%burst``: parse options, call the client API, render.

The cell magic is a thin front end: capture the cell, submit it, stream its
output into the cell while it runs, then put its variables into the notebook
namespace, exactly as if the cell had run here.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import publish_display_data

from . import config
from .capture import capture
from .client import Burst, Job, raise_remote
from .errors import UsageError
from .job import State


def _parse(func: Any, line: str) -> Any:
    """parse_argstring that raises UsageError instead of exiting the kernel's argparse."""
    try:
        return parse_argstring(func, line)
    except SystemExit:
        raise UsageError(f"invalid options: {line!r}; see %%burst? for the options") from None
    except Exception as exc:  # argparse's UsageError from IPython names the option
        raise UsageError(str(exc)) from None


def render_record(record: dict[str, Any]) -> None:
    """Show one log record in the current cell, as the kernel would show it locally."""
    kind = record.get("s")
    if kind == "stdout":
        sys.stdout.write(record["x"])
        sys.stdout.flush()
    elif kind == "stderr":
        sys.stderr.write(record["x"])
        sys.stderr.flush()
    elif kind == "display":
        publish_display_data(record.get("data", {}), record.get("metadata") or {})
    elif kind == "event":
        sys.stderr.write(record["x"] if record["x"].endswith("\n") else record["x"] + "\n")


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
    @argument("--cores", type=int, help="vCPUs of the machine (the cell sees exactly this many)")
    @argument("--memory", type=float, help="minimum memory in GB")
    @argument("--machine-type", help="Compute Engine machine type, e.g. n2-standard-64")
    @argument("--gpu", help="GPU type and count, e.g. nvidia-l4 or nvidia-tesla-t4:2")
    @argument("--on-demand", action="store_true", help="a standard VM instead of spot")
    @argument("--zone", help="Compute Engine zone, or auto")
    @argument("--image", help="VM image")
    @argument("--image-family", help="VM image family")
    @argument("--backend", choices=["local", "gce"], help="where to run (default from config)")
    @argument("--name", help="a name for the job (usable wherever a job id is)")
    @argument("--timeout", help="hard time limit: 90s, 30m, 2h (default 24h)")
    @argument("--max-restarts", type=int, help="relaunches after preemption before failing (default 10)")
    @argument("--detach", action="store_true", help="return a Job handle at once instead of waiting")
    @argument("--out", help="comma-separated names to bring back (default: all assigned)")
    @argument("--files", nargs="+", default=[], help="local files to place in the cell's working folder")
    @argument("--workers", type=int, help="Dask workers for scale-out")
    @cell_magic
    def burst(self, line: str, cell: str) -> Any:
        """Run this cell on a burst machine and bring its variables back."""
        __tracebackhide__ = True
        args = _parse(BurstMagics.burst, line)
        opts = self.client.options(**{k: v for k, v in {
            "backend": args.backend, "name": args.name, "cores": args.cores, "memory": args.memory,
            "machine_type": args.machine_type, "gpu": args.gpu, "on_demand": args.on_demand, "zone": args.zone,
            "image": args.image, "image_family": args.image_family, "timeout": args.timeout,
            "max_restarts": args.max_restarts, "detach": args.detach, "out": args.out, "files": args.files,
            "workers": args.workers}.items() if v not in (None, False)})
        code = self.shell.transform_cell(cell)
        cap = capture(code, self.shell.user_ns, opts.out, set(getattr(self.shell, "user_ns_hidden", ())))
        job = self.client.submit_cell(code, cap, opts)
        if opts.detach:
            print(f"nbburst: job {job.name} ({job.id}) submitted; `%burst attach {job.name}` brings its outputs in")
            return job
        return self._wait_and_collect(job)

    def _wait_and_collect(self, job: Job) -> Any:
        __tracebackhide__ = True
        try:
            state = job.wait(on_record=render_record)
        except KeyboardInterrupt:
            print(f"\nnbburst: detached from job {job.name} ({job.id}); it keeps running. "
                  f"`%burst attach {job.name}` brings its outputs in, `%burst cancel {job.name}` stops it.")
            return None
        if state == State.FAILED and job.store.exists(job.layout.error):
            raise_remote(job.remote_error())
        outcome = job.outcome()
        for warning in outcome.warnings:
            print(f"nbburst: {warning}", file=sys.stderr)
        self.shell.user_ns.update(outcome.values)
        for name in outcome.deleted:
            self.shell.user_ns.pop(name, None)
        if outcome.last_bundle:
            publish_display_data(*outcome.last_bundle)
            return None
        return outcome.last if outcome.has_last else None

    # -- line magic ---------------------------------------------------------------------
    @line_magic("burst")
    def burst_line(self, line: str) -> Any:
        """%burst jobs | logs JOB [--follow] [--attempt N] | attach JOB | result JOB | cancel JOB |
        preempt JOB | config [key=value ...]"""
        __tracebackhide__ = True
        words = shlex.split(line)
        if not words:
            raise UsageError("usage: %burst jobs | logs JOB | attach JOB | result JOB | cancel JOB | preempt JOB | "
                             "config [key=value ...]")
        command, rest = words[0], words[1:]
        handler = getattr(self, f"_cmd_{command}", None)
        if handler is None:
            raise UsageError(f"%burst: unknown command {command!r}; use jobs, logs, attach, result, cancel, "
                             "preempt or config")
        return handler(rest)

    def _one_job(self, rest: list[str], command: str) -> Job:
        if not rest:
            raise UsageError(f"%burst {command}: name the job (id or --name), e.g. %burst {command} my-search")
        return self.client.job(rest[0])

    def _cmd_jobs(self, rest: list[str]) -> None:
        for info in (job.info() for job in self.client.jobs()):
            machine = (info["machine"] or {}).get("type") or "-"
            print(f"{info['id']:<26} {info['name'][:24]:<24} {info['state']:<12} {machine:<18} "
                  f"{info['elapsed_s']:>8.1f}s  ${info['cost_usd']:.4f}")

    def _cmd_logs(self, rest: list[str]) -> None:
        job = self._one_job(rest, "logs")
        attempt = int(rest[rest.index("--attempt") + 1]) if "--attempt" in rest else None
        if "--follow" in rest or "-f" in rest:
            job.wait(on_record=render_record, supervise=False)
        else:
            print(job.logs(attempt), end="")

    def _cmd_attach(self, rest: list[str]) -> Any:
        __tracebackhide__ = True
        return self._wait_and_collect(self._one_job(rest, "attach"))

    def _cmd_result(self, rest: list[str]) -> Any:
        job = self._one_job(rest, "result")
        outcome = job.outcome()
        return outcome.last if job.spec.kind == "call" else outcome.values

    def _cmd_cancel(self, rest: list[str]) -> None:
        job = self._one_job(rest, "cancel")
        print(f"nbburst: job {job.name} is {job.cancel().value}")

    def _cmd_preempt(self, rest: list[str]) -> None:
        job = self._one_job(rest, "preempt")
        job.preempt()
        print(f"nbburst: preempted the machine of job {job.name}; it will be relaunched")

    def _cmd_config(self, rest: list[str]) -> None:
        for item in rest:
            key, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"%burst config: write key=value, got {item!r}")
            config.set_value(self.client.settings, key.strip(), value.strip(), "%burst config")
            self.overrides[key.strip()] = value.strip()
            self.client._stores.clear()
            self.client._machines.clear()
        for name, entry in config.describe(self.client.settings).items():
            print(f"{name:<20} {entry['value']!s:<40} ({entry['source']})")

