"""The sweep runner: one ledger row per job, driven to the end from a laptop that sleeps and
crashes.

Contract: `Runner` drives each trial's jobs through planned -> submitting -> submitted ->
running -> completed | failed | stopped (`lifecycle.Status`), deciding everything from the
ledger on every step (never from memory), so it can be killed at any instant and started
again without creating a job twice; `has_work()` tells from the ledger alone whether a runner
started now would act. Its rules (errors and backoff, retries and failover, budget, the
concurrency cap across backends, adoption, stop and resume): docs/ARCHITECTURE.md, "The sweep
runner's rules".
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial

from orchestrator import backoff, cost, quotas, request
from orchestrator.accounts import OtherAccount
from orchestrator.backends import Backend, DamagedStatus, JobStatus, UnknownJob
from orchestrator.backends.running import statuses as ask_statuses
from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.ledger import Entry, Ledger
from orchestrator.lifecycle import IN_FLIGHT, Status
from orchestrator.names import TAG_ATTEMPT
from orchestrator.sweep import plan_capacity
from orchestrator.sweep.definition import Definition, TrialDef, completed_elsewhere, key
from orchestrator.sweep.failures import (
    STOPPED_BEFORE_SUBMISSION,
    STOPPED_IN_FLIGHT,
    STOPPED_LEGACY,
    WAIT_KINDS,
    attempt_tag,
    budget_refused_reason,
    outside_the_job,
    submit_error_kind,
)
from orchestrator.sweep.remote import Remote
from orchestrator.sweep.router import Router

# Waits in a row for a passing error (throttling, 5xx, the network) before a runner gives up.
# Ten in a row: with the default base (2 s) and cap (300 s) even the shortest jittered waits
# add up to more than nine minutes, so a five-minute outage of the endpoint is ridden out.
MAX_TRANSIENT_RETRIES = 10


def _reraise(error: Exception) -> None:
    raise error


@dataclass(frozen=True)
class SweepProgress:
    """Where a run stands after a step: counts by state, what is in flight, recent events."""

    sweep_id: str
    total: int
    counts: dict[str, int]
    in_flight: int
    elsewhere: int
    waiting_until: float | None
    waiting_reason: str | None
    events: tuple[str, ...]
    done: bool
    stopped: bool = False
    event_count: int = 0  # events so far in this process; `events` holds the last 20
    # Every event since the previous step's progress, none left out: what a log prints.
    new_events: tuple[str, ...] = ()

    @property
    def failed(self) -> int:
        return self.counts.get(Status.FAILED, 0)


class Runner(Remote):
    """Drives one sweep to completion. See the module docstring for the protocol.

    `backend` is the sweep's `Router` (or one backend, for a sweep whose trials share it).
    `sleep`, `clock` and `rng` are injectable so tests control time and jitter; `prepared`
    may hand over the plan's prepared first jobs (`Plan.prepared()`). `step()` does
    one non-blocking round (refresh, retry, submit); `run()` loops it until every trial is
    final, the sweep is stopped, or `max_steps` is reached.
    """

    def __init__(self, definition: Definition, backend: Router | Backend | None, ledger: Ledger, *,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, poll_seconds: float = 30.0, backoff_base: float = backoff.BASE_S,
                 backoff_cap: float = backoff.CAP_S, on_progress: Callable[[SweepProgress], None] | None = None,
                 count_elsewhere: bool = True, prepared: dict[str, request.Prepared] | None = None,
                 max_transient_retries: int = MAX_TRANSIENT_RETRIES, admission=None):
        super().__init__(definition, backend, ledger)
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()
        self.poll_seconds = poll_seconds
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.on_progress = on_progress
        self.count_elsewhere = count_elsewhere
        # Job name -> its prepared request; `prepared` (from `plan`) spares preparing again.
        self._prepared: dict[str, request.Prepared] = dict(prepared or {})
        # Call site -> backoffs in a row there (bounded or not): the exponent of its next wait.
        self._failures: dict[str, int] = {}
        self.max_transient_retries = max_transient_retries
        # Call site ("status", "list", "submit") -> backoffs in a row since one of its calls last worked.
        self._streaks: dict[str, int] = {}
        self._not_before = 0.0
        self._waiting_reason: str | None = None
        self._events: list[str] = []  # the last 20, for a live view
        self._fresh: list[str] = []  # every event since the last step's progress (`new_events`)
        self._foreign: dict[str, bool] = {}  # job name -> carries this sweep's tag
        # Job name -> its backend: this sweep's jobs in progress that the one listing of each
        # shared backend found (`_elsewhere`); None until that listing is made.
        self._listed: dict[str, Backend] | None = None
        self._last_elsewhere = 0
        self._acted = 0
        self._event_count = 0
        # `sweep.admission.Admission`: jobs beyond the account's quota wait instead of failing.
        self.admission = admission
        self.quota_wait: str | None = None
        self._quota_needs: dict[str, list] = {}
        self._noted_elsewhere = False
        self._adopted_remote = False
        # The events of a round that ended in an error (the run stops): the CLI prints them.
        self.unreported: tuple[str, ...] = ()


    def _event(self, text: str) -> None:
        stamp = datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%H:%M:%S")
        self._events.append(f"{stamp} {text}")
        del self._events[:-20]
        self._fresh.append(f"{stamp} {text}")
        self._event_count += 1

    def _prepare(self, trial: TrialDef, entry: Entry) -> request.Prepared:
        cached = self._prepared.get(entry.job_name)
        if cached is not None:
            return cached
        tags = self.ident.tags(trial.trial_id)
        if entry.attempt > 0:
            tags[TAG_ATTEMPT] = attempt_tag(self.attempt_info(trial, entry), trial.chain[0])
        prepared = request.prepare(self.attempt_spec(trial, entry), job_name=entry.job_name, extra_tags=tags,
                                   varied=trial.overrides)
        self._prepared[entry.job_name] = prepared
        return prepared

    def _halt(self, exc: OrchestratorError, what: str | None = None) -> None:
        """Stop the run with `exc` (our error of the same kind, exit code kept), saying how to
        continue: nothing the ledger holds is lost, `sweep resume` picks it up."""
        message = f"sweep {self.d.sweep_id} stopped: {what or exc.message}"
        then = (f"`python -m orchestrator sweep resume {self.d.sweep_id}` continues it (jobs already submitted "
                "keep running)")
        hint = f"{exc.hint}; then {then}" if exc.hint else f"once that is fixed, {then}"
        if isinstance(exc, BackendError):
            raise BackendError(message, hint=hint, code=exc.code, http_status=exc.http_status) from exc
        raise InputError(message, hint=hint) from exc

    def _backoff(self, reason: str, site: str = "submit", error: OrchestratorError | None = None,
                 bounded: bool = True) -> None:
        """Wait before the next call (jittered, growing exponentially). A `bounded` wait counts
        against `max_transient_retries` calls in a row at `site`: one more stops the run."""
        if bounded:
            self._streaks[site] = self._streaks.get(site, 0) + 1
            if error is not None and self._streaks[site] > self.max_transient_retries:
                self._halt(error, f"{reason} (gave up after {self.max_transient_retries} retries in a row; the "
                                  "error may pass: throttling, a server error or the network)")
        self._failures[site] = self._failures.get(site, 0) + 1
        ceiling = min(self.backoff_cap, self.backoff_base * backoff.RATE ** (self._failures[site] - 1))
        delay = self.rng.uniform(ceiling / 2, ceiling)
        self._not_before = self.clock() + delay
        self._waiting_reason = reason
        self._event(f"backing off {delay:.1f}s: {reason}")

    def _worked(self, site: str) -> None:
        """A call at `site` answered: its streak and its backoff exponent start again."""
        self._streaks.pop(site, None)
        self._failures.pop(site, None)

    def backing_off(self) -> bool:
        """Whether the announced backoff is still running: no call to the backend before its end."""
        return self.clock() < self._not_before

    def refresh(self) -> None:
        """Ask the backends about every job of this sweep in flight, each backend once about all
        of its jobs (`Backend.statuses`); record what changed, job by job in the ledger's order.
        Nothing is asked while a backoff runs. An error that ends the round (a passing one: back
        off; any other: stop the run) asks no further backend; the jobs after it that were
        answered are still recorded (their backend has moved their rows already), their own
        errors, and the jobs a backend left unasked, wait for the next round."""
        if self.backing_off():
            return
        owners = [(history[-1], self.backend_of(history[-1])) for history in self.rows().values()
                  if history[-1].status in (Status.SUBMITTED, Status.RUNNING)]
        answers: dict[str, JobStatus | OrchestratorError] = {}
        asked: set[int] = set()
        ending: Callable[[], None] | None = None
        for latest, backend in owners:
            if id(backend) not in asked and ending is None:
                asked.add(id(backend))
                answers.update(ask_statuses(backend, [row.job_name for row, b in owners if b is backend]))
            answer = answers.get(latest.job_name)
            if answer is None:
                continue  # not asked: its backend stopped asking, or the round has ended
            if ending is not None:
                if isinstance(answer, JobStatus):
                    self._settle(latest, answer)
                continue
            if isinstance(answer, DamagedStatus):
                # The job's own record is unreadable: say so and leave the trial as it is (it may
                # still run); the rest of the sweep goes on.
                self._event(f"{latest.job_name}: {answer.message}")
            elif isinstance(answer, BackendError):
                if submit_error_kind(answer) in WAIT_KINDS:
                    ending = partial(self._backoff, f"status of {latest.job_name}: {answer.message}", "status",
                                     answer)
                else:
                    ending = partial(self._halt, answer)
            elif isinstance(answer, OtherAccount):
                # Not lost: the credentials are another account's. Nothing is marked or created.
                ending = partial(self._halt, answer)
            elif isinstance(answer, UnknownJob):
                # The job the ledger says exists is gone (deleted account data, wrong region):
                # the trial is not lost, it is resubmitted as a retry.
                self.ledger.transition(latest.job_name, Status.FAILED, detail=f"[lost] {answer.message}",
                                       expect=(Status.SUBMITTED, Status.RUNNING))
                self._event(f"{latest.job_name}: lost ({answer.message})")
            elif isinstance(answer, Exception):
                ending = partial(_reraise, answer)  # as `status` raised it
            else:
                self._worked("status")
                self._settle(latest, answer)
        if ending is not None:
            ending()

    def _settle(self, latest: Entry, status: JobStatus) -> None:
        """Record what a job's status means for its row. Backends record non-terminal progress
        in the ledger themselves, each by its own table; the runner only makes sure the row ends
        where the job ended, and marks a job that is certainly training as running."""
        if status.terminal:
            target = status.status
            if status.billable_seconds is not None:
                self.ledger.put_value(key(self.d.sweep_id, f"billed:{latest.job_name}"),
                                      int(status.billable_seconds))
        elif status.status == Status.RUNNING and latest.status == Status.SUBMITTED:
            target = Status.RUNNING
        else:
            return
        detail = status.failure_reason if target == Status.FAILED else None
        self.ledger.transition(latest.job_name, target, detail=detail, expect=(Status.SUBMITTED, Status.RUNNING))
        self._event(f"{latest.job_name}: {target}" + (f" ({detail})" if detail else ""))

    def _prepare_attempt(self, trial: TrialDef, name: str, attempt: int, info: dict) -> request.Prepared:
        """Record how attempt `name` of `trial` runs (instance type, failover...) and prepare
        its request. The record comes first: a runner killed after it re-plans the same
        attempt the same way."""
        self.ledger.put_value(key(self.d.sweep_id, f"attempt:{name}"), info)
        stub = Entry(name, trial.backend, self.d.region, "", Status.PLANNED, {}, self.d.sweep_id,
                     trial.trial_id, attempt, None, 0.0, 0.0)
        return self._prepare(trial, stub)

    def _plan_attempt(self, trial: TrialDef, name: str, attempt: int, prepared: request.Prepared) -> None:
        """The attempt's `planned` ledger row: from here on `step` submits it."""
        self.ledger.record_intent(name, backend=trial.backend, region=self.d.region,
                                  spec_hash=prepared.spec_hash, request=prepared.request, status=Status.PLANNED,
                                  sweep_id=self.d.sweep_id, trial_id=trial.trial_id, attempt=attempt,
                                  locations=prepared.locations.to_json())
        self._acted += 1

    def plan_retries(self) -> None:
        """Write the next attempt's row for each trial whose latest job failed retryably (and
        for one whose retry the budget refused, once the budget allows it)."""
        rows = self.rows()
        spent: float | None = None
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history or history[-1].status != Status.FAILED:
                continue
            nxt = self.next_attempt(trial, history, reopen_budget=True)
            if isinstance(nxt, str):
                continue
            instance_type, failover = nxt
            latest = history[-1]
            reason = budget_refused_reason(latest.detail)
            reason = latest.detail if reason is None else reason
            if self.d.budget_usd is not None:
                spent = self.spent_bound(rows) if spent is None else spent
                usd = cost.estimate(self.retry_spec(trial, instance_type)).usd_max
                if spent + usd > self.d.budget_usd:
                    refusal = (f"[budget] {reason or 'failed'}; a retry would take the sweep's cost bound to "
                               f"{spent + usd:.2f} USD, above budget.max_total_cost_usd {self.d.budget_usd:g}; "
                               f"{self.budget_hint()}")
                    # Said once: a later step (a raised budget, re-read by `sweep resume`) looks again.
                    if refusal != latest.detail:
                        self.ledger.transition(latest.job_name, Status.FAILED, detail=refusal, expect=(Status.FAILED,))
                        self._event(f"{trial.trial_id}: not retried (budget): {self.budget_hint()}")
                    continue
                spent += usd
            attempt = latest.attempt + 1
            name = self.ident.job_name(trial.trial_id, attempt)
            info = {"instance_type": instance_type, "failover": failover}
            if failover:
                info["from_type"] = self.attempt_info(trial, latest)["instance_type"]
            prepared = self._prepare_attempt(trial, name, attempt, info)
            self._plan_attempt(trial, name, attempt, prepared)
            how = f"failing over to {instance_type}" if failover else "retrying"
            self._event(f"{trial.trial_id}: {how} as {name} after: {reason}")

    def rerun_failed(self) -> list[str]:
        """`sweep resume --retry-failed`: plan the next attempt (-rN, same instance type) of each
        trial whose latest job failed for a reason outside the job (`outside_the_job`: the
        store, the infrastructure, capacity), even past `max_retries`, within the budget.
        Returns the names planned; a trial the budget refuses keeps its failure and a
        "[budget]" detail that says why."""
        rows = self.rows()
        spent = self.spent_bound(rows) if self.d.budget_usd is not None else None
        planned = []
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history or history[-1].status != Status.FAILED or not outside_the_job(history[-1].detail):
                continue
            latest = history[-1]
            instance_type = self.attempt_info(trial, latest)["instance_type"]
            if spent is not None:
                usd = cost.estimate(self.retry_spec(trial, instance_type)).usd_max
                if spent + usd > self.d.budget_usd:
                    self._event(f"{trial.trial_id}: not rerun (budget): {self.budget_hint()}")
                    continue
                spent += usd
            attempt = latest.attempt + 1
            name = self.ident.job_name(trial.trial_id, attempt)
            prepared = self._prepare_attempt(trial, name, attempt,
                                             {"instance_type": instance_type, "failover": False, "resumed": True})
            self._plan_attempt(trial, name, attempt, prepared)
            self._event(f"{trial.trial_id}: rerunning as {name} (--retry-failed) after: {latest.detail}")
            planned.append(name)
        return planned

    def _stopped_before_submission(self, entry: Entry) -> bool | None:
        """Whether `sweep stop` cancelled this row before its job was created (True), or
        stopped a job that existed (False); None when the backend cannot say now."""
        detail = entry.detail or ""
        if detail.startswith(STOPPED_BEFORE_SUBMISSION):
            return True
        if detail.startswith(STOPPED_IN_FLIGHT):
            return False
        # STOPPED_LEGACY was written in both cases: ask the backend whether the job exists.
        try:
            self.backend_of(entry).status(entry.job_name)
        except UnknownJob:
            return True
        except BackendError as exc:
            self._event(f"{entry.job_name}: not reopened yet ({exc.message})")
            return None
        return False

    def reopen_stopped(self) -> None:
        """Reopen the trials `sweep stop` stopped (see the module docstring): back to planned
        when no job was created, else a new `-rN` row on the same instance type."""
        rows = self.rows()
        spent: float | None = None
        for trial in self.d.trials:
            history = rows.get(trial.trial_id)
            if not history:
                continue
            latest = history[-1]
            detail = latest.detail or ""
            if latest.status != Status.STOPPED or not detail.startswith(STOPPED_LEGACY):
                continue
            before = self._stopped_before_submission(latest)
            if before is None:
                continue
            if before:
                if self.ledger.transition(latest.job_name, Status.PLANNED, detail="resumed after sweep stop",
                                          expect=(Status.STOPPED,)):
                    self._acted += 1
                    self._event(f"{latest.job_name}: planned again (sweep stop had cancelled it before submission)")
                continue
            attempt = latest.attempt + 1
            name = self.ident.job_name(trial.trial_id, attempt)
            if self.d.budget_usd is not None and spent is None:
                spent = self.spent_bound(rows)
            why = self.resubmission_refused(trial, latest, spent)
            if why is not None:
                # Stays stopped; the detail keeps its prefix, so a later step (a raised budget
                # saved by `sweep run`) looks again. Said once, not on every step.
                refused = f"{STOPPED_IN_FLIGHT}; not resubmitted: {why}"
                if detail != refused and self.ledger.transition(latest.job_name, Status.STOPPED, detail=refused,
                                                                expect=(Status.STOPPED,)):
                    self._event(f"{trial.trial_id}: not resubmitted after sweep stop: {why}")
                continue
            instance_type = self.attempt_info(trial, latest)["instance_type"]
            prepared = self._prepare_attempt(trial, name, attempt,
                                             {"instance_type": instance_type, "failover": False, "resumed": True})
            if spent is not None:
                spent += prepared.estimate.usd_max
            self._plan_attempt(trial, name, attempt, prepared)
            self._event(f"{trial.trial_id}: resubmitting as {name}: sweep stop had stopped {latest.job_name} "
                        "in flight (its cost is spent)")

    def note_completed_elsewhere(self) -> None:
        """Once per runner: an event naming trials about to be submitted whose exact spec
        already completed under another sweep id in this ledger (see `completed_elsewhere`)."""
        if self._noted_elsewhere or self.ident.tick is not None:
            return
        self._noted_elsewhere = True
        fresh = {}
        for trial_id, history in self.rows().items():
            if len(history) == 1 and history[0].status == Status.PLANNED and history[0].attempt == 0:
                fresh[trial_id] = history[0].spec_hash
        found = completed_elsewhere(self.ledger, self.d.sweep_id, fresh)
        if found:
            shown = ", ".join(f"{tid} (as {name})" for tid, name in sorted(found.items())[:5])
            more = f" and {len(found) - 5} more" if len(found) > 5 else ""
            self._event(f"note: {len(found)} trial(s) already completed under another sweep id with the same "
                        f"spec: {shown}{more}; they run again under {self.d.sweep_id}")

    def submit_ready(self) -> None:
        """Reconcile rows left in `submitting`, then submit planned rows while there is room."""
        if self.backing_off():
            return
        rows = self.rows()
        latest = [rows[t.trial_id][-1] for t in self.d.trials if t.trial_id in rows]
        for entry in latest:
            if entry.status == Status.SUBMITTING and not self.backing_off():
                self._submit(entry, reconcile=True)
        if self.backing_off():
            return
        rows = self.rows()
        latest = [rows[t.trial_id][-1] for t in self.d.trials if t.trial_id in rows]
        own = {e.job_name for e in latest if e.status in IN_FLIGHT}
        if not any(e.status == Status.PLANNED for e in latest) or len(own) >= self.d.concurrency:
            # Nothing to submit, or no room whatever runs elsewhere: nothing to ask.
            self.quota_wait = None
            return
        try:
            elsewhere = self._elsewhere(own)
        except BackendError as exc:
            if submit_error_kind(exc) not in WAIT_KINDS:
                self._halt(exc)
            self._backoff(f"listing this sweep's jobs: {exc.message}", "list", exc)
            return
        self._worked("list")
        room = self.d.concurrency - len(own) - len(elsewhere)
        adopted = set()
        for entry in latest:
            if entry.status == Status.PLANNED and entry.job_name in elsewhere:
                # Another machine created this very job: adopt it instead of creating it.
                if self.ledger.transition(entry.job_name, Status.SUBMITTED, detail="adopted: submitted elsewhere",
                                          expect=(Status.PLANNED,)):
                    self._event(f"{entry.job_name}: adopted (submitted by another machine)")
                adopted.add(entry.job_name)
        self._last_elsewhere = len(elsewhere - adopted)
        self.quota_wait = None
        held = [(self._needs(e), e.request) for e in latest if e.status in IN_FLIGHT]  # and this round's
        for entry in latest:
            if entry.status != Status.PLANNED or entry.job_name in adopted:
                continue
            if room <= 0 or self.backing_off() or self.stop_requested():
                return
            if self.admission is not None:
                why = self.admission.why_not_job(self._needs(entry), entry.request, held)
                if why is not None:
                    # Not submitted to fail: it waits for this sweep's jobs on that type to end.
                    if self.quota_wait != why:
                        self._event(f"{entry.job_name}: {why}")
                    self.quota_wait = why
                    continue
                if plan_capacity.sends_on_demand(self.admission, entry.request):  # the plan is full
                    trial = self.trials[entry.trial_id or ""]
                    prepared = self._prepare(trial, entry)
                    self._prepared[entry.job_name] = replace(prepared, request=plan_capacity.without_plan(prepared.request))
            if self._submit(entry, reconcile=False):
                room -= 1
                self._acted += 1
                held.append((self._needs(entry), entry.request))

    def _needs(self, entry: Entry) -> list:
        """What the job of `entry` asks of the account's quotas (`quotas.needs` of the spec of
        its attempt), for the admission; kept per job name."""
        if self.admission is None:
            return []
        found = self._quota_needs.get(entry.job_name)
        if found is None:
            trial = self.trials.get(entry.trial_id or "")
            found = [] if trial is None else quotas.needs(self.attempt_spec(trial, entry))
            self._quota_needs[entry.job_name] = found
        return found

    def _submit(self, entry: Entry, *, reconcile: bool) -> bool:
        trial = self.trials[entry.trial_id or ""]
        prepared = self._prepare(trial, entry)
        try:
            result = self.backends.get(trial.backend).submit(prepared)
        except OrchestratorError as exc:
            kind = submit_error_kind(exc)
            if kind == "setup":
                # No credentials, or access denied: every other submit would fail the same way.
                self._halt(exc)
            if kind in WAIT_KINDS:
                # A quota reached while jobs of this sweep run frees up as they end: waiting for
                # them is not a failure that repeats.
                others = [e for e in self.ledger.entries(sweep_id=self.d.sweep_id)
                          if e.status in (Status.SUBMITTED, Status.RUNNING) and e.job_name != entry.job_name]
                self._backoff(f"{entry.job_name}: {exc.message}", "submit", exc,
                              bounded=not (kind == "quota" and others))
                return False
            detail = f"[{kind}] {exc.message}"
            self.ledger.transition(entry.job_name, Status.FAILED, detail=detail, expect=(Status.PLANNED, Status.SUBMITTING))
            self._event(f"{entry.job_name}: {kind} error at submit: {exc.message}")
            return False
        self._worked("submit")
        self._waiting_reason = None
        self.ledger.transition(entry.job_name, Status.SUBMITTED, expect=(Status.PLANNED, Status.SUBMITTING))
        verb = "submitted" if result.created else "reconciled (it existed)"
        self._event(f"{entry.job_name}: {verb}" + (" after a crash" if reconcile and result.created else ""))
        return True

    def step(self) -> SweepProgress:
        """One round: reopen what `sweep stop` stopped, refresh in-flight jobs, plan retries,
        submit what fits."""
        self._last_elsewhere = 0
        self._acted = 0
        if self.stop_requested():
            return self._told(self.progress(stopped=True))
        try:
            self.adopt_remote()
            self.reopen_stopped()
            self.note_completed_elsewhere()
            self.refresh()
            self.plan_retries()
            self.submit_ready()
        except OrchestratorError:
            # The run stops on this error; what the round did before it is not lost to the log.
            self.unreported = tuple(self._fresh)
            self._fresh.clear()
            raise
        return self._told(self.progress())

    def _told(self, progress: SweepProgress) -> SweepProgress:
        """`progress` with every event since the previous step (`new_events`)."""
        fresh, self._fresh = tuple(self._fresh), []
        from dataclasses import replace

        return replace(progress, new_events=fresh)

    def progress(self, stopped: bool = False) -> SweepProgress:
        views = self.views()
        counts: dict[str, int] = {}
        for view in views:
            counts[view.status] = counts.get(view.status, 0) + 1
        in_flight = sum(1 for v in views if v.status in IN_FLIGHT)
        waiting = self._not_before if self._not_before > self.clock() else None
        reason = self._waiting_reason if waiting else self.quota_wait
        return SweepProgress(self.d.sweep_id, len(views), counts, in_flight, self._last_elsewhere,
                        waiting, reason, tuple(self._events),
                        done=all(v.final for v in views), stopped=stopped, event_count=self._event_count)

    def run(self, *, max_steps: int | None = None) -> SweepProgress:
        """Step until every trial is final or the sweep is stopped, sleeping between rounds."""
        steps = 0
        while True:
            progress = self.step()
            steps += 1
            if self.on_progress:
                self.on_progress(progress)
            if progress.done or progress.stopped or (max_steps is not None and steps >= max_steps):
                return progress
            wait = self.poll_seconds
            if progress.waiting_until is not None:
                wait = min(wait, max(0.0, progress.waiting_until - self.clock()))
            if self._acted and progress.counts.get(Status.PLANNED, 0) and progress.waiting_until is None \
                    and progress.in_flight + progress.elsewhere < self.d.concurrency:
                wait = 0.0  # a retry was just planned and there is room: submit it at once
            self.sleep(wait)
