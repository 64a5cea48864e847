"""`capacity`: SageMaker training plans for a spec: find offerings, reserve one, list the plans."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import typer

from orchestrator.cli.options import REGION_OPTION
from orchestrator.cli.output import err, out

app = typer.Typer(name="capacity", no_args_is_help=True,
                  help="Training plans (reserved SageMaker capacity): offerings for a spec, reserve one, list them.")

SPEC_ARGUMENT = typer.Argument(..., help="Job spec YAML (backend: sagemaker).")


def _when(value: str | None) -> dt.datetime | None:
    """A --start-after / --end-before value: a date (midnight UTC) or an ISO date and time (UTC
    when it names no zone)."""
    if value is None:
        return None
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a date: give YYYY-MM-DD or YYYY-MM-DDTHH:MM") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _utc(value: dt.datetime | None) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M") if value else "?"


def _money(value: float | None, currency: str = "USD") -> str:
    return f"{value:,.2f} {currency}" if value is not None else "unknown"


def _search(path: Path, start_after, end_before):
    from orchestrator import spec
    from orchestrator.capacity import offerings, plans

    loaded = spec.load(path)
    wanted, skipped = offerings.searches(loaded)
    found = offerings.search(plans.client(loaded.region), wanted, start_after, end_before) if wanted else []
    return loaded, wanted, skipped, found


def _offering_lines(rank: int, offering) -> list[str]:
    est = offering.search.estimate
    bound = f"{est.usd_max:,.2f} USD" if est.known else "unknown"
    hours = f"{offering.duration_minutes // 60} h" + (f" {offering.duration_minutes % 60} min"
                                                      if offering.duration_minutes % 60 else "")
    return [f"{rank:>2}. {offering.count} x {offering.type}  fee {_money(offering.fee, offering.currency)}  "
            f"(on-demand bound {bound})",
            f"    {_utc(offering.start)} -> {_utc(offering.end)} UTC, {hours}, {', '.join(offering.zones) or 'zone ?'}",
            f"    id {offering.offering_id}"]


@app.command("offerings")
def capacity_offerings(
    path: Path = SPEC_ARGUMENT,
    start_after: str | None = typer.Option(None, "--start-after", help="Only offerings starting after this date "
                                           "(YYYY-MM-DD or an ISO date and time; UTC)."),
    end_before: str | None = typer.Option(None, "--end-before", help="Only offerings ending before this date."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the list."),
) -> None:
    """List the training plan offerings that fit the spec's job, cheapest first (read-only calls).

    One search per instance type the spec may run on that a plan can hold, with the job's
    instance count for that type and a duration covering max_run_minutes plus start-up; the
    others are named with the reason and not asked about."""
    after, before = _when(start_after), _when(end_before)
    loaded, wanted, skipped, found = _search(path, after, before)
    if as_json:
        out(json.dumps({"spec": str(path), "region": loaded.region,
                        "searched": [{"instance_type": s.type, "instance_count": s.count,
                                      "duration_hours": s.duration_hours} for s in wanted],
                        "skipped": [{"instance_type": s.type, "reason": s.reason} for s in skipped],
                        "offerings": [o.to_json() for o in found]}, indent=2))
        return
    for s in skipped:
        err(f"not searched: {s.type}: {s.reason}")
    for s in wanted:
        out(f"searched {s.count} x {s.type} for {s.duration_hours} h in {loaded.region} "
            f"(max_run_minutes + start-up)")
    if not found:
        out("no offerings for these types and dates; try other dates (--start-after, --end-before)")
        return
    for rank, offering in enumerate(found, 1):
        for line in _offering_lines(rank, offering):
            out(line)
    out("reserve one: python -m orchestrator capacity reserve SPEC OFFERING_ID")


def _spec_line(loaded, offering_type: str, arn: str) -> str:
    """The spec lines that put the job on plan `arn`: on the preference of its type, else job-level."""
    prefs = loaded.instance.preferences
    if prefs:
        for i, pref in enumerate(prefs):
            if pref.type == offering_type:
                return (f"instance.preferences.{i} ({pref.type}):\n"
                        f"    - {{type: {pref.type}, training_plan_arn: '{arn}'}}")
    return f"instance:\n  training_plan_arn: '{arn}'"


@app.command("reserve")
def capacity_reserve(
    path: Path = SPEC_ARGUMENT,
    offering_id: str = typer.Argument(..., help="An offering's id, as `capacity offerings` lists it."),
    name: str | None = typer.Option(None, "--name", help="The plan's name (default: the spec's name and the "
                                    "plan's start day)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Reserve without asking (the fee is charged)."),
) -> None:
    """Reserve an offering as a training plan: shows its fee and window, asks, creates it, and
    prints its ARN and the spec line that uses it. Off a terminal it needs --yes."""
    from orchestrator.capacity import offerings, plans
    from orchestrator.errors import InputError

    if name is not None:
        plans.check_name(name)
    loaded, _wanted, _skipped, found = _search(path, None, None)
    offering = offerings.find(found, offering_id)
    plan_name = name or plans.default_name(loaded.name, offering.start)
    for line in _offering_lines(1, offering)[:2]:
        out(line.replace(" 1. ", "reserve ", 1))
    out(f"as training plan {plan_name} in {loaded.region}; the upfront fee is charged once the plan is created")
    if not yes:
        if not sys.stdin.isatty():
            raise InputError("not reserved: there is no terminal to confirm the fee on; nothing was created",
                             hint="pass --yes to reserve without asking")
        try:
            go = typer.confirm(f"Reserve it for {_money(offering.fee, offering.currency)}?", default=False)
        except typer.Abort:
            raise InputError("no answer to the confirmation; nothing was created",
                             hint="pass --yes to reserve without asking") from None
        if not go:
            out("not reserved; nothing was created")
            return
    arn = plans.create(plans.client(loaded.region), offering.offering_id, plan_name)
    out(f"created training plan {arn}")
    out("it is Pending until paid, then Scheduled; jobs on it start once it is Active "
        "(`python -m orchestrator capacity plans`)")
    out(f"to run {path} on it, set in the spec {_spec_line(loaded, offering.type, arn)}")


@app.command("plans")
def capacity_plans(
    region: str | None = REGION_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array instead of the list."),
) -> None:
    """The account's training plans in the region: status, window, instances free and in use,
    and which jobs of the ledger ran on each (read-only calls)."""
    from orchestrator.capacity import plans
    from orchestrator.ledger import Ledger
    from orchestrator.paths import home
    from orchestrator.region import default_region

    found = plans.list_plans(plans.client(default_region(region)))
    used = plans.used_by(Ledger(read_only=True).entries()) if (home() / "ledger.sqlite3").exists() else {}
    if as_json:
        out(json.dumps([{**p.to_json(), "ledger_jobs": used.get(p.arn, [])} for p in found], indent=2))
        return
    if not found:
        out("no training plans in this region")
        return
    for plan in found:
        out(f"{plan.name}  {plan.status}  {_utc(plan.start)} -> {_utc(plan.end)} UTC")
        out(f"    {plan.total} x {', '.join(plan.types) or '?'}: {plan.available} free, {plan.in_use} in use; "
            f"for {', '.join(plan.targets) or '?'}")
        jobs = used.get(plan.arn, [])
        out(f"    ledger jobs: {', '.join(jobs) if jobs else 'none'}")
        out(f"    {plan.arn}")


def doctor_plans(loaded, say=out) -> None:
    """`doctor --quotas`: each plan the spec names, read online and checked against the job
    (type, count, window, status); InputError (exit 2) when the job cannot run on one."""
    from orchestrator.capacity import plans
    from orchestrator.errors import InputError

    named = plans.spec_plans(loaded)
    if not named:
        return
    sm = plans.client(loaded.region)
    bad = []
    now = dt.datetime.now(dt.timezone.utc)
    for field, arn, type_, count in named:
        plan = plans.describe(sm, arn)
        found = plans.problems(loaded, field, plan, type_, count, now)
        say(f"plan: {field}: {plan.name} {plan.status}, {plan.total} x {', '.join(plan.types) or '?'} "
            f"({plan.available} free), {_utc(plan.start)} -> {_utc(plan.end)} UTC"
            + ("" if found else ": the job fits"))
        bad += found
    if bad:
        raise InputError("the job cannot run on its training plan:\n  " + "\n  ".join(bad),
                         hint="reserve a plan that fits (`capacity offerings SPEC`) or change the spec")
