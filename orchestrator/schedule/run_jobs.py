"""A cloud schedule's running run, trial by trial (`schedule list` of a RUNNING execution): each
trial that has a job, its latest attempt's state and, when it failed, why; and how many
trials have no job yet. Names no AWS service: each backend lists its own jobs
(`ScheduledJobs.listed`).

Contract:
- `read_listing(outputs)` is the stack's `in_aws_stack.LISTING_OUTPUT`, parsed: None for a
  stack deployed before it existed (or one whose value is not ours), and `schedule list`
  says why no trials are shown.
- `trials(listing, label, since, client)`: the run's job prefix is the sweep's with the run's
  `label` in place of the placeholder (`statemachine.run_label`); each backend of the listing
  lists the jobs of that prefix created after `since` (list calls, pages), their names read
  back as `<prefix>-<trial>[-rN]`; the highest N of a trial is its latest attempt (of two jobs
  of one name, the later). A failed latest attempt is given its reason (from the listing, or
  `ScheduledJobs.reasons` for at most MAX_REASONS jobs, one call each) and its kind by
  `sweep.failures.failure_kind`, the runner's reading of the same phrase table the state
  machine's Choice rules are made from. Returns (one dict per trial with a job: trial, job,
  status, attempt, kind, reason; the number of trials without one).
- An error of a backend's calls is raised as it is (the caller makes it that stack's warning).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta

from orchestrator.backends import scheduled
from orchestrator.schedule import in_aws_stack
from orchestrator.schedule.statemachine import PLACEHOLDER_LABEL

# A failed job whose listing gives no reason is described, one call each: at most this many
# per run (the rest are shown without their cause, and counted).
MAX_REASONS = 100
# A run's jobs are created after its execution started; the listings start this much earlier
# so that a clock apart between services loses none (assumed: no page states the skew).
CLOCK_SLACK = timedelta(minutes=1)
# The trials with no job are the recorded trial count less those with one. Step Functions'
# DescribeMapRun gives a Map Run's itemCounts (pending, running, ...) of child executions, not of
# jobs, at two more calls (ListMapRuns first); moto 5.2 answers both only from its interpreter's
# records: not used.
# A reason is shown on one line, this long at most.
REASON_CHARS = 300


def read_listing(outputs: dict[str, str]) -> dict | None:
    """The stack's listing output, parsed; None when it has none or it is not ours."""
    text = outputs.get(in_aws_stack.LISTING_OUTPUT)
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    if not (isinstance(found, dict) and isinstance(found.get("jobs"), str) and PLACEHOLDER_LABEL in found["jobs"]
            and isinstance(found.get("trials"), int) and isinstance(found.get("places"), dict)):
        return None
    return found


def trials(listing: dict, label: str, since: datetime, client: Callable) -> tuple[list[dict], int]:
    """The run's trials with a job, and the count of those without (see the module docstring)."""
    from orchestrator.errors import service_message
    from orchestrator.names import trial_attempt
    from orchestrator.sweep.failures import failure_kind

    prefix = listing["jobs"].replace(PLACEHOLDER_LABEL, label)
    latest: dict[str, tuple[int, float, scheduled.Seen, str]] = {}
    for backend, places in sorted(listing["places"].items()):
        part = scheduled.part_of(backend)
        for seen in part.listed(client, prefix, since - CLOCK_SLACK, list(places or [])):
            found = trial_attempt(seen.name, prefix)
            if found is None:
                continue
            trial, attempt = found
            key = (attempt, seen.created)
            kept = latest.get(trial)
            if kept is None or key > kept[:2]:
                latest[trial] = (*key, seen, backend)
    failed = {trial: (seen, backend) for trial, (_, _, seen, backend) in latest.items()
              if seen.status == scheduled.part_of(backend).failed}
    reasons: dict[str, str] = {}
    unread = [(trial, seen, backend) for trial, (seen, backend) in sorted(failed.items()) if seen.reason is None]
    for backend in sorted({b for _, _, b in unread[:MAX_REASONS]}):
        names = [seen.name for _, seen, b in unread[:MAX_REASONS] if b == backend]
        reasons.update(scheduled.part_of(backend).reasons(client, names))
    jobs = []
    for trial in sorted(latest):
        attempt, _, seen, _ = latest[trial]
        job = {"trial": trial, "job": seen.name, "status": seen.status, "attempt": attempt}
        if trial in failed:
            reason = seen.reason if seen.reason is not None else reasons.get(seen.name)
            if reason is None:
                job["reason"] = f"cause not read: more than {MAX_REASONS} failed jobs to describe"
            else:
                job["kind"] = failure_kind(reason)
                if reason:
                    job["reason"] = service_message(reason, REASON_CHARS)
        jobs.append(job)
    return jobs, max(0, listing["trials"] - len(latest))
