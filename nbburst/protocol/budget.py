"""A job's dollar cap (``--budget``): what its machines may cost in all, relaunches included.

A ``--workers N`` job has N+1 machines of the planned type (its own and its
workers, launched with it and ended with it): each figure below is for all of
them, so what the budget left is shared by the N+1 machines.

The cap is enforced in three places that share these figures, so that it holds
whoever is left standing:

* at plan, a budget that does not buy :data:`MIN_RUN_SECONDS` of the planned
  machine is refused (no machine boots and runs a cell in less);
* at every launch, the machine's run time is capped at what the budget left
  buys at its price (on Compute Engine: ``scheduling.maxRunDuration`` with
  ``instanceTerminationAction=DELETE``, so Google's side ends it even when
  nobody watches), and a supervisor relaunches neither a job nor a worker
  machine whose budget is spent;
* on the machine, the agent stops the cell a moment before the cap, so the job
  ends with a clear reason and its checkpoints in the Store (``--resume``
  continues it with more budget).

Spend is the machine time of every attempt at the price recorded in the plan,
times the job's machines (:func:`.pricing.job_cost`): what the job view, the
sidebar and ``nbburst jobs`` show.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..errors import UsageError
from . import pricing

#: The least a budget must buy: Compute Engine's shortest maxRunDuration, and about the fastest a VM boots.
MIN_RUN_SECONDS = 30
#: The agent stops the cell this share of an attempt's allowance before the cap (at most STOP_MARGIN_MAX_S).
STOP_MARGIN_SHARE = 0.1
STOP_MARGIN_MAX_S = 15.0


def parse_budget(value: str | float | None) -> float | None:
    """``2.50``, ``"2.50"``, ``"$2.50"`` -> 2.5 (US dollars); None or "" -> no cap."""
    if value is None or value == "":
        return None
    text = str(value).strip().removeprefix("$").replace(",", "")
    try:
        amount = float(text)
    except ValueError:
        raise UsageError(f"--budget: {value!r} is not an amount of US dollars; write it like 2.50") from None
    if not math.isfinite(amount) or amount <= 0:
        raise UsageError(f"--budget: must be a positive amount of US dollars, got {value!r}")
    return amount


def machines(spec: Any) -> int:
    """How many machines the job runs at once: its own and its ``--workers``."""
    return pricing.machine_count(spec)


def per_hour(spec: Any) -> float:
    """What the job's machines (its own and its workers) cost an hour, as planned (0 on the free local backend)."""
    return pricing.breakdown_of(spec.plan, spec.backend).total * machines(spec)


def seconds_for(amount: float, hourly: float) -> float:
    """How long ``amount`` dollars keep a machine of ``hourly`` dollars an hour running (inf when it is free)."""
    return math.inf if hourly <= 0 else max(0.0, amount) / hourly * 3600.0


def check_plan(budget_usd: float | None, plan: Any, backend: str, count: int = 1) -> None:
    """Refuse a budget too small to boot the ``count`` planned machines (``plan``: a Plan or its dict; ``count``:
    the job's own and its workers), naming the least."""
    if budget_usd is None:
        return
    hourly = pricing.breakdown_of(plan if isinstance(plan, dict) else plan.to_dict(), backend).total * count
    if seconds_for(budget_usd, hourly) < MIN_RUN_SECONDS:
        least = hourly * MIN_RUN_SECONDS / 3600.0
        what = "the planned machine" if count == 1 else f"the {count} planned machines"
        raise UsageError(
            f"--budget {pricing.usd(budget_usd)} buys {seconds_for(budget_usd, hourly):.0f} s of {what} "
            f"at {pricing.usd(hourly)}/h, less than the {MIN_RUN_SECONDS} s a machine needs to boot; "
            f"give at least {pricing.usd(least)}"
        )


def spent(spec: Any, statuses: list[Any], ended: float | None = None, now: float | None = None) -> float:
    """What the job's machines have cost so far (or in all, once ``ended``)."""
    return float(pricing.job_cost(spec, statuses, ended, now)["total"])


def left(spec: Any, statuses: list[Any], now: float | None = None) -> float | None:
    """Dollars left of the budget (None: no cap)."""
    if spec.budget_usd is None:
        return None
    return max(0.0, spec.budget_usd - spent(spec, statuses, now=now))


def exhausted(spec: Any, statuses: list[Any], now: float | None = None) -> str:
    """Why the job may not run any more (its budget cannot buy another boot); "" while it may."""
    remaining = left(spec, statuses, now)
    if remaining is None or seconds_for(remaining, per_hour(spec)) >= MIN_RUN_SECONDS:
        return ""
    return reached(spec.budget_usd, spec.budget_usd - remaining)


def reached(budget_usd: float, spent_usd: float) -> str:
    """The reason a job that reached its cap ends with."""
    return (
        f"reached its budget: {pricing.usd(spent_usd)} spent of {pricing.usd(budget_usd)}; its checkpoints are kept "
        "(--resume JOB continues it with a new budget)"
    )


def for_launch(spec: Any, statuses: list[Any]) -> Any:
    """The spec a launch receives: its ``budget_usd`` is what is left for this machine (unchanged without a cap)."""
    remaining = left(spec, statuses)
    return spec if remaining is None else dataclasses.replace(spec, budget_usd=round(remaining, 6))


def run_seconds(spec: Any) -> int | None:
    """The longest a machine launched with ``spec`` (see :func:`for_launch`) may run, the job's own or a worker:
    what is left bought for all the job's machines at once; None: no cap, or free."""
    if spec.budget_usd is None:
        return None
    allowance = seconds_for(spec.budget_usd, per_hour(spec))
    return None if math.isinf(allowance) else max(1, int(round(allowance, 3)))  # whole seconds, float noise aside


def stop_after(allowance_s: float) -> float:
    """When the agent stops the cell, in seconds from its machine's launch: shortly before the cap."""
    return allowance_s - min(STOP_MARGIN_MAX_S, STOP_MARGIN_SHARE * allowance_s)


def view(budget_usd: float | None, spent_usd: float) -> dict[str, Any] | None:
    """Spend against budget, for tables and the sidebar: ``{"usd", "spent", "left", "share"}``; None without a cap."""
    if budget_usd is None:
        return None
    return {
        "usd": budget_usd,
        "spent": round(spent_usd, 6),
        "left": round(max(0.0, budget_usd - spent_usd), 6),
        "share": round(min(1.0, spent_usd / budget_usd), 4) if budget_usd else 1.0,
    }


def text(budget: dict[str, Any] | None) -> str:
    """``$0.0420 of $2.50`` (or "" without a cap)."""
    return f"{pricing.usd(budget['spent'])} of {pricing.usd(budget['usd'])}" if budget else ""


def stop_time(spec: Any, earlier: list[Any], launched: float) -> float | None:
    """When the agent of an attempt launched at ``launched`` stops the cell (seconds since the epoch), given the
    statuses of the ``earlier`` attempts; None without a cap, or on a free machine."""
    remaining = left(spec, earlier, now=launched)
    if remaining is None:
        return None
    allowance = seconds_for(remaining, per_hour(spec))
    return None if math.isinf(allowance) else launched + stop_after(allowance)
