"""A stand-in service on this machine: a job "runs" the moment it is submitted.

The service keeps one JSON record per job in its own folder (`$ORCHESTRATOR_HOME/stand-in/`),
as a cloud service keeps its job list; a submit records the intent in the ledger first (as
every backend does), then writes the job's record and its final results.json (a v1 document,
`entrypoints.shared.results_schema`) at the job's results location, as a container that trained
`training.steps` steps would. Its request is its own (`build_request`): what it would send.
Nothing here is imported by orchestrator/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from entrypoints.shared import results_schema
from entrypoints.shared.atomic import write_json
from orchestrator.backends.job import JobStatus, Submitted, UnknownJob, progress_of, record_status
from orchestrator.errors import InputError
from orchestrator.lifecycle import IN_FLIGHT, Status
from orchestrator.paths import home

# The loss the stand-in's job reports after its steps (what `results` shows).
FINAL_LOSS = 0.25


class StandInBackend:
    """Runs nothing, at once; keeps its jobs on this machine (see the module docstring)."""

    name: ClassVar[str] = "standin"
    cloud: ClassVar[bool] = False
    shared: ClassVar[bool] = False
    runs_in: ClassVar[str] = "in the stand-in service"
    wait_interval_s: ClassVar[float] = 0.1
    sweep_poll_s: ClassVar[float] = 0.1
    operation: ClassVar[tuple[str, str] | None] = None  # its request is never sent to AWS
    scheduled: ClassVar[str | None] = None
    schedule_refusal: ClassVar[str] = "the stand-in service runs on this machine only"
    section: ClassVar[str | None] = None
    preferences: ClassVar[str | None] = None
    local_run: ClassVar[bool] = False

    # --- planning: asked of the class ---------------------------------------------------------

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[str, str]]:
        if not (spec.output.uri or "").startswith("file:///"):
            return [("output.uri", "the stand-in service keeps its jobs' objects on this machine: give a "
                                   "file:/// output.uri")]
        return []

    @classmethod
    def missing(cls, data) -> list[tuple[tuple[str, ...], str]]:
        output = data.get("output")
        return [] if isinstance(output, dict) and "uri" in output else [(("output", "uri"), "the stand-in needs "
                                                                         "output.uri")]

    @classmethod
    def infra_fields(cls, fields: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return dict(fields)

    @classmethod
    def runs(cls, spec, facts) -> bool:
        return True

    @classmethod
    def rules(cls, spec, target, estimate, priced) -> list:
        return []

    @classmethod
    def estimate(cls, spec, target):
        from orchestrator import cost

        return cost.Estimate(usd_max=0.0, hours_max=spec.max_run_minutes / 60, usd_per_hour=None, price=None,
                             instance_count=spec.instance.count, spot=spec.instance.spot,
                             note="stand-in backend: no cost")

    @classmethod
    def locations(cls, spec, job_name: str):
        from orchestrator import locations

        return locations.Locations.under(spec.output.uri, job_name, spec.compile_cache.uri)

    @classmethod
    def job_file(cls, spec, job: dict, where) -> None:
        job["stand_in"] = {"results_uri": where.results}

    @classmethod
    def build_request(cls, spec, *, job_name: str, where, job: dict, hyperparameters: dict[str, str], target,
                      choices: tuple) -> dict:
        return {"JobName": job_name, "InstanceType": spec.instance.type, "InstanceCount": spec.instance.count,
                "Steps": spec.training.steps, "ResultsUri": where.results, "Tags": job["tags"]}

    @classmethod
    def quota_needs(cls, spec) -> list:
        return []

    @classmethod
    def create(cls, region: str | None = None, **options) -> StandInBackend:
        return cls(ledger=options.get("ledger"))

    @classmethod
    def holds(cls, job_name: str) -> bool:
        return (cls.folder() / f"{job_name}.json").is_file()

    # --- running: asked of the instance -------------------------------------------------------

    region = None
    place = "the stand-in service"
    label = "standin"

    def __init__(self, ledger=None):
        if ledger is None:
            from orchestrator.ledger import Ledger

            ledger = Ledger()
        self.ledger = ledger

    @staticmethod
    def folder() -> Path:
        return home() / "stand-in"

    def _record(self, job_name: str) -> dict | None:
        path = self.folder() / f"{job_name}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def submit(self, prepared) -> Submitted:
        name = prepared.job_name
        entry = self.ledger.record_intent(name, backend=self.name, region=prepared.spec.region,
                                          spec_hash=prepared.spec_hash, request=prepared.request,
                                          locations=prepared.locations.to_json())
        if entry.spec_hash != prepared.spec_hash:
            raise InputError(f"the job name {name} is already in the ledger for another spec")
        if self._record(name) is not None:
            return Submitted(name, created=False)
        spec = prepared.spec
        steps = spec.training.steps
        document = {
            "schema": results_schema.SCHEMA, "job_name": name, "status": "completed", "backend": self.name,
            "region": spec.region, "spec_hash": prepared.spec_hash, "tags": prepared.job["tags"],
            "instance": {"type": spec.instance.type, "count": spec.instance.count},
            "steps": steps, "steps_done": steps, "final_loss": FINAL_LOSS,
        }
        results = Path(urlsplit(prepared.locations.results).path)
        results.parent.mkdir(parents=True, exist_ok=True)
        write_json(results, document)
        self.folder().mkdir(parents=True, exist_ok=True)
        write_json(self.folder() / f"{name}.json", {"state": "completed", "request": prepared.request,
                                                    "results": prepared.locations.results,
                                                    "instance_type": spec.instance.type,
                                                    "instance_count": spec.instance.count})
        self.ledger.transition(name, "submitted", expect=("submitting", "planned"))
        return Submitted(name, created=True)

    def describe(self, job_name: str) -> JobStatus | None:
        record = self._record(job_name)
        if record is None:
            return None
        return JobStatus(job_name=job_name, status=Status(record["state"]), instance_type=record["instance_type"],
                         instance_count=record["instance_count"], output_uri=record["results"])

    def status(self, job_name: str) -> JobStatus:
        found = self.describe(job_name)
        if found is None:
            raise UnknownJob(f"the stand-in service has no job {job_name}")
        record_status(self.ledger, self.name, found, expect=tuple(IN_FLIGHT))
        return found

    def progress(self, job_name: str):
        record = self._record(job_name)
        path = Path(urlsplit(record["results"]).path) if record else None
        if path is None or not path.is_file():
            return None
        return progress_of(path.read_bytes(), record["results"])

    def logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        record = self._record(job_name)
        if record is None:
            raise UnknownJob(f"the stand-in service has no job {job_name}")
        yield f"[stand-in] {job_name} {record['state']}"

    def has_logs(self, job_name: str) -> bool:
        return self._record(job_name) is not None

    def no_logs(self, job_name: str) -> str:
        return f"no log lines for {job_name}"

    def stop(self, job_name: str) -> None:
        record = self._record(job_name)
        if record is None:
            raise UnknownJob(f"the stand-in service has no job {job_name}")
        if not Status(record["state"]).is_terminal():
            write_json(self.folder() / f"{job_name}.json", {**record, "state": "stopped"})

    def job_names(self, containing: str, *, in_flight: bool = False) -> list[str]:
        found = sorted(p.stem for p in self.folder().glob("*.json") if containing in p.stem)
        return [n for n in found if not in_flight or not Status(self._record(n)["state"]).is_terminal()]

    def exists(self, job_name: str) -> bool:
        return self._record(job_name) is not None

    def quota_clients(self, attempts: int | None = None) -> None:
        return None
