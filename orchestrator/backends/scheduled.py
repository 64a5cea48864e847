"""What a cloud backend gives a cloud schedule (`schedule.statemachine`): the states that create
and follow one of its jobs inside the schedule's child workflow, its job statuses, its
retryable errors, its IAM statements and its source upload. The schedule compiler names no AWS
service: it asks a trial's backend for its `ScheduledJobs` (`part_of`).

Contract:
- `part_of(backend_name)` is the backend's `ScheduledJobs`, or `NotScheduled` (InputError,
  exit 2) with the backend's own reason when it cannot run in a cloud schedule
  (`Backend.schedule_refusal`).
- A `ScheduledJobs` compiles, for each `group(request)` (requests whose states are the same),
  the states `states(group, request, names)`: entered at `names.create(group)` with the
  child's input holding the attempt's request, rendered, at `$.rendered.request`; they end in
  `names.trial_end` (the job ended well, or stopped), `names.why(group)` (failed: a Choice
  of `failure_rules` on `reason_paths`, made by the compiler), `names.not_created` (the
  create was refused for good: Catch) or `names.poll_failed` (the describe failed for good).
  Describe results go to `$.described` as {job, status, raw, at, attempt}.
- `request_for_sfn(request)` is the request as the AWS SDK integration takes it (PascalCase
  members): what the item carries.
- `statements(requests, job_prefix)`: the state machine role's least-privilege statements for
  creating, following and tagging those requests' jobs (CloudFormation intrinsics allowed).
- `upload(prepared, region, clients)` puts the attempt's source archive where its request
  names it.
- `listing_places(requests)`: what `listed` needs besides the job-name prefix to find the jobs
  those requests make (strings, e.g. AWS Batch's queues; none for SageMaker), recorded by the
  deploy in the stack's outputs. `listed(client, prefix, since, places)`: the jobs whose name
  starts with `prefix` created after `since`, by list calls (pages, never one call per job), as
  `Seen`; `reasons(client, names)`: why those failed jobs failed, for a backend whose listing
  does not say (one call per name: the caller bounds how many). `client(service)` gives a
  boto3 client of the schedule's region.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from orchestrator import backoff
from orchestrator.errors import InputError

# The runner's backoff (`orchestrator.backoff`) as ASL's Retry spells it (States Language spec,
# "Retrying after error"): IntervalSeconds and MaxDelaySeconds are whole seconds there. Its
# jitter is "FULL" (a wait anywhere below the ceiling): ASL offers FULL or NONE, not the
# runner's upper half.
RETRY_INTERVAL_S = int(backoff.BASE_S)
RETRY_BACKOFF_RATE = backoff.RATE
RETRY_MAX_DELAY_S = int(backoff.CAP_S)
RETRY_MAX_ATTEMPTS = 10
# Any other error of a task: "States.TaskFailed ... acts as a wildcard that matches any known
# error name except for States.Timeout" (Step Functions developer guide, "Handling errors in
# Step Functions workflows"). A poll is retried on it a few times, then ends its trial.
GENERIC_TASK_ERROR = "States.TaskFailed"
GENERIC_MAX_ATTEMPTS = 4


class NotScheduled(InputError):
    """A backend that cannot run in a cloud schedule; the message says why."""


def retry(errors: list[str], attempts: int = RETRY_MAX_ATTEMPTS) -> dict:
    """One Retrier with the runner's backoff, full jitter."""
    return {"ErrorEquals": list(errors), "IntervalSeconds": RETRY_INTERVAL_S, "BackoffRate": RETRY_BACKOFF_RATE,
            "MaxDelaySeconds": RETRY_MAX_DELAY_S, "MaxAttempts": attempts, "JitterStrategy": "FULL"}


def sdk_errors(service_pascal: str, errors: tuple[str, ...]) -> list[str]:
    """Error names of the AWS SDK integration: "If an AWS SDK integration encounters an error,
    the resulting Error field will be composed of the service name and the error name,
    separated by a period character" (Step Functions developer guide, "Learning to use AWS
    service SDK integrations in Step Functions"), both in Pascal case."""
    return [f"{service_pascal}.{error}" for error in errors]


@dataclass(frozen=True)
class Names:
    """The state names the compiler owns, which a backend's states lead to."""

    trial_end: str = "Trial end"
    not_created: str = "Not created"
    poll_failed: str = "Poll failed"
    wait: str = "Wait"  # waits `$.trial.poll` seconds, then goes to `$.attempt.group`'s describe

    @staticmethod
    def create(group: str) -> str:
        return f"{group} Create"

    @staticmethod
    def describe(group: str) -> str:
        return f"{group} Describe"

    @staticmethod
    def why(group: str) -> str:
        return f"{group} Why"


@dataclass(frozen=True)
class Seen:
    """One job a listing found: its name, its status in its backend's words, when it was
    created (epoch seconds: the latest of two jobs of one name wins) and why it failed when the
    listing says (None: not failed, or the listing does not say: `reasons`)."""

    name: str
    status: str
    created: float = 0.0
    reason: str | None = None


class ScheduledJobs:
    """A cloud backend's part of a cloud schedule (see the module docstring)."""

    backend: ClassVar[str]
    done: ClassVar[tuple[str, ...]]  # statuses that end a trial as it is (ended well, or stopped)
    failed: ClassVar[str]  # the status of a job that failed: its reason decides what comes next
    reason_paths: ClassVar[tuple[str, ...]]  # where a failed job says why, under $.described.raw
    # Members written into the create state as they are, not read from the item: the group then
    # holds their values too. RoleArn is one: moto 5.2.6's ASL grammar reads a "RoleArn.$" key as
    # a Task's Credentials field (a keyword of its lexer), and a sweep's trials share their role.
    literal_members: ClassVar[tuple[str, ...]] = ()
    create_retry: ClassVar[tuple[str, ...]] = ()  # modelled errors a create is retried on
    poll_retry: ClassVar[tuple[str, ...]] = ()  # modelled throttles a describe is retried on

    def group(self, request: dict) -> str:
        """The states group of a request: its backend and the set of top-level members it sends
        (a Task's Parameters name each member; an absent member would fail the path)."""
        import hashlib

        sent = self.request_for_sfn(request)
        key = json.dumps([sorted(sent), {m: sent[m] for m in self.literal_members if m in sent}], sort_keys=True)
        return f"{self.backend}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"

    def create_parameters(self, request: dict) -> dict:
        """The create's Parameters: each member read from the rendered request, but
        `literal_members`, written as they are."""
        return {(m if m in self.literal_members else f"{m}.$"): (v if m in self.literal_members
                                                                  else f"$.rendered.request.{m}")
                for m, v in request.items()}

    def request_for_sfn(self, request: dict) -> dict:
        return request

    def states(self, group: str, request: dict, names: Names) -> dict[str, dict]:
        raise NotImplementedError

    def statements(self, requests: list[dict], job_prefix: str) -> list[dict]:
        raise NotImplementedError

    def upload(self, prepared, region: str, clients: dict) -> bool:
        raise NotImplementedError

    def listing_places(self, requests: list[dict]) -> list[str]:
        return []

    def listed(self, client, prefix: str, since, places: list[str]) -> list[Seen]:
        raise NotImplementedError

    def reasons(self, client, names: list[str]) -> dict[str, str]:
        return {}

    def _connected(self, backend_class, region: str, clients: dict):
        """One backend per region for this part's uploads (its clients built once per part:
        `part_of` makes a new part for each caller)."""
        found = self.__dict__.setdefault("_backends", {})
        if region not in found:
            found[region] = backend_class.connect(region, **clients)
        return found[region]

    # Shared by the backends' states ---------------------------------------------------------

    def check(self, group: str, names: Names) -> dict:
        """The Choice after a describe: done -> trial end, failed -> why, else wait."""
        return {"Type": "Choice",
                "Choices": [*({"Variable": "$.described.status", "StringEquals": s, "Next": names.trial_end}
                              for s in self.done),
                            {"Variable": "$.described.status", "StringEquals": self.failed,
                             "Next": names.why(group)}],
                "Default": names.wait}

    def describe_guard(self) -> dict:
        """Retry and Catch of a describe: the modelled throttles with the runner's backoff, then
        any other task error a few times; what is left ends the trial, never the run."""
        return {"Retry": [retry(list(self.poll_retry)), retry([GENERIC_TASK_ERROR], GENERIC_MAX_ATTEMPTS)],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": Names.poll_failed}]}

    def create_guard(self) -> dict:
        guard: dict[str, Any] = {"Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error",
                                            "Next": Names.not_created}]}
        if self.create_retry:
            guard["Retry"] = [retry(list(self.create_retry))]
        return guard


def part_of(backend_name: str) -> ScheduledJobs:
    """The backend's part of a cloud schedule; NotScheduled with its reason when it has none."""
    import importlib

    from orchestrator.backends import registry

    cls = registry.backend_class(backend_name)
    where = getattr(cls, "scheduled", None)
    if where is None:
        raise NotScheduled(f"{backend_name} trials cannot run in a cloud schedule: "
                           f"{getattr(cls, 'schedule_refusal', 'the backend has no part in one')}",
                           hint="keep this sweep on the laptop path (`schedule run` or `schedule crontab`)")
    module, _, attribute = where.partition(":")
    return getattr(importlib.import_module(module), attribute)()


def arn(service: str, resource: str) -> dict:
    """An ARN in the stack's partition, region and account (CloudFormation pseudo parameters)."""
    return {"Fn::Sub": f"arn:${{AWS::Partition}}:{service}:${{AWS::Region}}:${{AWS::AccountId}}:{resource}"}
