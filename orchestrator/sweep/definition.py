"""A sweep as the ledger keeps it: its definition, found by id, name or file.

Contract:
- `save(plan, ledger)` writes the sweep's definition (its trials as JSON, in the ledger's kv
  table under `sweep:<id>`, each with its backend) and one `planned` row per trial on that
  trial's backend, so `resume` needs only the sweep id. A sweep whose trials share one backend
  is saved in schema 1, which earlier versions read; one whose `variants` vary the backend in
  schema 2, which they refuse (they would run every trial on one backend). It writes nothing while another process of this machine holds the sweep's runner
  lock (RunnerBusy, exit 2): a refused `sweep run` leaves the saved definition (concurrency,
  budget, file) as it was.
- `reload_policy` takes the run policy (budget, concurrency, max_retries) the sweep's file
  has now, so `sweep resume` honours a budget raised in the file.
- A sweep is named by its id, its sweep name or a schedule's untimed id when one saved sweep
  has it (`find_sweep_id`), or by its YAML file (`find_sweep`).
- A sweep edited into a new id submits its trials again under the new names, even those
  whose exact spec already completed under the old id; `completed_elsewhere` names them.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator import names
from orchestrator.errors import InputError, SpecError
from orchestrator.ledger import Ledger
from orchestrator.names import Identity
from orchestrator.processes import process_alive
from orchestrator.spec import JobSpec, load_sweep
from orchestrator.sweep.expand import identify
from orchestrator.sweep.plan import Plan
from orchestrator.sweep.process import RunnerBusy, runner_lock

# The newest schema this version reads and writes; it reads every schema in READABLE_SCHEMAS.
# 1: one backend for the sweep (top-level "backend"); 2: each trial's "backend" may differ;
# 3: the job spec gained `mlflow` and `instance.plan_full` (a trial's spec carries them).
DEFINITION_SCHEMA = 3
READABLE_SCHEMAS = (1, 2, 3)
# The job spec's fields (`spec_fields`) that schema DEFINITION_SCHEMA's readers know, as a
# digest. A saved trial carries its whole spec, and an earlier version refuses a field it does
# not know ("Extra inputs are not permitted") instead of saying the sweep is newer: a change of
# the spec's fields goes with a new schema number (READABLE_SCHEMAS keeps the older ones), so
# an earlier version says "schema N: upgrade". tests/test_upgrade.py holds this to the spec.
SPEC_FIELDS_DIGEST = "63d07b7752ba3c25"


@dataclass(frozen=True)
class TrialDef:
    """A trial as the runner keeps it: a `Trial`'s identity and spec, plus its failover chain
    of instance types (the spec's own first), in place of the digest the planner used."""

    index: int
    trial_id: str
    overrides: dict[str, Any]
    spec: JobSpec
    chain: tuple[str, ...]

    @property
    def backend(self) -> str:
        """The backend every job of this trial runs on (its spec's; failover keeps it)."""
        return self.spec.backend


@dataclass(frozen=True)
class Definition:
    """What the runner needs, as stored in the ledger's kv table under `sweep:<id>`. `backend`
    is the base spec's; each trial runs on its own (`TrialDef.backend`, `backends`)."""

    identity: Identity
    backend: str
    region: str
    concurrency: int
    max_retries: int
    budget_usd: float | None
    trials: tuple[TrialDef, ...]
    file: str | None = None

    @property
    def sweep_id(self) -> str:
        return self.identity.sweep_id

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends the trials run on, in trial order, each once."""
        return tuple(dict.fromkeys(t.backend for t in self.trials)) or (self.backend,)

    def to_json(self) -> dict:
        return {
            # Every trial's spec carries this version's fields: an earlier version says "newer".
            "schema": DEFINITION_SCHEMA,
            "name": self.identity.name, "digest": self.identity.digest,
            "tick": self.identity.tick, "backend": self.backend, "region": self.region,
            "concurrency": self.concurrency, "max_retries": self.max_retries, "budget_usd": self.budget_usd,
            "file": self.file,
            "trials": [{"index": t.index, "trial_id": t.trial_id, "overrides": t.overrides, "backend": t.backend,
                        "spec": t.spec.model_dump(mode="json"), "chain": list(t.chain)} for t in self.trials],
        }

    @classmethod
    def from_json(cls, data: dict) -> Definition:
        schema = data.get("schema")
        if schema not in READABLE_SCHEMAS:
            newer = isinstance(schema, int) and schema > DEFINITION_SCHEMA
            hint = ("upgrade this orchestrator to the version that saved the sweep" if newer
                    else "use the orchestrator version that saved the sweep")
            if data.get("file") and not data.get("tick"):
                # `sweep run` writes the definition again (`save`), keeping the rows of the same id;
                # a tick's definition is written only by the schedule, when the tick is due.
                hint += (f", or save it again in this version's format: `python -m orchestrator sweep run "
                         f"{shlex.quote(str(data['file']))}`")
            raise InputError(f"the ledger holds a sweep definition of schema {schema!r}; "
                             f"this orchestrator reads {' and '.join(map(str, READABLE_SCHEMAS))}", hint=hint)
        trials = tuple(TrialDef(t["index"], t["trial_id"], t["overrides"], JobSpec.model_validate(t["spec"]),
                                tuple(t["chain"])) for t in data["trials"])
        for t, saved in zip(trials, data["trials"], strict=True):
            # Schema 1 names one backend for the sweep, and every trial's spec has it.
            recorded = saved.get("backend", data["backend"])
            if recorded != t.backend:
                raise InputError(f"the ledger's definition of sweep {data['name']} is damaged: trial {t.trial_id} "
                                 f"is recorded on {recorded} but its spec says backend {t.backend}",
                                 hint="save it again with `python -m orchestrator sweep run SWEEP.yaml`")
        return cls(Identity(data["name"], data["digest"], data.get("tick")), data["backend"], data["region"],
                   data["concurrency"], data["max_retries"], data.get("budget_usd"), trials, data.get("file"))

    @classmethod
    def of(cls, planned: Plan) -> Definition:
        sweep = planned.sweep
        return cls(planned.identity, sweep.base_spec.backend, sweep.base_spec.region, sweep.concurrency,
                   sweep.max_retries, sweep.budget.max_total_cost_usd,
                   tuple(TrialDef(t.trial.index, t.trial.trial_id, t.trial.overrides, t.trial.spec, t.chain)
                         for t in planned.trials),
                   str(sweep.path.resolve()) if sweep.path else None)


def spec_fields() -> list[str]:
    """The job spec's field paths ("instance.type", ...), sorted, and their digest's input."""
    import typing

    from pydantic import BaseModel

    def paths(model, prefix: str) -> set[str]:
        found = set()
        for name, field in model.model_fields.items():
            found.add(prefix + name)
            stack = [field.annotation]
            while stack:
                kind = stack.pop()
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    found |= paths(kind, f"{prefix}{name}.")
                else:
                    stack.extend(typing.get_args(kind))
        return found

    return sorted(paths(JobSpec, ""))


def key(sweep_id: str, what: str = "") -> str:
    """The ledger kv key of the sweep's definition, or of one of its records (`what`)."""
    return f"sweep:{sweep_id}" + (f":{what}" if what else "")


def save(planned: Plan, ledger: Ledger) -> Definition:
    """Persist the plan: its definition, then one `planned` row per trial (idempotent: a
    second save of the same sweep keeps existing rows and their states).

    Holds the sweep's runner lock while writing, so nothing is written while another process
    of this machine runs the sweep: InputError (exit 2) "being run by another process", and
    the saved definition stays what that runner was started with. The lock is released on
    return; the caller takes it again to run the sweep.
    """
    definition = Definition.of(planned)
    try:
        with runner_lock(definition.sweep_id):
            ledger.put_value(key(definition.sweep_id), definition.to_json())
            for t in planned.trials:
                ledger.record_intent(t.job_name, backend=t.trial.spec.backend, region=definition.region,
                                     spec_hash=t.prepared.spec_hash, request=t.prepared.request,
                                     status="planned", sweep_id=definition.sweep_id,
                                     trial_id=t.trial.trial_id, attempt=0,
                                     locations=t.prepared.locations.to_json())
    except RunnerBusy as exc:
        sweep_id = definition.sweep_id
        raise RunnerBusy(sweep_id, exc.pid, hint=(
            f"nothing was changed: the running sweep keeps its saved concurrency, budget and file; "
            f"watch it with `python -m orchestrator sweep status {sweep_id}`, or stop it with `python -m orchestrator sweep "
            f"stop {sweep_id}` and run again")) from None
    return definition


def load_definition(ledger: Ledger, sweep_id: str) -> Definition:
    """The saved definition of sweep `sweep_id`; InputError naming the known sweeps if none."""
    data = ledger.get_value(key(sweep_id))
    if not isinstance(data, dict):
        known = sweep_ids(ledger)
        raise InputError(f"no sweep {sweep_id!r} in the ledger {ledger.path}",
                         hint=("known sweeps: " + ", ".join(known[-10:])) if known else
                         "start one with `python -m orchestrator sweep run SWEEP.yaml`")
    return Definition.from_json(data)


def reload_policy(ledger: Ledger, definition: Definition) -> tuple[Definition, str | None]:
    """The saved sweep with the run policy (budget, concurrency, max_retries) its file has now,
    as `sweep run FILE` would save it, and a note saying what changed; so `sweep resume` honours
    a budget raised in the file. Nothing changes (and the note says why) when the file is gone,
    no longer loads, or was edited into another sweep (other trials: another id). Writes under
    the runner lock, as `save` does."""
    if not definition.file:
        return definition, None
    path = Path(definition.file)
    try:
        loaded = load_sweep(path)
        tick = (datetime.strptime(definition.identity.tick, "%Y%m%d%H%M").replace(tzinfo=timezone.utc)
                if definition.identity.tick else None)
        now = identify(loaded, tick)
    except (InputError, OSError) as exc:
        why = exc.message.splitlines()[0] if isinstance(exc, InputError) else str(exc)
        return definition, f"note: {path} could not be read again ({why}); resuming with the saved settings"
    if now.sweep_id != definition.sweep_id:
        return definition, (f"note: {path} now describes another sweep ({now.sweep_id}: its trials changed); "
                            f"resuming {definition.sweep_id} with its saved settings (`python -m orchestrator sweep run "
                            f"{shlex.quote(str(path))}` starts the new one)")
    fresh = replace(definition, concurrency=loaded.concurrency, max_retries=loaded.max_retries,
                    budget_usd=loaded.budget.max_total_cost_usd)
    if fresh == definition:
        return definition, None
    changes = [f"{name} {old} -> {new}" for name, old, new in (
        ("budget.max_total_cost_usd", definition.budget_usd, fresh.budget_usd),
        ("concurrency", definition.concurrency, fresh.concurrency),
        ("max_retries", definition.max_retries, fresh.max_retries)) if old != new]
    with runner_lock(definition.sweep_id):
        ledger.put_value(key(definition.sweep_id), fresh.to_json())
    return fresh, f"note: took {', '.join(changes)} from {path}"


def completed_elsewhere(ledger: Ledger, sweep_id: str, spec_hashes: dict[str, str]) -> dict[str, str]:
    """Trial id -> name of a completed job of another sweep (or none) with the same spec hash,
    for the trials in `spec_hashes` (trial id -> spec hash). Names are not changed by this:
    it only tells the user that an edited sweep repeats finished work."""
    if not spec_hashes:
        return {}
    by_hash: dict[str, str] = {}
    for entry in ledger.entries(statuses=("completed",)):
        if entry.sweep_id != sweep_id:
            by_hash.setdefault(entry.spec_hash, entry.job_name)
    return {tid: by_hash[digest] for tid, digest in spec_hashes.items() if digest in by_hash}


def find_sweep_id(ledger: Ledger, target: str) -> str:
    """The id of the one sweep in the ledger that `target` names: its id, or its sweep name
    (or a schedule's untimed id) when that fits exactly one saved sweep. Raises InputError
    (exit 2) for a name that fits several, listing them, or none, listing the known sweeps."""
    known = sweep_ids(ledger)
    if target in known:
        return target
    matches = [sweep_id for sweep_id in known if target in names.sweep_keys(sweep_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise InputError(f"{target!r} names {len(matches)} sweeps in the ledger: {', '.join(matches[-10:])}",
                         hint="give the sweep id (`python -m orchestrator sweep status` lists them)")
    return load_definition(ledger, target).sweep_id  # the "no sweep" error, with the known ones


def sweep_ids(ledger: Ledger) -> list[str]:
    """Sweep ids with rows in the ledger, oldest first."""
    return list(dict.fromkeys(e.sweep_id for e in ledger.entries() if e.sweep_id))


def find_sweep(ledger: Ledger, target: str) -> str:
    """The id of the saved sweep `target` names: a sweep id, a sweep name (or a schedule's
    untimed id) that one saved sweep has, or its YAML file, which names the sweep `sweep run`
    saved from it or, for a schedule, its tick sweep. InputError (exit 2) for a file that does
    not exist, a file whose sweep was never saved (or that was edited since), and a file or
    name that fits several sweeps (listing them)."""
    from orchestrator.paths import is_file, unusable

    if not (target.endswith((".yaml", ".yml")) or is_file(target)):
        return find_sweep_id(ledger, target)
    try:
        loaded = load_sweep(target)
    except SpecError as exc:
        if unusable(target) is not None or Path(target).exists():
            raise
        # No such file: the path is wrong, or a sweep id or name was meant.
        other = "give a sweep id or name instead (`python -m orchestrator sweep status` lists the sweeps)"
        hint = (f"{exc.hint} Or {other}" if exc.hint and exc.hint.endswith(("?", ".")) else
                "; or ".join(filter(None, (exc.hint, other))))
        raise SpecError(exc.problems, hint=hint) from None
    ident = identify(loaded)
    known = sweep_ids(ledger)
    if not any(ident.sweep_id in names.sweep_keys(sweep_id) for sweep_id in known):
        same = [sweep_id for sweep_id in known if ident.name in names.sweep_keys(sweep_id)]
        base = shlex.quote(str(Path(target).parent / loaded.base))
        # Never "start it" first: a cloud sweep run from another machine (or by a cloud schedule)
        # is in that machine's ledger, and `sweep run` here would submit its paid jobs again.
        hint = (f"sweeps named {ident.name} in the ledger: {', '.join(same[-10:])}; give one of these ids "
                "instead of the file" if same else
                f"this machine's ledger has no run of it. If it ran elsewhere (another machine, a cloud schedule), "
                f"its jobs' results show from here: `python -m orchestrator results --sweep {ident.name} --spec "
                f"{base}` (the jobs' output.uri; no ledger needed), and `sweep status` works on the machine that "
                f"ran it. Only if it never ran: `python -m orchestrator sweep run {shlex.quote(target)}`")
        raise InputError(f"{target}: no saved sweep {ident.sweep_id} in the ledger {ledger.path}: this file, as "
                         "it is now, was never run (it may have been edited since it ran)", hint=hint)
    # One sweep, or a schedule's ticks (<id>-<time>): one is the answer, several are listed.
    try:
        return find_sweep_id(ledger, ident.sweep_id)
    except InputError as exc:
        raise InputError(f"{target}: {exc.message}", hint=exc.hint) from None


# --- flags a sweep's runners read ----------------------------------------------------------


def request_stop(ledger: Ledger, sweep_id: str) -> None:
    """Set the sweep's stop flag: a runner stops at its next step, and starts no more jobs."""
    ledger.put_value(key(sweep_id, "stop"), True)


def clear_stop(ledger: Ledger, sweep_id: str) -> None:
    ledger.put_value(key(sweep_id, "stop"), False)


def stop_requested(ledger: Ledger, sweep_id: str) -> bool:
    return bool(ledger.get_value(key(sweep_id, "stop"), False))


def record_runner(ledger: Ledger, sweep_id: str, pid: int) -> None:
    """Record this machine's process `pid` as the sweep's runner (for `sweep stop` to signal)."""
    ledger.put_value(key(sweep_id, "runner"), {"pid": pid, "host": os.uname().nodename})


def runner_pid(ledger: Ledger, sweep_id: str) -> int | None:
    """The pid of the sweep's last runner on this machine, None when it ran elsewhere or never."""
    info = ledger.get_value(key(sweep_id, "runner"))
    if isinstance(info, dict) and info.get("host") == os.uname().nodename and isinstance(info.get("pid"), int):
        return info["pid"]
    return None


def runner_state(ledger: Ledger, sweep_id: str) -> dict:
    """Who runs the sweep, for `sweep status`: {"pid", "host", "alive"} of the last runner the
    ledger recorded (pid and host None when none was), "alive" True or False when this
    machine can tell (the runner ran here: its lock is held, or not), None when it cannot
    (the runner ran on another host). Reads only."""
    from orchestrator.sweep.process import lock_held

    info = ledger.get_value(key(sweep_id, "runner"))
    info = info if isinstance(info, dict) else {}
    pid = info.get("pid") if isinstance(info.get("pid"), int) else None
    host = info.get("host") if isinstance(info.get("host"), str) else None
    alive: bool | None = None
    if host is None or host == os.uname().nodename:
        held = lock_held(sweep_id)
        alive = held if held is not None else (pid is not None and process_alive(pid))
    return {"pid": pid, "host": host, "alive": alive}
