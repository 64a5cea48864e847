"""A sweep's jobs that another machine or another ORCHESTRATOR_HOME submitted, as the runner
finds them on a shared backend: `adopt_remote` writes into the ledger each trial's attempts
the backend has and this ledger lacks; `_elsewhere` counts this sweep's jobs in flight that
this ledger does not, against the concurrency cap, asking each shared backend's list once
per runner (docs/ARCHITECTURE.md, "The sweep runner's rules").

`Remote` is the runner's base (`sweep.runner.Runner`): it uses the runner's backoff, halt,
event and attempt-planning methods.
"""

from __future__ import annotations

from orchestrator.backends import Backend
from orchestrator.errors import BackendError, InputError
from orchestrator.lifecycle import Status
from orchestrator.names import TAG_ATTEMPT, TAG_SWEEP
from orchestrator.sweep.definition import key
from orchestrator.sweep.failures import WAIT_KINDS, submit_error_kind
from orchestrator.sweep.history import History


class Remote(History):
    """Adoption and the count of jobs elsewhere; see the module docstring."""

    # Job name -> its backend: this sweep's jobs in progress that the one listing of each
    # shared backend found (`_elsewhere`); None until that listing is made.
    _listed: dict[str, Backend] | None = None

    def adopt_remote(self) -> None:
        """Once per runner, for each shared backend of the sweep: write into the ledger each
        trial's attempts that the trial's backend has and this ledger lacks or only planned
        (the sweep was run from another machine or another ORCHESTRATOR_HOME), with the state
        the backend reports, so that each trial goes on from its latest attempt instead of from
        the first. A job whose `orchestrator:sweep` tag names another sweep, or that is on
        another backend than its trial's, is left alone. A transient failure to list waits
        (backoff) and tries again at the next step."""
        if self._adopted_remote or self.backends is None or self.backing_off():
            return
        shared = self.backends.shared(self.d.backends)
        if not shared:
            return
        listed: dict[str, list[str]] = {}
        for backend in shared:
            try:
                listed[backend.name] = backend.job_names(self.ident.job_prefix)
            except BackendError as exc:
                if submit_error_kind(exc) not in WAIT_KINDS:
                    self._halt(exc)
                self._backoff(f"listing this sweep's jobs in {backend.place}: {exc.message}", "list", exc)
                return
        self._worked("list")
        self._adopted_remote = True
        remote: dict[str, dict[int, str]] = {}
        for backend_name, names in listed.items():
            for name in names:
                found = self.ident.parse(name)
                if found and found[0] in self.trials and self.trials[found[0]].backend == backend_name:
                    remote.setdefault(found[0], {})[found[1]] = name
        rows = self.rows()
        for trial_id, attempts in remote.items():
            trial = self.trials[trial_id]
            backend = self.backends.get(trial.backend)
            where = backend.place
            known = {e.attempt: e for e in rows.get(trial_id, [])}
            previous_type = trial.chain[0]
            for attempt in sorted(attempts):
                name, entry = attempts[attempt], known.get(attempt)
                if entry is not None and entry.status != Status.PLANNED:
                    previous_type = self.attempt_info(trial, entry)["instance_type"]
                    continue
                try:
                    status = backend.status(name)
                except (BackendError, InputError) as exc:
                    self._event(f"{name}: in {where}, not adopted yet ({exc.message})")
                    self._adopted_remote = False  # look again next step
                    continue
                if status.tags.get(TAG_SWEEP) != self.d.sweep_id:
                    continue
                instance_type = status.instance_type or previous_type
                if entry is None:
                    kind = status.tags.get(TAG_ATTEMPT, "")
                    info = {"instance_type": instance_type,
                            "failover": kind.startswith("failover:") or (not kind and instance_type != previous_type)}
                    if info["failover"]:
                        info["from_type"] = kind.removeprefix("failover:") if kind else previous_type
                    if kind == "resumed":
                        info["resumed"] = True
                    prepared = self._prepare_attempt(trial, name, attempt, info)
                    self._plan_attempt(trial, name, attempt, prepared)
                previous_type = instance_type
                target = status.status if status.terminal else Status.SUBMITTED
                detail = status.failure_reason if status.status == Status.FAILED else f"adopted: found in {where}"
                self.ledger.transition(name, target, detail=detail, expect=(Status.PLANNED,))
                if status.terminal and status.billable_seconds is not None:
                    self.ledger.put_value(key(self.d.sweep_id, f"billed:{name}"), int(status.billable_seconds))
                self._event(f"{name}: {target} in {where} (submitted from another machine or home); adopted")

    def _elsewhere(self, own: set[str]) -> set[str]:
        """Names of this sweep's jobs in progress that this ledger does not count in flight.

        Each shared backend's list of the sweep's jobs in progress is asked once per runner
        (ListTrainingJobs pages through every job of the account in the worst case, so a
        list per round would grow with the square of the sweep); later rounds ask only about
        the jobs that list found and that are still running (one describe each). A job
        another machine creates later is adopted when this runner reaches its planned row
        (the submit asks for the name before creating it), and a runner started later
        lists this one's jobs at its start."""
        if not self.count_elsewhere or self.backends is None:
            return set()
        if self._listed is None:
            # Only a shared backend has jobs another machine may have started; each is asked.
            owner: dict[str, Backend] = {}
            for backend in self.backends.shared(self.d.backends):
                for name in backend.job_names(self.ident.job_prefix, in_flight=True):
                    owner.setdefault(name, backend)
            self._listed = owner
            fresh = True
        else:
            fresh = False
        known = {e.job_name: e for e in self.ledger.entries(sweep_id=self.d.sweep_id)}
        out = set()
        for name, backend in list(self._listed.items()):
            if name in own or not self.ident.owns(name):
                continue
            entry = known.get(name)
            if entry is not None and entry.status not in (Status.PLANNED,):
                self._listed.pop(name)  # this ledger follows it (or it ended) from here on
                continue
            if not fresh:
                try:
                    seen = backend.describe(name)
                except (BackendError, InputError):
                    if entry is not None or self._foreign.get(name):
                        out.add(name)  # not known to have ended: still counted
                    continue
                if seen is None or seen.terminal:
                    self._listed.pop(name)
                    continue
            if entry is None and name not in self._foreign:
                try:
                    tags = backend.status(name).tags
                except (BackendError, InputError):
                    continue
                self._foreign[name] = tags.get(TAG_SWEEP) == self.d.sweep_id
            if entry is not None or self._foreign.get(name):
                out.add(name)
        return out
