"""What the ledger holds of one sweep: each trial's attempts, what they cost, what comes next.

`History` reads the ledger only (and asks the job's backend once for the billed seconds of a
job that ended unseen); the `Runner` acts on it, `stop` and `sweep status` show it. Each trial
runs on its own backend (`TrialDef.backend`); a ledger row names its job's (`backend_of`).

- A trial's attempts are its ledger rows, attempt 0 first; each later attempt has a record
  (`attempt:<job>` in the kv table: its instance type, whether it failed over and from what,
  whether it resubmits a job `sweep stop` stopped), written before its row.
- Budget: each job counts its cost bound until it has ended; then what the backend billed
  (its billable seconds, recorded in the ledger) counts instead, so a job stopped while
  starting counts next to nothing (`job_cost`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator import cost
from orchestrator.backends import Backend
from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.ledger import Entry, Ledger
from orchestrator.lifecycle import Status
from orchestrator.names import MAX_ATTEMPT
from orchestrator.spec import JobSpec, with_overrides
from orchestrator.sweep.definition import Definition, TrialDef, key, stop_requested
from orchestrator.sweep.failures import (
    RETRYABLE,
    STOPPED_IN_FLIGHT,
    STOPPED_LEGACY,
    budget_refused_reason,
    failure_kind,
)
from orchestrator.sweep.router import Router


@dataclass(frozen=True)
class TrialView:
    """A trial as the ledger sees it: its latest job."""

    trial: TrialDef
    job_name: str
    attempt: int
    status: Status
    detail: str | None
    instance_type: str
    final: bool  # terminal, and no retry will follow


class History:
    """One sweep's trials as the ledger has them (see the module docstring). `backend` is a
    `Router` of the sweep's backends, or one backend for a sweep whose trials share it; None:
    then nothing is asked, and the billed seconds of jobs not yet recorded are unknown."""

    def __init__(self, definition: Definition, backend: Router | Backend | None, ledger: Ledger):
        self.d = definition
        self.ident = definition.identity
        self.backends = routed(backend, definition)
        self.ledger = ledger
        self.trials = {t.trial_id: t for t in definition.trials}
        self._billing_unknown: set[str] = set()  # ended jobs whose backend reports no billable seconds

    def backend_of(self, entry: Entry) -> Backend:
        """The backend of a ledger row's job: the one the row names (each trial's own)."""
        if self.backends is None:
            raise OrchestratorError("no backend was given to this sweep's history")
        return self.backends.get(entry.backend)

    def rows(self) -> dict[str, list[Entry]]:
        """Trial id -> its ledger rows, attempt 0 first."""
        rows: dict[str, list[Entry]] = {}
        for entry in self.ledger.entries(sweep_id=self.d.sweep_id):
            rows.setdefault(entry.trial_id or "", []).append(entry)
        for history in rows.values():
            history.sort(key=lambda e: e.attempt)
        return rows

    def attempt_info(self, trial: TrialDef, entry: Entry) -> dict:
        """How the attempt `entry` of `trial` runs (see the module docstring)."""
        if entry.attempt == 0:
            return {"instance_type": trial.chain[0], "failover": False}
        info = self.ledger.get_value(key(self.d.sweep_id, f"attempt:{entry.job_name}"))
        if not isinstance(info, dict):
            raise OrchestratorError(f"the ledger lost the attempt record of {entry.job_name}")
        return info

    def next_attempt(self, trial: TrialDef, history: list[Entry], *,
                      reopen_budget: bool = False) -> tuple[str, bool] | str:
        """(instance type, is failover) of the resubmission after the failed latest attempt,
        or the reason there is none. A retry the budget refused ("[budget] ...") is final,
        unless `reopen_budget`: then it is judged by its own failure, for the caller to check
        the budget (raised since, maybe) again."""
        latest = history[-1]
        refused = budget_refused_reason(latest.detail) if reopen_budget else None
        kind = failure_kind(refused if refused is not None else latest.detail)
        if latest.status != Status.FAILED:
            return "not failed"
        if kind not in RETRYABLE:
            return f"{kind} error: not retried"
        current = self.attempt_info(trial, latest)["instance_type"]
        if kind == "capacity" and current in trial.chain and trial.chain.index(current) + 1 < len(trial.chain):
            return trial.chain[trial.chain.index(current) + 1], True
        used = 0
        for e in history[1:]:
            info = self.attempt_info(trial, e)
            # Failovers and resubmissions after `sweep stop` are not retries of a failure.
            used += not info["failover"] and not info.get("resumed")
        if used >= self.d.max_retries:
            return f"gave up after {used} retr{'y' if used == 1 else 'ies'} (max_retries {self.d.max_retries})"
        return current, False

    def views(self) -> list[TrialView]:
        """Every trial's latest job, in trial order (no backend calls)."""
        rows = self.rows()
        out = []
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history:
                out.append(TrialView(trial, self.ident.job_name(trial.trial_id), 0, Status.PLANNED, None,
                                     trial.chain[0], False))
                continue
            latest = history[-1]
            final = latest.status in (Status.COMPLETED, Status.STOPPED) or (
                latest.status == Status.FAILED and isinstance(self.next_attempt(trial, history), str))
            out.append(TrialView(trial, latest.job_name, latest.attempt, latest.status, latest.detail,
                                 self.attempt_info(trial, latest)["instance_type"], final))
        return out

    def stop_requested(self) -> bool:
        return stop_requested(self.ledger, self.d.sweep_id)

    def attempt_spec(self, trial: TrialDef, entry: Entry) -> JobSpec:
        """The trial's spec on the instance type this attempt runs on."""
        instance_type = self.attempt_info(trial, entry)["instance_type"]
        if instance_type == trial.spec.instance.type:
            return trial.spec
        return with_overrides(trial.spec, {"instance.type": instance_type})

    def retry_spec(self, trial: TrialDef, instance_type: str) -> JobSpec:
        """The trial's spec on `instance_type`."""
        if instance_type == trial.spec.instance.type:
            return trial.spec
        return with_overrides(trial.spec, {"instance.type": instance_type})

    def billed_seconds(self, entry: Entry) -> int | None:
        """The billable seconds of a job that has ended, as SageMaker reported them
        (DescribeTrainingJob BillableTimeInSeconds): recorded in the ledger when the runner saw
        it end, else asked of the backend once (a job `sweep stop` stopped is recorded only
        once it is Stopped). None when unknown (still running, or the backend cannot say)."""
        record = key(self.d.sweep_id, f"billed:{entry.job_name}")
        known = self.ledger.get_value(record)
        if isinstance(known, int):
            return known
        if not entry.status.is_terminal() or self.backends is None \
                or entry.job_name in self._billing_unknown:
            return None
        try:
            status = self.backend_of(entry).status(entry.job_name)
        except (BackendError, InputError):
            return None
        if not status.terminal or status.billable_seconds is None:
            if status.terminal:
                self._billing_unknown.add(entry.job_name)  # this backend does not report it
            return None
        self.ledger.put_value(record, int(status.billable_seconds))
        return int(status.billable_seconds)

    def job_cost(self, trial: TrialDef, entry: Entry) -> float:
        """What one job of the sweep counts against its budget: the billable seconds SageMaker
        reports for a job that has ended (a job stopped while Starting bills next to nothing),
        else the job's cost bound."""
        estimate = cost.estimate(self.attempt_spec(trial, entry))
        seconds = self.billed_seconds(entry)
        if seconds is None or estimate.usd_per_hour is None:
            return estimate.usd_max
        return min(estimate.usd_max, seconds / 3600 * estimate.instance_count * estimate.usd_per_hour)

    def spent_bound(self, rows: dict[str, list[Entry]]) -> float:
        """What every job this sweep has planned so far counts against its budget (`job_cost`)."""
        total = 0.0
        for trial_id, history in rows.items():
            trial = self.trials.get(trial_id)
            if trial is None:
                continue
            for entry in history:
                total += self.job_cost(trial, entry)
        return total

    def resubmission_refused(self, trial: TrialDef, latest: Entry, spent: float | None) -> str | None:
        """Why the job `sweep stop` stopped in flight (`latest`) would not be resubmitted, or
        None. `spent` is the sweep's cost bound so far (None: no budget to check). Reads the
        ledger only: no backend calls, no writes."""
        if latest.attempt + 1 > MAX_ATTEMPT:
            return f"job names allow at most {MAX_ATTEMPT} resubmissions"
        if self.d.budget_usd is None or spent is None:
            return None
        # The resubmission runs on the stopped job's instance type: the same spec, the same bound.
        usd = cost.estimate(self.attempt_spec(trial, latest)).usd_max
        if spent + usd <= self.d.budget_usd:
            return None
        return (f"a resubmission would take the sweep's cost bound to {spent + usd:.2f} USD (the stopped "
                f"job's billed cost is spent), above budget.max_total_cost_usd {self.d.budget_usd:g}; "
                f"{self.budget_hint()}")

    def budget_hint(self) -> str:
        """The next step after a refusal by the budget."""
        where = f"in {self.d.file}" if self.d.file else "in the sweep's file"
        return (f"to run it, raise budget.max_total_cost_usd {where}, then `python -m orchestrator sweep resume "
                f"{self.d.sweep_id}`")

    def has_work(self) -> bool:
        """Whether a runner started now would act (the stop flag aside, which a runner clears):
        a trial planned, being submitted, in flight or with a retry due, or one `sweep stop`
        stopped that `reopen_stopped` would reopen. False when every trial ended for good,
        including a job stopped by anything but `sweep stop` and one whose resubmission the
        budget refuses. Reads the ledger only: no backend calls, no writes; a row an older
        version stopped counts as work (telling it apart needs the backend)."""
        if not all(view.final for view in self.views()):
            return True
        rows = self.rows()
        spent: float | None = None
        for trial in self.d.trials:
            history = rows[trial.trial_id]  # views() saw a row for every trial
            latest = history[-1]
            detail = latest.detail or ""
            if latest.status == Status.FAILED and budget_refused_reason(detail) is not None:
                nxt = self.next_attempt(trial, history, reopen_budget=True)
                if isinstance(nxt, str):
                    continue
                spent = self.spent_bound(rows) if spent is None else spent
                if self.d.budget_usd is None or \
                        spent + cost.estimate(self.retry_spec(trial, nxt[0])).usd_max <= self.d.budget_usd:
                    return True
                continue
            if latest.status != Status.STOPPED or not detail.startswith(STOPPED_LEGACY):
                continue
            if not detail.startswith(STOPPED_IN_FLIGHT):
                return True  # cancelled before submission (planned again), or a legacy row
            if self.d.budget_usd is not None and spent is None:
                spent = self.spent_bound(rows)
            # The first resubmission made is what counts, so `spent` never grows here.
            if self.resubmission_refused(trial, latest, spent) is None:
                return True
        return False


def routed(backend: Router | Backend | None, definition: Definition) -> Router | None:
    """`backend` as a Router of the sweep's backends: one backend object serves a sweep whose
    trials share one backend, or in a mixed sweep only the trials of its own name."""
    if backend is None or isinstance(backend, Router):
        return backend
    names = definition.backends
    return Router.of(backend, names if len(names) == 1 else (backend.name,))
