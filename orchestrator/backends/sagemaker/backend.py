"""The SageMaker backend: submit, status, logs and stop of training jobs through boto3.

Contract:
- Clients (sagemaker, s3, logs) come from the constructor; `connect(region)` builds them with
  botocore's retry config (adaptive mode, several attempts), so throttling is retried by
  botocore itself before it ever reaches us.
- `submit` follows the ledger's intent-first protocol: the row (with the exact request) is
  written before anything in AWS changes; the source archive (the job's `code` channel, which
  the container entrypoint unpacks) is uploaded only when its content-addressed key is absent;
  then `CreateTrainingJob`; then the row moves to
  `submitted`. A row left in `submitting` (a process killed between intent and create) is
  reconciled with `DescribeTrainingJob` on the next submit: an existing job carrying our
  spec-hash tag is adopted (`Submitted.created` is False), never created a second time. A
  row already `submitted` or later is returned as is. A row in `planned` (written ahead by a
  caller that wants its sweep/trial ids on it, or left by a create that AWS refused with a
  4xx) is submitted. A 5xx or transport failure of the create leaves `submitting` behind,
  since the job may exist.
- `status` maps SageMaker's states onto ours through one table (`status_of`) and moves the
  ledger row forward as a side effect. The job's tags are the ones its ledger row's request
  gave CreateTrainingJob, ListTags only for a job the ledger does not hold. `statuses` asks
  about many jobs at once: DescribeTrainingJob of each on a few worker threads (`DESCRIBE_THREADS`),
  everything else (errors, tags, the ledger) on the calling thread.
- `logs` merges the CloudWatch streams of every host in timestamp order; with `follow` it
  polls (through the injected `sleep`) until the job is terminal and no new events arrive.
- Every botocore error is translated in one place (`cloud_errors.translate`) into our
  errors with hints.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import ClassVar

from orchestrator.aws_errors import is_definite_refusal, is_not_found, is_transient, kind_of
from orchestrator.backends import registry
from orchestrator.backends.cloud import CloudBackend
from orchestrator.backends.cloud_errors import translate
from orchestrator.backends.job import JobStatus, Submitted, record_status
from orchestrator.errors import BackendError, OrchestratorError
from orchestrator.lifecycle import IN_FLIGHT, Status
from orchestrator.names import TAG_SPEC_HASH

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# DescribeTrainingJob calls in flight at once in `statuses`. Assumed: no page states
# SageMaker's API rate limits, so a small pool; botocore's retries (adaptive mode, `aws.client`)
# absorb a throttled call. Below botocore's default connection pool (10) of the client, which
# is thread safe ("Low-level clients are thread safe", boto3 guide, "Multithreading or
# multiprocessing with clients").
DESCRIBE_THREADS = 8
# `statuses` of at least this many jobs whose names share a prefix this long (a sweep's jobs
# share its `Identity.job_prefix`) first reads the ended ones with Search, 100 a call
# (`_ended_in_bulk`); a shorter prefix could page over most of the account's jobs.
SEARCH_AT_LEAST = 10
SEARCH_PREFIX_CHARS = 8

# SageMaker's SecondaryStatus values that mean "the job exists but no training step runs yet".
_STARTING = frozenset({
    "Starting", "LaunchingMLInstances", "PreparingTrainingStack", "Downloading",
    "DownloadingTrainingImage", "Restarting", "Interrupted",
})
# TrainingJobStatus -> ours, for every status except InProgress (which depends on the secondary).
_PRIMARY = {"Completed": Status.COMPLETED, "Failed": Status.FAILED, "Stopping": Status.STOPPING,
            "Stopped": Status.STOPPED}


def _epoch(value) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def status_of(primary: str, secondary: str | None) -> Status:
    """The one table from SageMaker's (TrainingJobStatus, SecondaryStatus) to our status."""
    if primary in _PRIMARY:
        return _PRIMARY[primary]
    if primary == "InProgress":
        if secondary == "Pending":
            return Status.PENDING
        if secondary in _STARTING:
            return Status.STARTING
        if secondary == "Stopping":
            return Status.STOPPING
        return Status.RUNNING
    raise BackendError(f"SageMaker reported an unknown training job status {primary!r}",
                       hint="the orchestrator may be older than the service; please report it")


_STREAM_HOST = re.compile(r"^(.+-\d+)-\d+$")


def host_of(stream_name: str, job_name: str) -> str:
    """"algo-1" from the stream "<job>/algo-1-1700000000"."""
    rest = stream_name[len(job_name) + 1:] if stream_name.startswith(job_name + "/") else stream_name
    found = _STREAM_HOST.match(rest)
    return found.group(1) if found else rest


class _Cursor:
    """Where we are in one log stream; reading resumes from the last forward token."""

    def __init__(self, logs_client, stream: str, host: str, aws):
        self.logs = logs_client
        self.stream = stream
        self.host = host
        self.token: str | None = None
        self._aws = aws

    def read(self, seq: int) -> Iterator[tuple[int, int, str, str]]:
        """(timestamp, seq, host, message) of events after the cursor, in stream order."""
        while True:
            args = {"logGroupName": LOG_GROUP, "logStreamName": self.stream, "startFromHead": True}
            if self.token:
                args["nextToken"] = self.token
            with self._aws("GetLogEvents"):
                page = self.logs.get_log_events(**args)
            for event in page.get("events", []):
                seq += 1
                yield (event.get("timestamp", 0), seq, self.host, event.get("message", "").rstrip("\n"))
            nxt = page.get("nextForwardToken")
            if not nxt or nxt == self.token:
                return
            self.token = nxt


class SageMakerBackend(CloudBackend):
    """Training jobs on Amazon SageMaker. See the module docstring for the contract."""

    name: ClassVar[str] = "sagemaker"
    service: ClassVar[str] = "sagemaker"
    service_title: ClassVar[str] = "SageMaker"
    runs_in: ClassVar[str] = "in SageMaker"
    wait_interval_s: ClassVar[float] = registry.WAIT_INTERVAL_S["sagemaker"]
    sweep_poll_s: ClassVar[float] = registry.SWEEP_POLL_S["sagemaker"]
    operation: ClassVar[tuple[str, str]] = ("sagemaker", "CreateTrainingJob")
    scheduled: ClassVar[str | None] = "orchestrator.backends.sagemaker.scheduled:SageMakerJobs"
    preferences: ClassVar[str | None] = "sent"  # ResourceConfig.InstancePreferences

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tag_cache: dict[str, dict[str, str]] = {}  # job ARN -> its tags (`_tags`)
        self._search_refused = False  # Search answered other than "try again" (`_ended_in_bulk`)

    # --- the spec side (`backends.Backend`) -------------------------------------------------

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[str, str]]:
        from orchestrator.spec.models import NEEDS_ROLE

        return ([("role_arn", NEEDS_ROLE)] if spec.role_arn is None else []) + super().spec_problems(spec)

    @classmethod
    def missing(cls, data) -> list[tuple[tuple[str, ...], str]]:
        from orchestrator.spec.models import NEEDS_ROLE

        return ([(("role_arn",), NEEDS_ROLE)] if data.get("role_arn") is None else []) + super().missing(data)

    @classmethod
    def runs(cls, spec, facts) -> bool:
        from orchestrator import catalog

        return spec.instance.type in catalog.training_instance_types()

    @classmethod
    def rules(cls, spec, target, estimate, priced) -> list:
        from orchestrator.backends.sagemaker import rules

        return rules.check(spec, target, estimate, priced)

    @classmethod
    def estimate(cls, spec, target):
        from orchestrator.backends.sagemaker import billing

        return billing.estimate(spec, target)

    @classmethod
    def build_request(cls, spec, **parts) -> dict:
        from orchestrator.backends.sagemaker import request

        return request.build(spec, **parts)

    @classmethod
    def quota_needs(cls, spec) -> list:
        from orchestrator import preferences, quotas

        found = preferences.choices(spec)
        ways = [(c.type, c.count or spec.instance.count) for c in found] or [(spec.instance.type, spec.instance.count)]
        usage = "spot training job usage" if spec.instance.spot else "training job usage"
        return [quotas.Need(quotas.SAGEMAKER, f"{t} for {usage}", t, n, "instances") for t, n in ways]

    @property
    def sm(self):
        """The SageMaker client."""
        return self.client

    # --- submit ---------------------------------------------------------------------------

    def submit(self, prepared) -> Submitted:
        """Create the job `prepared` describes, once. See the module docstring."""
        from botocore.exceptions import BotoCoreError, ClientError

        name = prepared.job_name
        done = self._begin_submit(prepared)
        if done is not None:
            return done
        # This call just wrote the intent, or an earlier one died after writing it: only
        # SageMaker knows whether the job was created in between.
        existing = self._describe_or_none(name)
        if existing is not None:
            return self._adopt(existing, prepared)

        try:
            self.upload_source(prepared)
        except OrchestratorError as exc:
            # CreateTrainingJob was never called, so no job exists: a later submit (after the
            # bucket or credentials are fixed) tries again.
            self._not_submitted(name, exc.message)
            raise
        resources = prepared.request.get("ResourceConfig", {})
        prefs = resources.get("InstancePreferences") or [{}]
        instance_type = resources.get("InstanceType") or prefs[0].get("InstanceType")
        try:
            response = self.sm.create_training_job(**prepared.request)
        except (ClientError, BotoCoreError) as exc:
            if kind_of(exc) == "conflict":
                existing = self._describe_or_none(name)
                if existing is not None:
                    return self._adopt(existing, prepared)
            error = translate(exc, operation="CreateTrainingJob", job_name=name, region=self.region,
                              instance_type=instance_type)
            if is_definite_refusal(exc):
                self._not_submitted(name, error.message)  # refused, so nothing exists
            raise error from exc
        self.ledger.transition(name, "submitted", expect=("submitting", "planned"))
        return Submitted(name, created=True, arn=response.get("TrainingJobArn"))

    def _adopt(self, described: dict, prepared) -> Submitted:
        """Take over an existing job of this name if it carries our spec-hash tag."""
        name = prepared.job_name
        arn = described.get("TrainingJobArn")
        ours = {t["Key"]: t["Value"] for t in prepared.request.get("Tags", [])}.get(TAG_SPEC_HASH,
                                                                                     prepared.spec_hash)
        theirs = self._tags(arn, name).get(TAG_SPEC_HASH) if arn else None
        if theirs != ours:
            self._not_submitted(name, "name taken by another job")
            raise BackendError(
                f"a SageMaker training job named {name} already exists in {self.region} and was not "
                f"created from this spec (its {TAG_SPEC_HASH} tag is {theirs!r})",
                hint="job names are unique per account and region; change the spec's name")
        self.ledger.transition(name, "submitted", expect=("submitting", "planned"))
        return Submitted(name, created=False, arn=arn)

    # --- status -----------------------------------------------------------------------------

    def _describe(self, job_name: str) -> dict:
        with self._aws("DescribeTrainingJob", job_name=job_name):
            return self.sm.describe_training_job(TrainingJobName=job_name)

    def _describe_or_none(self, job_name: str) -> dict | None:
        from botocore.exceptions import ClientError

        with self._aws("DescribeTrainingJob", job_name=job_name):
            try:
                return self.sm.describe_training_job(TrainingJobName=job_name)
            except ClientError as exc:
                if is_not_found(exc):
                    return None
                raise

    def job_names(self, containing: str, *, in_flight: bool = False) -> list[str]:
        """Names of the training jobs whose name contains `containing` (ListTrainingJobs
        NameContains, every page), only those InProgress with `in_flight`. A filtered list still
        pages over every job of the account: "the MaxResults number of training jobs are first
        retrieved ignoring the StatusEquals parameter and then they are filtered" (SageMaker API
        Reference, ListTrainingJobs), so its cost grows with the account's jobs: sweeps list once
        per runner, never per round."""
        names: list[str] = []
        args: dict = {"NameContains": containing, "MaxResults": 100}
        if in_flight:
            args["StatusEquals"] = "InProgress"
        while True:
            with self._aws("ListTrainingJobs"):
                page = self.sm.list_training_jobs(**args)
            names.extend(j["TrainingJobName"] for j in page.get("TrainingJobSummaries", []))
            token = page.get("NextToken")
            if not token or token == args.get("NextToken"):
                return names
            args["NextToken"] = token

    def describe_all(self, containing: str) -> dict[str, JobStatus]:
        """`describe` of every training job whose name contains `containing`, 100 a call
        (`_searched`), by name."""
        return {name: self._job_status(job, tags={}) for name, job in self._searched(containing).items()}

    def _searched(self, containing: str, max_pages: int | None = None) -> dict[str, dict]:
        """Every training job whose name contains `containing`, as Search gives it: Search
        (Resource TrainingJob) with the filter TrainingJobName Contains `containing`
        ("Contains: The value of Name contains the string Value. Only supported for text
        properties.", SageMaker API Reference, Filter), every page. Each result's TrainingJob
        ("The properties of a training job.", SearchRecord) has the members of
        DescribeTrainingJob's answer that `_job_status` reads (TrainingJob: TrainingJobArn,
        TrainingJobStatus, SecondaryStatus, FailureReason, BillableTimeInSeconds,
        TrainingTimeInSeconds, EnableManagedSpotTraining, ResourceConfig, the times). Assumed,
        no page says how fresh the search index is: a job just created may be missing and a
        running one behind, so callers trust ended jobs only and describe the others. The most
        recently modified first (SortBy "The default is LastModifiedTime", SortOrder "The
        default is Descending", Search API Reference; both sent), `max_pages` pages at most."""
        found: dict[str, dict] = {}
        args: dict = {"Resource": "TrainingJob", "MaxResults": 100, "SortBy": "LastModifiedTime",
                      "SortOrder": "Descending", "SearchExpression": {
                          "Filters": [{"Name": "TrainingJobName", "Operator": "Contains", "Value": containing}]}}
        for _ in range(max_pages) if max_pages is not None else iter(int, 1):
            with self._aws("Search"):
                page = self.sm.search(**args)
            for result in page.get("Results", []):
                job = result.get("TrainingJob")
                if job and containing in job.get("TrainingJobName", ""):
                    found[job["TrainingJobName"]] = job
            token = page.get("NextToken")
            if not token or token == args.get("NextToken"):
                break
            args["NextToken"] = token
        return found

    def _ended_in_bulk(self, names: list[str]) -> dict[str, dict]:
        """Of `names`, those Search shows ended (`_searched` of their common prefix), when there
        are SEARCH_AT_LEAST of them sharing SEARCH_PREFIX_CHARS; {} otherwise, and when Search
        fails (a policy without sagemaker:Search: each job is described, as before). A refusal
        is remembered: the next refresh does not ask again. At most one page more than `names`
        fill: a job's LastModifiedTime is "when the status of the training job was last
        modified" (DescribeTrainingJob), so the jobs that ended since the last refresh come
        before the sweep's jobs recorded earlier, and a long sweep's round stays a page or two
        however many of its jobs have ended; one not among them is described."""
        import os

        prefix = os.path.commonprefix(names) if len(names) >= SEARCH_AT_LEAST else ""
        if len(prefix) < SEARCH_PREFIX_CHARS or self._search_refused:
            return {}
        try:
            found = self._searched(prefix, max_pages=-(-len(names) // 100) + 1)
        except BackendError as exc:
            self._search_refused = not is_transient(exc)
            return {}
        wanted = set(names)
        return {name: job for name, job in found.items() if name in wanted
                and status_of(job.get("TrainingJobStatus", ""), job.get("SecondaryStatus")).is_terminal()}

    def exists(self, job_name: str) -> bool:
        """Whether SageMaker has a training job of this name (DescribeTrainingJob)."""
        return self._describe_or_none(job_name) is not None

    def _tags(self, arn: str, job_name: str) -> dict[str, str]:
        """The job's tags (ListTags, every page), asked once per job and backend: the tags the
        orchestrator reads are the ones CreateTrainingJob set, so a sweep's round asks
        DescribeTrainingJob alone for a job it already knows (calls in proportion to the jobs
        in flight, docs/BENCHMARKS.md); `status` reads them from the ledger's request when it
        holds the job (`_own_tags`), so a new process asks no ListTags either."""
        cache = self._tag_cache
        if arn in cache:
            return dict(cache[arn])
        tags: dict[str, str] = {}
        args = {"ResourceArn": arn}
        while True:
            with self._aws("ListTags", job_name=job_name):
                page = self.sm.list_tags(**args)
            tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
            if not page.get("NextToken"):
                cache[arn] = dict(tags)
                return tags
            args["NextToken"] = page["NextToken"]

    def _own_tags(self, arn: str, job_name: str) -> dict[str, str]:
        """The job's tags: those its ledger row's request gave CreateTrainingJob when this
        backend's ledger holds it (no call: the tags the orchestrator reads are those, `_tags`),
        else ListTags (`_tags`)."""
        entry = self.ledger.get(job_name)
        if entry is not None and entry.backend == self.name and entry.region == self.region \
                and isinstance(entry.request, dict) and isinstance(entry.request.get("Tags"), list):
            return {t["Key"]: t["Value"] for t in entry.request["Tags"]}
        return self._tags(arn, job_name)

    def status(self, job_name: str) -> JobStatus:
        """The job as SageMaker sees it, in our words; moves the ledger row forward."""
        described = self._describe(job_name)
        status = self._job_status(described, tags=self._own_tags(described["TrainingJobArn"], job_name))
        self._record(status)
        return status

    def statuses(self, job_names: Iterable[str]) -> dict[str, JobStatus | OrchestratorError]:
        """`status` of each job (`Backend.statuses`): those Search shows ended are read in bulk
        (`_ended_in_bulk`: a sweep's jobs, 100 a call), the others described
        (DescribeTrainingJob) on up to DESCRIBE_THREADS threads, which make the calls and
        nothing else (none after one failed other than "no such job"); each answer is then
        translated, tagged and recorded here, on the calling thread (the ledger's connection is
        never used from another), in the order given."""
        import threading

        from botocore.exceptions import BotoCoreError, ClientError

        names = list(dict.fromkeys(job_names))
        ended = self._ended_in_bulk(names)
        failed = threading.Event()  # a call failed other than "no such job": ask no more

        def ask(name: str):
            if name in ended:
                return ended[name]
            if failed.is_set():
                return None
            try:
                return self.sm.describe_training_job(TrainingJobName=name)
            except (ClientError, BotoCoreError) as exc:
                if not (isinstance(exc, ClientError) and is_not_found(exc)):
                    failed.set()
                return exc

        if len(names) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(DESCRIBE_THREADS, len(names))) as pool:
                try:
                    described = list(pool.map(ask, names))
                except BaseException:
                    failed.set()  # Ctrl-C, a bug: the calls not made yet return at once
                    raise
        else:
            described = [ask(name) for name in names]
        answers: dict[str, JobStatus | OrchestratorError] = {}
        for name, d in zip(names, described, strict=True):
            if d is None:
                continue  # not asked (`Backend.statuses`)
            try:
                if isinstance(d, Exception):
                    with self._aws("DescribeTrainingJob", job_name=name):
                        raise d  # our error for it (UnknownJob, OtherAccount, BackendError...)
                status = self._job_status(d, tags=self._own_tags(d["TrainingJobArn"], name))
                self._record(status)
                answers[name] = status
            except OrchestratorError as exc:
                answers[name] = exc
        return answers

    def describe(self, job_name: str) -> JobStatus | None:
        """DescribeTrainingJob in our words (no ListTags, nothing recorded); None when SageMaker
        has no job of this name."""
        described = self._describe_or_none(job_name)
        return None if described is None else self._job_status(described, tags={})

    def _job_status(self, d: dict, tags: dict[str, str]) -> JobStatus:
        name = d["TrainingJobName"]
        secondary = d.get("SecondaryStatus")
        ours = status_of(d["TrainingJobStatus"], secondary)
        resources = d.get("ResourceConfig", {})
        groups = resources.get("InstanceGroups") or []
        # With InstancePreferences, SelectedInstanceType/Count are what runs and is billed
        # (botocore's DescribeTrainingJob ResourceConfig); before SageMaker selects, the first choice.
        prefs = resources.get("InstancePreferences") or []
        instance_type = (resources.get("SelectedInstanceType") or resources.get("InstanceType")
                         or (groups[0].get("InstanceType") if groups else None)
                         or (prefs[0].get("InstanceType") if prefs else None))
        count = (resources.get("SelectedInstanceCount") or resources.get("InstanceCount")
                 or sum(g.get("InstanceCount", 0) for g in groups)
                 or (prefs[0].get("InstanceCount") if prefs else None) or None)
        output = d.get("ModelArtifacts", {}).get("S3ModelArtifacts")
        pool = d.get("WarmPoolStatus") or {}
        if not output and d.get("OutputDataConfig", {}).get("S3OutputPath"):
            output = f"{d['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{name}/output/model.tar.gz"
        status = JobStatus(
            job_name=name, status=ours, secondary=secondary, failure_reason=d.get("FailureReason"),
            billable_seconds=d.get("BillableTimeInSeconds"), training_seconds=d.get("TrainingTimeInSeconds"),
            instance_type=instance_type, instance_count=count, spot=bool(d.get("EnableManagedSpotTraining")),
            created=_epoch(d.get("CreationTime")), started=_epoch(d.get("TrainingStartTime")),
            ended=_epoch(d.get("TrainingEndTime")), output_uri=output, tags=tags,
            warm_pool=pool.get("Status"), warm_pool_retained_s=pool.get("ResourceRetainedBillableTimeInSeconds"),
            warm_pool_reused_by=pool.get("ReusedByJob"),
        )
        return status

    def _recorded_results_uri(self, job_name: str) -> str:
        """Under the job's S3OutputPath, its output prefix (`locations.results_uri`)."""
        from orchestrator import locations

        return locations.results_uri(self._describe(job_name)["OutputDataConfig"]["S3OutputPath"], job_name)

    def _record(self, status: JobStatus) -> None:
        record_status(self.ledger, self.name, status, expect=tuple(IN_FLIGHT))

    # --- logs ---------------------------------------------------------------------------------

    def logs(self, job_name: str, follow: bool = False) -> Iterator[str]:
        """Lines "[host] message" of every host's stream, merged by timestamp. With follow,
        polls every `poll_seconds` until the job is terminal and a last read finds nothing new."""
        self._describe(job_name)  # an unknown job is an error, not an empty log
        cursors: dict[str, _Cursor] = {}
        terminal = False
        while True:
            for stream in self.log_streams(job_name):
                if stream not in cursors:
                    cursors[stream] = _Cursor(self.logs_client, stream, host_of(stream, job_name), self._aws)
            # Each stream is in time order; a k-way merge keeps the whole output in time order
            # without holding every event in memory.
            merged = heapq.merge(*(c.read(i << 40) for i, c in enumerate(cursors.values())))
            seen = 0
            for _, _, host, message in merged:
                seen += 1
                yield f"[{host}] {message}"
            if not follow or (terminal and not seen):
                return
            if not terminal:
                terminal = status_of(*self._primary(job_name)).is_terminal()
            self.sleep(self.poll_seconds)

    def _primary(self, job_name: str) -> tuple[str, str | None]:
        d = self._describe(job_name)
        return d["TrainingJobStatus"], d.get("SecondaryStatus")

    def has_logs(self, job_name: str) -> bool:
        """Whether the job has a CloudWatch log stream yet."""
        return bool(self.log_streams(job_name))

    def no_logs(self, job_name: str) -> str:
        what = "no log events" if self.log_streams(job_name) else "no log streams"
        return f"{what} for {job_name} in {LOG_GROUP}"

    def log_streams(self, job_name: str) -> list[str]:
        """Names of the job's CloudWatch log streams in LOG_GROUP; none before a host logged."""
        from botocore.exceptions import ClientError

        names: list[str] = []
        args = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{job_name}/"}
        while True:
            with self._aws("DescribeLogStreams", job_name=job_name):
                try:
                    page = self.logs_client.describe_log_streams(**args)
                except ClientError as exc:
                    if is_not_found(exc):
                        return names  # no job has logged in this region yet
                    raise
            names.extend(s["logStreamName"] for s in page.get("logStreams", []))
            token = page.get("nextToken")
            if not token or token == args.get("nextToken"):
                return names
            args["nextToken"] = token

    # --- stop -------------------------------------------------------------------------------------

    def stop(self, job_name: str) -> None:
        """Ask SageMaker to stop the job; it passes through Stopping to Stopped."""
        with self._aws("StopTrainingJob", job_name=job_name):
            self.sm.stop_training_job(TrainingJobName=job_name)
