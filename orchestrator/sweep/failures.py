"""Why a sweep's job failed, and what the runner does about it.

Contract:
- `failure_kind(detail)` reads a failure from its ledger detail: a failure the runner decided
  starts with "[kind] "; one the backend reported is classified from its reason text
  (SageMaker's FailureReason; AWS Batch's status reason, container reason and exit code) by
  the phrases of `failure_phrases.KINDS` (`reason_kinds` makes their regular expressions).
  capacity, spot, internal and lost are retryable (`RETRYABLE`); user errors (validation,
  access denied, an algorithm error) never are; budget marks a retry the budget refused.
- `submit_error_kind(exc)` sorts an error of the runner's own calls by its
  `aws_errors.classify` kind (an AWS error, not a job's reason: a different concept from
  `failure_kind` above): setup (no usable credentials, or access denied: the run stops at once),
  throttled, quota and transient (wait and try again: `WAIT_KINDS`), capacity (fail over), user
  (this request is refused).
- `STOPPED_*` are the details `sweep stop` leaves on the rows it stops; a runner step
  reopens those rows.
"""

from __future__ import annotations

import re

from orchestrator import aws_errors
from orchestrator.errors import BackendError, OrchestratorError
from orchestrator.sweep import failure_phrases

# Failure kinds. The ledger's `detail` of a failure the runner decided starts with "[kind] ";
# a failure reported by the backend is classified from its reason text by the phrases of
# `failure_phrases.KINDS` (the cloud schedule's Choice rules are made from the same table).
RETRYABLE = frozenset({"capacity", "spot", "internal", "lost"})
# Where the phrases come from. AWS Batch's reasons, as its backend reports them ("<statusReason>;
# <container reason>; exit code N", `backends.batch`), come first: they are more specific.
# - A queue or compute environment that cannot run the job (AWS Batch user guide, "Jobs stuck
#   in a RUNNABLE status": MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE,
#   MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT, ..._EC2_INSTANCE_CONFIGURATION_UNSUPPORTED,
#   ..._SERVICE_ROLE_PERMISSIONS, and "ACTION_REQUIRED - CE(s) associated with the job queue
#   are invalid"), also once the queue's jobStateTimeLimitActions cancelled the job ("Canceled by
#   JobStateTimeLimit action due to reason: MISCONFIGURATION:..."): the stack must change, a
#   retry would wait the same way. Checked before capacity, whose word some of them contain.
# - The instance went away: "Host EC2 (instance i-...) terminated." (a spot reclaim or an
#   instance failure; the user guide's "Automated job retries" matches it with onStatusReason
#   "Host EC2*", as our retry strategy does, `backends.batch.request.HOST_TERMINATED`).
# - No capacity: "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity
#   requested for instance type ...", and after the time limit "Canceled by JobStateTimeLimit
#   action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" (user guide, "Jobs stuck in
#   RUNNABLE due to capacity"): the general capacity words match both.
# - The image could not be pulled (the ECS container reason CannotPullContainerError): a
#   repository or tag that does not exist, or no permission to pull, is the stack's to fix
#   (user); anything else (a registry timeout, throttling) passes (internal). ECS's errors
#   starting a task (CannotStartContainerError, CannotInspectContainerError, DockerTimeoutError,
#   "Task failed to start") are the agent's, retried like an internal error.
# - Anything else, launch.py's verdict included ("Essential container in task exited; exit
#   code 1": training or the launcher failed, and says why in the job's log and results.json;
#   137 or 143: killed for memory or at the attempt timeout), is the user's: a retry would fail
#   the same way.


def reason_kinds(table=failure_phrases.KINDS) -> tuple[tuple[str, re.Pattern], ...]:
    """(kind, regular expression) of each entry of a phrase table, in its order."""
    return tuple((kind, failure_phrases.regex(phrases)) for kind, phrases in table)


_REASON_KINDS = reason_kinds()
_KIND_PREFIX = re.compile(r"^\[([a-z]+)\] ")

# Details `stop` leaves on the rows it stops; a runner step reopens these rows (see the
# `sweep.runner` docstring). STOPPED_LEGACY is what earlier versions wrote in both cases.
STOPPED_BEFORE_SUBMISSION = "[stopped] by sweep stop before submission"
STOPPED_IN_FLIGHT = "[stopped] by sweep stop while in flight"
STOPPED_LEGACY = "[stopped] by sweep stop"


def failure_kind(detail: str | None) -> str:
    """The kind of a failure: capacity, spot, internal, lost (retryable) or user, budget."""
    text = detail or ""
    found = _KIND_PREFIX.match(text)
    if found:
        return found.group(1)
    for kind, pattern in _REASON_KINDS:
        if pattern.search(text):
            return kind
    return "user"


_BUDGET_REFUSAL = re.compile(r"^\[budget\] (.*?); a retry would take the sweep's cost bound to ", re.S)


# A job's failure whose reason names its store or disk, not its code: the bucket gone or
# refused, or no space left (the reason launch.py reports names the cause).
_ENVIRONMENT_REASON = re.compile(r"NoSuchBucket|bucket does not exist|No space left on device|disk is full|"
                                 r"\bS3\b.{0,80}(AccessDenied|Access Denied|Forbidden)", re.I | re.S)


def outside_the_job(detail: str | None) -> bool:
    """Whether a failure came from outside the job's own code (what `sweep resume
    --retry-failed` runs again): one the runner decided (the create refused, the job lost, a
    retry the budget refused: each "[kind] "-prefixed, `sweep stop`'s excepted), a retryable
    kind (capacity, spot, internal), or a reason naming the store or the disk. A job's own
    error (an algorithm error, a bad spec SageMaker reported) is not."""
    text = detail or ""
    found = _KIND_PREFIX.match(text)
    if found:
        return found.group(1) != "stopped"
    return failure_kind(text) in RETRYABLE or bool(_ENVIRONMENT_REASON.search(text))


def budget_refused_reason(detail: str | None) -> str | None:
    """The failure a "[budget]" row's retry was refused after, or None for any other row."""
    found = _BUDGET_REFUSAL.match(detail or "")
    return found.group(1) if found else None


def submit_error_kind(exc: OrchestratorError) -> str:
    """What a failed call of the runner means, from its `aws_errors.classify` kind: setup (no
    usable credentials, or access denied: every call fails the same way, so the sweep stops
    with the error), throttled, quota (wait and try again), capacity (fail over), user (this
    request is refused: never retried), transient (5xx, no connection, no answer: the job may
    or may not exist, so try again and reconcile)."""
    if not isinstance(exc, BackendError):
        return "user"
    failure = aws_errors.classify(exc)
    if failure is None:  # no code, no status: nothing says the request was refused
        return "transient"
    if failure.kind in ("throttled", "quota", "capacity"):
        return failure.kind
    if failure.account_wide:
        return "setup"
    if "already exists" in exc.message:  # our own refusal of a name taken by another spec
        return "user"
    return "user" if failure.permanent else "transient"


def attempt_tag(info: dict, own_type: str) -> str:
    """The TAG_ATTEMPT value of a resubmission from its attempt record."""
    if info.get("failover"):
        return f"failover:{info.get('from_type') or own_type}"
    return "resumed" if info.get("resumed") else "retry"


# Kinds the runner waits out and tries again (at most `Runner.max_transient_retries` times in a row).
WAIT_KINDS = ("throttled", "quota", "transient")
