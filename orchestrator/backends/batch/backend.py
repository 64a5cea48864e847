"""The AWS Batch backend (Inferentia2): submit, status, logs and stop of Batch jobs through boto3.

Contract:
- Clients (batch, s3, logs) come from the constructor; `connect(region)` builds them like the
  SageMaker backend's (`aws.client`: timeouts, botocore's retries, a checked endpoint).
- `submit` follows the ledger's intent-first protocol, as SageMaker's does: the row (with the
  exact SubmitJob request) is written first; then the job queue and its compute environments
  are checked (missing, INVALID or DISABLED: InputError naming `infra deploy`, exit 2, and the
  row goes back to planned). Batch job names are not unique, so the queue's jobs of that name
  are listed: one carrying our spec-hash tag (an earlier submit that died after SubmitJob) is
  adopted, never submitted a second time. Else the source archive is uploaded when its
  content-addressed key is absent; then SubmitJob; then the row moves to submitted.
- A job is found by its name in the queue its ledger row names (ListJobs' JOB_NAME filter,
  every status), the newest of that name carrying the orchestrator's job tag. `statuses` finds
  many jobs of a queue at once: one ListJobs listing of their names' common prefix (the
  filter's "name*"), then DescribeJobs of 100 ids a call; it falls back to one listing per
  name when the prefix listing would take more pages than that.
- `status` maps Batch's states onto ours through one table (`status_of`), with the status
  reason, the last attempt's exit code and reason; the times are Batch's (created, started,
  stopped), so results can show queue time and run time apart. Billable seconds are the sum
  of the attempts' run times (the instance's own boot and scale-in are not in them).
- `logs` reads the attempts' CloudWatch streams in the job's awslogs group (the job
  definition's, else Batch's default /aws/batch/job); `stop` is TerminateJob.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import ClassVar

from entrypoints.launcher.bootstrap import CODE_URI_ENV, HYPERPARAMETERS_ENV
from orchestrator.aws_errors import code_of, is_definite_refusal, is_not_found
from orchestrator.backends import registry
from orchestrator.backends.cloud import CloudBackend
from orchestrator.backends.cloud_errors import translate
from orchestrator.backends.job import JobStatus, Submitted, UnknownJob, record_status
from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.lifecycle import IN_FLIGHT, Status
from orchestrator.names import TAG_JOB, TAG_SPEC_HASH

DEFAULT_LOG_GROUP = "/aws/batch/job"
# The reason TerminateJob records (Batch shows it as the job's statusReason).
STOP_REASON = "stopped by orchestrator stop"
# How the statusReason of a job the queue's jobStateTimeLimitActions cancelled begins (AWS Batch
# user guide, "Jobs stuck in RUNNABLE due to capacity": "Canceled by JobStateTimeLimit action due
# to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"): no one stopped it, it failed to start.
TIME_LIMIT_CANCEL = "Canceled by JobStateTimeLimit action"
# infra/stack.yaml creates them with EnableBatch=true (docs/USAGE.md, "Inferentia2 through AWS Batch").
DEPLOY_HINT = ("create the queue, its compute environments and the job definition the request names (<stack>-inf2-<size>"
               "[-spot], <stack>-neuron-<chips>chip): `python -m orchestrator infra deploy --param EnableBatch=true "
               "--param BatchSubnets=subnet-... --param BatchSecurityGroupIds=sg-...` makes them in the stack batch.stack "
               "names; or name your own in batch.job_queue and batch.job_definition")
# Batch's job states -> ours. SUBMITTED, PENDING and RUNNABLE wait in the queue (for
# dependencies, then capacity); STARTING pulls the image and starts the container.
_TABLE = {"SUBMITTED": Status.PENDING, "PENDING": Status.PENDING, "RUNNABLE": Status.PENDING,
          "STARTING": Status.STARTING, "RUNNING": Status.RUNNING, "SUCCEEDED": Status.COMPLETED}
# The stack's queues are <stack>-inf2-<size>[-spot] (`backends.batch.request.queue_name`).
_STACK_QUEUE = "-inf2-"
_ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")
# DescribeJobs' `jobs`: "A list of up to 100 job IDs." (AWS Batch API Reference, DescribeJobs).
DESCRIBE_JOBS_IDS = 100


def failure_text(status_reason: str | None, container: dict) -> str:
    """Why a job failed, in the runner's words: "<statusReason>; <container reason>; exit code
    N", the parts it has (DescribeJobs' job and last attempt's container, or a ListJobs
    summary's, whose JobSummary and ContainerSummary carry the same members)."""
    parts = [status_reason, container.get("reason")]
    if container.get("exitCode") is not None:
        parts.append(f"exit code {container['exitCode']}")
    return "; ".join(str(p) for p in parts if p)


def status_of(state: str, *, stopped: bool = False) -> Status:
    """The one table from Batch's job status to ours. `stopped`: TerminateJob (or CancelJob) was
    called, so a FAILED job was stopped and a running one is stopping."""
    if state == "FAILED":
        return Status.STOPPED if stopped else Status.FAILED
    if state not in _TABLE:
        raise BackendError(f"AWS Batch reported an unknown job status {state!r}",
                           hint="the orchestrator may be older than the service; please report it")
    if stopped and state in ("STARTING", "RUNNING"):
        return Status.STOPPING
    return _TABLE[state]


def _seconds(ms) -> float | None:
    return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else None


class BatchBackend(CloudBackend):
    """Training jobs on AWS Batch. See the module docstring for the contract."""

    name: ClassVar[str] = "batch"
    service: ClassVar[str] = "batch"
    service_title: ClassVar[str] = "AWS Batch"
    runs_in: ClassVar[str] = "in AWS Batch"
    wait_interval_s: ClassVar[float] = registry.WAIT_INTERVAL_S["batch"]
    sweep_poll_s: ClassVar[float] = registry.SWEEP_POLL_S["batch"]
    operation: ClassVar[tuple[str, str]] = ("batch", "SubmitJob")
    scheduled: ClassVar[str | None] = "orchestrator.backends.batch.scheduled:BatchJobs"
    section: ClassVar[str | None] = "batch"  # batch.stack, batch.job_queue, batch.job_definition
    local_run: ClassVar[bool] = True  # `backends.local.batch_task`

    # --- the spec side (`backends.Backend`) -------------------------------------------------

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[str, str]]:
        from orchestrator.spec.models import BATCH_ROLE, batch_arn_place

        found = [("role_arn", BATCH_ROLE)] if spec.role_arn is not None else []
        found += super().spec_problems(spec)
        for field in ("job_queue", "job_definition"):
            place = batch_arn_place(getattr(spec.batch, field), spec.region)
            if place:
                found.append((f"batch.{field}", place))
        return found

    @classmethod
    def infra_fields(cls, fields: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        # A batch job runs with its job definition's role; the stack names its queues and job
        # definitions (`batch.stack`).
        fills = {key: path for key, path in fields.items() if key != "role_arn"}
        fills["stack_name"] = ("batch", "stack")
        return fills

    @classmethod
    def runs(cls, spec, facts) -> bool:
        return bool(facts is not None and facts.batch)

    @classmethod
    def rules(cls, spec, target, estimate, priced) -> list:
        from orchestrator.backends.batch import rules
        from orchestrator.doctor import budget, image, instance

        findings = rules.check(spec, target) + image.image_and_region(spec)
        findings += budget.within(spec, estimate, findings)
        return findings + instance.workers(spec, target)

    @classmethod
    def estimate(cls, spec, target):
        from orchestrator.backends.batch import billing

        return billing.estimate(spec, target)

    @classmethod
    def job_file(cls, spec, job: dict, where) -> None:
        # A Batch job has no TensorBoardOutputConfig: launch.py uploads rank 0's event files here.
        job["tensorboard_uri"] = where.tensorboard

    @classmethod
    def build_request(cls, spec, *, job_name: str, where, job: dict, hyperparameters: dict[str, str], target,
                      choices: tuple = ()) -> dict:
        from orchestrator.backends.batch import request

        return request.build(spec, job_name=job_name, source_uri=where.source, job=job,
                             hyperparameters=hyperparameters, target=target)

    @classmethod
    def quota_needs(cls, spec) -> list:
        from orchestrator import catalog, quotas

        facts = catalog.instance(spec.instance.type)
        vcpus = (facts.vcpus if facts else 0) * spec.instance.count
        return [quotas.Need(quotas.EC2, quotas.INF_SPOT if spec.instance.spot else quotas.INF_ON_DEMAND,
                            spec.instance.type, vcpus, "vCPUs")]

    @property
    def batch(self):
        """The AWS Batch client."""
        return self.client

    # --- submit ---------------------------------------------------------------------------

    def submit(self, prepared) -> Submitted:
        """Submit the job `prepared` describes, once. See the module docstring."""
        from botocore.exceptions import BotoCoreError, ClientError

        name, req = prepared.job_name, prepared.request
        done = self._begin_submit(prepared)
        if done is not None:
            return done
        try:
            # A queue that is not there or not usable holds no earlier job of ours either.
            self.check_queue(req["jobQueue"])
            self.check_job_definition(req["jobDefinition"])
            existing = self._find(name, req["jobQueue"])
            if existing is not None:
                return self._adopt(existing, prepared)
            self.upload_source(prepared)
        except OrchestratorError as exc:
            self._not_submitted(name, exc.message)  # SubmitJob was never called
            raise
        try:
            response = self.batch.submit_job(**req)
        except (ClientError, BotoCoreError) as exc:
            error = translate(exc, operation="SubmitJob", job_name=name, region=self.region)
            if is_definite_refusal(exc):
                self._not_submitted(name, error.message)
            raise error from exc
        self.ledger.transition(name, "submitted", expect=("submitting", "planned"))
        return Submitted(name, created=True, arn=response.get("jobArn"))

    def _adopt(self, described: dict, prepared) -> Submitted:
        """Take over the job of this name in the queue if it carries our spec-hash tag."""
        name = prepared.job_name
        theirs = (described.get("tags") or {}).get(TAG_SPEC_HASH)
        if theirs != prepared.spec_hash:
            self._not_submitted(name, "name taken by another job")
            raise BackendError(f"an AWS Batch job named {name} is already in queue {prepared.request['jobQueue']} and "
                               f"was not submitted from this spec (its {TAG_SPEC_HASH} tag is {theirs!r})",
                               hint="change the spec's name")
        self.ledger.transition(name, "submitted", expect=("submitting", "planned"))
        return Submitted(name, created=False, arn=described.get("jobArn"))

    def check_queue(self, queue: str) -> None:
        """InputError (exit 2) naming `infra deploy` unless the queue exists, is ENABLED and
        VALID, and so is each of its compute environments."""
        with self._aws("DescribeJobQueues"):
            found = self.batch.describe_job_queues(jobQueues=[queue]).get("jobQueues", [])
        if not found:
            raise InputError(f"no AWS Batch job queue {queue!r} in {self.region}", hint=DEPLOY_HINT)
        q = found[0]
        if q.get("status") == "INVALID" or q.get("state") != "ENABLED":
            raise InputError(f"AWS Batch job queue {queue} is {q.get('state')}, {q.get('status')}: "
                             f"{q.get('statusReason') or 'no reason given'}", hint=DEPLOY_HINT)
        arns = [env["computeEnvironment"] for env in q.get("computeEnvironmentOrder", [])]
        if not arns:
            raise InputError(f"AWS Batch job queue {queue} has no compute environment", hint=DEPLOY_HINT)
        with self._aws("DescribeComputeEnvironments"):
            envs = self.batch.describe_compute_environments(computeEnvironments=arns).get("computeEnvironments", [])
        known = {e.get("computeEnvironmentArn"): e for e in envs} | {e.get("computeEnvironmentName"): e for e in envs}
        for arn in arns:
            env = known.get(arn)
            if env is None:
                raise InputError(f"compute environment {arn} of job queue {queue} does not exist", hint=DEPLOY_HINT)
            if env.get("status") == "INVALID" or env.get("state") != "ENABLED":
                raise InputError(f"compute environment {env.get('computeEnvironmentName')} of job queue {queue} is "
                                 f"{env.get('state')}, {env.get('status')}: {env.get('statusReason') or 'no reason given'}",
                                 hint=DEPLOY_HINT)

    def check_job_definition(self, definition: str) -> None:
        """InputError (exit 2) naming `infra deploy` unless the job definition (a name, a
        name:revision or an ARN) has an ACTIVE revision: SubmitJob would refuse it with a
        ClientException, which reads as a backend failure."""
        args = ({"jobDefinitions": [definition]} if ":" in definition
                else {"jobDefinitionName": definition, "status": "ACTIVE"})
        with self._aws("DescribeJobDefinitions"):
            found = self.batch.describe_job_definitions(**args).get("jobDefinitions", [])
        if not any(d.get("status", "ACTIVE") == "ACTIVE" for d in found):
            raise InputError(f"no active AWS Batch job definition {definition!r} in {self.region}", hint=DEPLOY_HINT)

    # --- finding a job ----------------------------------------------------------------------

    def _queues_of(self, job_name: str) -> list[str]:
        """The queue the job's ledger row names; without one (a job submitted from another
        machine, `results` without a ledger), every queue in the region."""
        entry = self.ledger.get(job_name)
        queue = entry.request.get("jobQueue") if entry is not None and entry.backend == self.name else None
        if queue:
            return [queue]
        return self._region_queues(job_name)

    def _region_queues(self, job_name: str | None = None) -> list[str]:
        """Every job queue's name in the region (DescribeJobQueues, every page)."""
        queues: list[str] = []
        args: dict = {}
        while True:
            with self._aws("DescribeJobQueues", job_name=job_name):
                page = self.batch.describe_job_queues(**args)
            queues += [q["jobQueueName"] for q in page.get("jobQueues", [])]
            if not page.get("nextToken"):
                return queues
            args["nextToken"] = page["nextToken"]

    def _list_jobs(self, args: dict, job_name: str | None = None) -> dict:
        """One ListJobs page; an empty one when the queue does not exist (a submit refused for
        a missing queue left its name in the ledger; the stack was deleted): it holds no job.
        Whether it exists is asked (DescribeJobQueues), not read from the error's wording."""
        from botocore.exceptions import ClientError

        with self._aws("ListJobs", job_name=job_name):
            try:
                return self.batch.list_jobs(**args)
            except ClientError as exc:
                if code_of(exc) != "ClientException" or self._queue_exists(args["jobQueue"]):
                    raise
        return {}

    def _queue_exists(self, queue: str) -> bool:
        with self._aws("DescribeJobQueues"):
            return bool(self.batch.describe_job_queues(jobQueues=[queue]).get("jobQueues"))

    def _find(self, job_name: str, queue: str) -> dict | None:
        """DescribeJobs of the newest job of this name in `queue` with the orchestrator's job tag."""
        return self._find_in(queue, [job_name]).get(job_name)

    def _find_in(self, queue: str, names: list[str]) -> dict[str, dict]:
        """`_find` of each of `names` in `queue`: name -> DescribeJobs of its newest job carrying
        the orchestrator's job tag (names without one left out). DescribeJobs of every id found,
        DESCRIBE_JOBS_IDS a call."""
        one = names[0] if len(names) == 1 else None  # whose error it is, for `_aws`
        found = self._job_ids(queue, names)
        ids = list(dict.fromkeys(i for name in names for i in found.get(name, [])))
        jobs = []
        for start in range(0, len(ids), DESCRIBE_JOBS_IDS):
            with self._aws("DescribeJobs", job_name=one):
                jobs += self.batch.describe_jobs(jobs=ids[start:start + DESCRIBE_JOBS_IDS]).get("jobs", [])
        newest: dict[str, dict] = {}
        for j in jobs:
            name = j.get("jobName")
            if name in found and (j.get("tags") or {}).get(TAG_JOB) == name and \
                    (name not in newest or j.get("createdAt", 0) > newest[name].get("createdAt", 0)):
                newest[name] = j
        return newest

    def _job_ids(self, queue: str, names: list[str]) -> dict[str, list[str]]:
        """Name -> ids of the jobs of that exact name in `queue` (ListJobs, JOB_NAME filter, every
        status). Many names: one listing of their common prefix ("If the value ends with an
        asterisk (*), the filter matches any job name that begins with the string before the
        '*'", ListJobs API Reference), given up for one listing per name once it has taken as
        many pages as that would (a prefix shared by many more jobs than those asked about)."""
        prefix = os.path.commonprefix(names)
        if len(names) > 1 and prefix:
            found = self._listed(queue, prefix + "*", set(names), max_pages=len(names))
            if found is not None:
                return found
        found = {}
        for name in names:
            found.update(self._listed(queue, name, {name}, job_name=name) or {})
        return found

    def _listed(self, queue: str, value: str, wanted: set[str], *, max_pages: int | None = None,
                job_name: str | None = None) -> dict[str, list[str]] | None:
        """Name -> job ids of the jobs ListJobs lists in `queue` for the JOB_NAME filter `value`
        whose name is one of `wanted` (the filter ignores case; names do not), every page; None
        when there are more than `max_pages` pages."""
        found: dict[str, list[str]] = {}
        args: dict = {"jobQueue": queue, "filters": [{"name": "JOB_NAME", "values": [value]}]}
        pages = 0
        while True:
            if max_pages is not None and pages == max_pages:
                return None
            page = self._list_jobs(args, job_name)
            pages += 1
            for j in page.get("jobSummaryList", []):
                if j.get("jobName") in wanted:
                    found.setdefault(j["jobName"], []).append(j["jobId"])
            if not page.get("nextToken"):
                return found
            args["nextToken"] = page["nextToken"]

    def _describe(self, job_name: str) -> dict:
        found = next(filter(None, (self._find(job_name, queue) for queue in self._queues_of(job_name))), None)
        if found is None:
            raise UnknownJob(f"no AWS Batch job named {job_name} in {self.region}",
                             hint="check the job name (as printed by submit) and the region")
        return found

    def exists(self, job_name: str) -> bool:
        try:
            return self._describe(job_name) is not None
        except UnknownJob:
            return False

    def job_names(self, containing: str, *, in_flight: bool = False) -> list[str]:
        """Names of the jobs, in the queues this ledger's batch jobs use and their stacks' other
        inf2 queues, that contain `containing` (only those not yet ended with `in_flight`). The
        stack's other queues hold what another machine submitted there, e.g. a sweep's failover
        to another size; a ledger without batch rows asks AWS nothing."""
        known = {e.request.get("jobQueue") for e in self.ledger.entries(backend=self.name)} - {None}
        stacks = {queue.split(_STACK_QUEUE, 1)[0] + _STACK_QUEUE for queue in known if _STACK_QUEUE in queue}
        if stacks:
            known |= {queue for queue in self._region_queues() if queue.startswith(tuple(stacks))}
        queues = sorted(known)
        names: list[str] = []
        for queue in queues:
            for state in (_ACTIVE if in_flight else (*_ACTIVE, "SUCCEEDED", "FAILED")):
                args: dict = {"jobQueue": queue, "jobStatus": state}
                while True:
                    page = self._list_jobs(args)
                    names += [j["jobName"] for j in page.get("jobSummaryList", []) if containing in j["jobName"]]
                    if not page.get("nextToken"):
                        break
                    args["nextToken"] = page["nextToken"]
        return sorted(set(names))

    # --- status -----------------------------------------------------------------------------

    def status(self, job_name: str) -> JobStatus:
        d = self._describe(job_name)
        status = self._job_status(d, tags=dict(d.get("tags") or {}))
        record_status(self.ledger, self.name, status, expect=tuple(IN_FLIGHT))
        return status

    def statuses(self, job_names: Iterable[str]) -> dict[str, JobStatus | OrchestratorError]:
        """`status` of each job (`Backend.statuses`): the jobs of one queue are found together
        (`_find_in`: a few ListJobs pages, DescribeJobs of 100 ids a call), each job's queues in
        the order `status` tries them. An error of a call shared by several jobs is each one's."""
        names = list(dict.fromkeys(job_names))
        answers: dict[str, JobStatus | OrchestratorError] = {}
        found, unsearched = self._find_many(names, answers)
        for name in names:
            if name in answers or name in unsearched:
                continue  # its error is in; or a call failed before its search ended: not answered
            try:
                d = found.get(name)
                if d is None:
                    raise UnknownJob(f"no AWS Batch job named {name} in {self.region}",
                                     hint="check the job name (as printed by submit) and the region")
                status = self._job_status(d, tags=dict(d.get("tags") or {}))
                record_status(self.ledger, self.name, status, expect=tuple(IN_FLIGHT))
                answers[name] = status
            except OrchestratorError as exc:
                answers[name] = exc
        return {name: answers[name] for name in names if name in answers}

    def _find_many(self, names: list[str], errors: dict) -> tuple[dict[str, dict], set[str]]:
        """`_describe` of each name, queue by queue (`_queues_of`'s, the region's listed once):
        (name -> its job, the names whose search did not end). A failed call puts its error in
        `errors` for the names it was for and ends the search."""
        queues: dict[str, list[str]] = {}
        region: list[str] | None = None
        for name in names:
            entry = self.ledger.get(name)
            queue = entry.request.get("jobQueue") if entry is not None and entry.backend == self.name else None
            if not queue and region is None:
                try:
                    region = self._region_queues()
                except OrchestratorError as exc:
                    errors[name] = exc
                    return {}, set(names) - {name}  # nothing more is asked (`Backend.statuses`)
            queues[name] = [queue] if queue else list(region or [])
        found: dict[str, dict] = {}
        depth, pending = 0, [n for n in names if queues.get(n)]
        while pending:
            by_queue: dict[str, list[str]] = {}
            for name in pending:
                by_queue.setdefault(queues[name][depth], []).append(name)
            for queue, group in by_queue.items():
                try:
                    found.update(self._find_in(queue, group))
                except OrchestratorError as exc:
                    errors.update(dict.fromkeys(group, exc))
                    # Nothing more is asked (`Backend.statuses`).
                    return found, {n for n in pending if n not in found and n not in errors}
            depth += 1
            pending = [n for n in pending if n not in found and depth < len(queues[n])]
        return found, set()

    def describe(self, job_name: str) -> JobStatus | None:
        try:
            return self._job_status(self._describe(job_name), tags={})
        except UnknownJob:
            return None

    def _job_status(self, d: dict, tags: dict[str, str]) -> JobStatus:
        stopped = (bool(d.get("isTerminated") or d.get("isCancelled")) or d.get("statusReason") == STOP_REASON) \
            and not str(d.get("statusReason") or "").startswith(TIME_LIMIT_CANCEL)
        ours = status_of(d["status"], stopped=stopped)
        attempts = d.get("attempts") or []
        last = (attempts[-1].get("container") or {}) if attempts else (d.get("container") or {})
        reason = None
        if ours in (Status.FAILED, Status.STOPPED) or (d["status"] == "RUNNABLE" and d.get("statusReason")):
            reason = failure_text(d.get("statusReason"), last) or None
        run = sum(max(0.0, (_seconds(a.get("stoppedAt")) or 0) - (_seconds(a.get("startedAt")) or 0))
                  for a in attempts if _seconds(a.get("startedAt")) and _seconds(a.get("stoppedAt")))
        # The job's own environment as Batch reports it (the overrides win over the definition's).
        env = {e["name"]: e["value"] for e in (d.get("container") or {}).get("environment") or []}
        entry = self.ledger.get(d["jobName"])
        request = entry.request if entry is not None and entry.backend == self.name else {}
        queue = request.get("jobQueue") or str(d.get("jobQueue", "")).rsplit("/", 1)[-1]
        return JobStatus(
            job_name=d["jobName"], status=ours, secondary=d["status"], failure_reason=reason,
            billable_seconds=int(run) if attempts else None, training_seconds=int(run) if attempts else None,
            instance_type=env.get("SM_CURRENT_INSTANCE_TYPE"), instance_count=1,
            spot=queue.endswith("-spot"),
            created=_seconds(d.get("createdAt")), started=_seconds(d.get("startedAt")),
            ended=_seconds(d.get("stoppedAt")), output_uri=results_uri(env) if CODE_URI_ENV in env else None,
            tags=tags,
        )

    def _recorded_results_uri(self, job_name: str) -> str:
        """From the job's environment, as AWS Batch keeps it (`results_uri`)."""
        container = self._describe(job_name).get("container") or {}
        return results_uri({e["name"]: e["value"] for e in container.get("environment") or []})

    # --- logs -------------------------------------------------------------------------------

    def _log_group(self, d: dict) -> str:
        """The job's awslogs group: its container's log configuration (DescribeJobs gives it),
        else its job definition's, else Batch's default group."""
        config = (d.get("container") or {}).get("logConfiguration")
        if config is None and d.get("jobDefinition"):
            with self._aws("DescribeJobDefinitions", job_name=d.get("jobName")):
                found = self.batch.describe_job_definitions(jobDefinitions=[d["jobDefinition"]]).get("jobDefinitions")
            config = ((found or [{}])[0].get("containerProperties") or {}).get("logConfiguration")
        options = (config or {}).get("options") or {}
        return options.get("awslogs-group", DEFAULT_LOG_GROUP) if (config or {}).get("logDriver", "awslogs") == \
            "awslogs" else DEFAULT_LOG_GROUP

    def _streams(self, d: dict) -> tuple[str, list[str]]:
        container = d.get("container") or {}
        group = self._log_group(d)
        streams = [a["container"]["logStreamName"] for a in d.get("attempts") or []
                   if (a.get("container") or {}).get("logStreamName")]
        if container.get("logStreamName") and container["logStreamName"] not in streams:
            streams.append(container["logStreamName"])
        return group, streams

    def logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Lines "[attempt N] message" of each attempt's stream in turn; with follow, polls
        until the job has ended and a last read finds nothing new."""
        from botocore.exceptions import ClientError

        tokens: dict[str, str | None] = {}
        terminal = False
        while True:
            d = self._describe(job_name)
            group, streams = self._streams(d)
            seen = 0
            for number, stream in enumerate(streams, 1):
                while True:
                    args = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
                    if tokens.get(stream):
                        args["nextToken"] = tokens[stream]
                    with self._aws("GetLogEvents", job_name=job_name):
                        try:
                            page = self.logs_client.get_log_events(**args)
                        except ClientError as exc:
                            if is_not_found(exc):
                                break  # the stream appears with the attempt's first line
                            raise
                    for event in page.get("events", []):
                        seen += 1
                        yield f"[attempt {number}] {event.get('message', '').rstrip()}"
                    token = page.get("nextForwardToken")
                    if not token or token == tokens.get(stream):
                        break
                    tokens[stream] = token
            if not follow or (terminal and not seen):
                return
            terminal = status_of(d["status"]).is_terminal()
            self.sleep(self.poll_seconds)

    def has_logs(self, job_name: str) -> bool:
        return bool(self._streams(self._describe(job_name))[1])

    def no_logs(self, job_name: str) -> str:
        group, streams = self._streams(self._describe(job_name))
        return f"{'no log events' if streams else 'no log streams'} for {job_name} in {group}"

    # --- stop -------------------------------------------------------------------------------

    def stop(self, job_name: str) -> None:
        """TerminateJob: a queued job is cancelled, a running one's container gets SIGTERM."""
        d = self._describe(job_name)
        with self._aws("TerminateJob", job_name=job_name):
            self.batch.terminate_job(jobId=d["jobId"], reason=STOP_REASON)


def results_uri(env: dict[str, str]) -> str:
    """Where a job submitted elsewhere writes results.json, from its environment: SubmitJob
    names no output prefix but the source archive's (`locations.output_of_source`)."""
    from orchestrator import locations

    job = json.loads(json.loads(env[HYPERPARAMETERS_ENV])["sagemaker_job_name"])
    return locations.results_uri(locations.output_of_source(env[CODE_URI_ENV]), job)
