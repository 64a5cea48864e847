"""From a job spec to the exact request its backend sends, and everything that travels with it.

Contract:
- A job is named by `names.job_name(spec)` unless the caller names it.
- `resolved_job(spec, name)` is the job file (`job.json`, schema in `entrypoints.shared.contract`)
  with every default filled in: worker count, cache and output locations, the environment
  the container gets, and the tags.
- The request itself is the backend's (`Backend.build_request`: SageMaker's CreateTrainingJob,
  AWS Batch's SubmitJob), from the same job file, archive and hyperparameters.
- `prepare(spec or diagnosis)` runs all of it on the doctor's diagnosis (`doctor.diagnose`:
  the resolved target, the cost estimate and the findings, each computed once; given one, it
  is not computed again). It is deterministic: the same spec gives the same request and the
  same archive bytes.

The flow is one way: spec -> doctor (target, cost, findings) -> request -> backend; what the
catalog derives about the spec (workers, LNC, environment, image) is read from the one
`catalog.Target`, never derived here again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from entrypoints.shared import contract
from orchestrator import catalog, cost, doctor, locations, names, preferences, quotas, sourcedir, tracking
from orchestrator.backends.running import RunsHere
from orchestrator.errors import InputError
from orchestrator.names import TAG_JOB, TAG_SPEC_HASH
from orchestrator.spec import JobSpec, spec_hash

CONTAINER_LOG_LEVEL = 20


def resolved_job(spec: JobSpec, job_name: str, extra_tags: dict | None = None,
                 target: catalog.Target | None = None, varied: dict | None = None,
                 choices: list | tuple | None = None, where: locations.Locations | None = None) -> dict:
    """The job file (`job.json`, schema `contract.JOB_FILE_SCHEMA`) with every default resolved,
    from the spec's `target` (`catalog.resolve(spec)` when not given). `varied` (a sweep
    trial's values, dotted path -> value) travels as the file's "varied" object, so the
    job's results.json names them; a job outside a sweep has no such key."""
    target = target or catalog.resolve(spec)
    where = where or locations.of(spec, job_name)
    digest = spec_hash(spec)
    facts = target.facts
    instance = {
        "type": spec.instance.type,
        "family": facts.family if facts else target.family,
        "neuron_cores": facts.neuron_cores if facts else 0,
        "logical_cores": target.logical_cores,
        "lnc": target.lnc,
        "vcpus": facts.vcpus if facts else 0,
    }
    tags = dict(spec.tags)
    tags[TAG_SPEC_HASH] = digest
    tags[TAG_JOB] = job_name
    tags.update(extra_tags or {})
    mlflow = tracking.job_section(spec, job_name, tags, target)
    spec_data = spec.model_dump(mode="json")
    if mlflow is None:
        spec_data.pop("mlflow", None)  # a job without MLflow keeps its job file (and archive) as before
    job = {
        "schema": contract.JOB_FILE_SCHEMA,
        "job_name": job_name,
        "spec_hash": digest,
        "spec": spec_data,
        "instance": instance,
        "workers_per_node": target.workers_per_node,
        "compile_cache": {"uri": where.compile_cache, "mode": spec.compile_cache.mode,
                          "push_interval_s": spec.compile_cache.push_interval_s},
        "results_uri": where.results,
        "environment": {**target.environment, **tracking.environment(mlflow)},
        "tags": dict(sorted(tags.items())),
    }
    if mlflow is not None:
        job["mlflow"] = mlflow
    if spec.instance.preferences:
        # What the container needs of each type SageMaker may select (entrypoints/ cannot ask
        # the catalog): launch.py adapts to the selected one's row.
        job["preferences"] = preferences.table(list(choices) if choices else preferences.choices(spec))
    spec.backend_type.job_file(spec, job, where)
    if varied:
        job["varied"] = dict(varied)
    return job


def hyperparameters(spec: JobSpec, job_name: str) -> dict[str, str]:
    """The toolkit's hyperparameters, each value JSON-encoded as it decodes them. launch.py
    reads the SM_* variables through the toolkit's library, which takes the program's name,
    the region, the job name and the log level from these. No `sagemaker_submit_directory`:
    the code arrives as the `code` channel, unpacked by the container entrypoint."""
    values = {
        contract.HP_PROGRAM: contract.PROGRAM,
        contract.HP_REGION: spec.region,
        contract.HP_JOB_NAME: job_name,
        contract.HP_LOG_LEVEL: CONTAINER_LOG_LEVEL,
    }
    return {key: json.dumps(value) for key, value in values.items()}


@dataclass(frozen=True)
class Prepared:
    """Everything a backend needs to run one job, computed once."""

    spec: JobSpec
    job_name: str
    spec_hash: str
    job: dict
    parts: sourcedir.Archive  # the archive as its parts: the code shared by every prepared job
    locations: locations.Locations  # where its objects go, the archive's included
    request: dict
    estimate: cost.Estimate
    findings: list[doctor.Finding]
    target: catalog.Target
    # Each instance preference sized and priced (`preferences.choices`, from the diagnosis);
    # () for a spec without preferences. Printed by `plan`, never chosen again.
    choices: tuple = ()
    # What the job asks of which Service Quota (`quotas.needs`, the backend's `quota_needs`);
    # () for a backend without quotas. Read by submit's quota check and a schedule's admission.
    quota_needs: tuple = ()

    @property
    def source_uri(self) -> str:
        return self.locations.source

    @property
    def archive(self) -> bytes:
        return self.parts.data()

    @property
    def archive_sha256(self) -> str:
        return self.parts.sha256


def check_contract(spec: JobSpec, request: dict, job_name: str) -> None:
    """SpecError (exit 2) for anything in the request, or in the S3 keys the job derives, that
    AWS would refuse (`aws_contract`): before any AWS call, each at the spec field it came from.
    Nothing for a backend whose request is never sent (`Backend.operation` None)."""
    from orchestrator import aws_contract, provenance

    operation = spec.backend_type.operation
    if operation is None:
        return
    aws_contract.check_uris(spec, locations.object_uris(spec))
    service, name = operation
    found = aws_contract.violations(service, name, request)
    aws_contract.raise_for(spec, found, lambda path: provenance.field(spec, name, request, path),
                           what=f"the {name} request")


def prepare(source: JobSpec | doctor.Diagnosis, *, job_name: str | None = None,
            extra_tags: dict | None = None, varied: dict | None = None,
            local: RunsHere | None = None) -> Prepared:
    """Job file, archive and request for a spec, on its diagnosis (deterministic).

    `source` is the spec, or the doctor's diagnosis of it (`doctor.diagnose`): the target, the
    cost estimate and the findings are then taken as they are, not computed again. `varied`:
    a sweep trial's values (`resolved_job`). Findings
    are returned, not raised: callers decide (`doctor.raise_for`). Only a spec too broken to
    build a request for raises, and then with the doctor's located errors; and a request AWS
    would refuse (`check_contract`: SpecError at the fields it came from).

    `local` (a batch spec run on this machine, `submit --local`): the backend that runs it here
    (`RunsHere`: the local backend, given by the caller). The same request,
    for the job `names.local_job_name(spec)`, with the archive, results.json and the compile
    cache in this machine's store (`locations.store`), the job file made this machine's by the
    backend that runs it (`run_here`).
    """
    diagnosis = source if isinstance(source, doctor.Diagnosis) else doctor.diagnose(source)
    spec, target = diagnosis.spec, diagnosis.target
    name = job_name
    if name is None:
        name = names.local_job_name(spec) if local else names.job_name(spec)
    names.check_job_name(name)
    # Where the job's objects go: decided here, once, by the backend (or this machine's store).
    where = locations.store(name) if local else locations.of(spec, name)
    job = resolved_job(spec, name, extra_tags, target, varied, diagnosis.choices, where)
    if local:
        local.run_here(job)
    archive = sourcedir.build_parts(job)
    where = where.with_source(archive.sha256)
    try:
        request = spec.backend_type.build_request(
            spec, job_name=name, where=where, job=job, hyperparameters=hyperparameters(spec, name), target=target,
            choices=diagnosis.choices)
    except InputError:
        doctor.raise_for(spec, diagnosis.findings)
        raise
    # What AWS would refuse, once the doctor has nothing to say: its findings name the cause
    # better (an instance type SageMaker does not train on is also outside the model's enum).
    if not local and not doctor.errors(diagnosis.findings):
        check_contract(spec, request, name)
    return Prepared(spec=spec, job_name=name, spec_hash=job["spec_hash"], job=job, parts=archive,
                    locations=where, request=request, estimate=diagnosis.estimate,
                    findings=diagnosis.findings, target=target, choices=diagnosis.choices,
                    quota_needs=tuple(quotas.needs(spec)))

