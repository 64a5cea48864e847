"""A planned sweep compiled to an Amazon States Language definition (Step Functions), so a
schedule runs in the cloud with no laptop: pure, one plan in, one definition dict out.

Contract:
- `compile_plan(plan)` takes the sweep's plan made for the tick `PLACEHOLDER_TICK`
  (`placeholder_plan(sweep)`), whose job names and tags carry that tick's label
  (`PLACEHOLDER_LABEL`, 12 digits as every tick label). Each trial's request is embedded as
  the plan prepared it, every string that holds the label rewritten as a `States.Format` of
  the run's label: a run's requests are the plan's with the run's tick in place of the
  placeholder, so its job names keep the plan's length (at most 63, `names.MAX_JOB_NAME`) and
  its jobs read back into the tick sweep `<sweep>-<8 hex>-<run label>` (`names.in_sweep`).
- The run's label is the schedule's fire time when the input carries it (`scheduled_time`,
  which the EventBridge Scheduler target fills with `<aws.scheduler.scheduled-time>`; a
  flexible window or a retried delivery keeps the same label), else the execution's start
  time (`$$.Execution.StartTime`, a run started by hand), in UTC at minute resolution. Two
  runs for the same minute make the same job names, which SageMaker answers ResourceInUse:
  a tick runs at most once, as on the laptop path (for SageMaker trials: see below).
- AWS Batch trials are idempotent by name only in this module's contract, not in AWS's: Batch
  accepts two jobs of one name, so a second run for the same minute submits them again.
- The trials, fixed at deploy (the input cannot add one), run in one inline Map with
  MaxConcurrency = the sweep's concurrency. Each attempt (`attempts`: a trial's first job,
  its retries and failovers, each its own prepared request) is created through the AWS SDK
  integration (`aws-sdk:sagemaker:createTrainingJob`, `aws-sdk:batch:submitJob` with the
  request's member names in PascalCase, as that integration takes them: `sfn_cased`) and
  waited for by a describe / Wait loop (DescribeTrainingJob; DescribeJobs of the submitted
  id), not by the optimised `.sync` integrations: moto's interpreter executes the former, and
  the loop needs no EventBridge managed rule. The loop waits `poll_seconds(plan)`: a minute,
  or longer when a worst-case run's polls would overflow the execution's history.
- SageMaker's create is retried on throttling and quota errors (ResourceLimitExceeded) with
  the sweep runner's backoff (2 s doubling to 300 s, full jitter); a create still refused ends
  its trial as NotCreated (Catch), not the run.
- A job that ends Failed is read as the runner reads it (`failure_rules`: its kind at
  `$.kind`); capacity goes to the next failover type, capacity at the chain's end, spot and
  internal to the next retry, while the trial's graph has one (`Next attempt`); anything else
  ends the trial with its job's status. A Stopped (SageMaker) job ends its trial too: the
  other trials run on.
- Every attempt's source archive (and its job.json) is the placeholder's, shared by every
  run; the container renames the job file to the run's job (`entrypoints.shared.contract.for_run`,
  from the request's job-name hyperparameter), so each run's results.json lands under its
  own name.
- Strings that hold a character intrinsics reserve take those parts from paths (`$.literals`,
  set by the attempt's Start state), large members several attempts send unchanged are kept
  once (`$.shared`): the definition stays within Step Functions' 1 MB (`check_size`).
- A trial whose backend sends no request to an AWS service compiled here (local) is refused
  (InputError): see `service`. The states are keyed by the AWS service the backend's request
  goes to (`Backend.operation`), whose API they call.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

from entrypoints.shared import contract
from orchestrator.errors import InputError
from orchestrator.schedule import attempts, failure_rules

PLACEHOLDER_TICK = datetime(2000, 1, 1, 0, 0, tzinfo=timezone.utc)
# The container takes the run's label from its job name in the same place (`contract.for_run`).
PLACEHOLDER_LABEL = contract.RUN_PLACEHOLDER
# Seconds between describe calls while a job runs, at least: a Standard workflow pays per
# state transition (three or four per poll), so a minute keeps a 10-hour trial near 2,400.
POLL_SECONDS = 60
# One execution's history holds at most 25,000 events (Step Functions quotas, "Maximum
# execution history size"), an inline Map's iterations included: `poll_seconds` lengthens the
# wait of a large sweep so its worst run stays within it. A poll writes at most 11 events (Wait
# entered and exited; describe task entered, scheduled, started, succeeded, exited; Batch's Read
# Pass and the Check Choice entered and exited); an attempt's other states at most 40, a trial's
# Map iteration and routing 20, the run's own states 50.
HISTORY_EVENTS = 25_000
EVENTS_PER_POLL = 11
EVENTS_PER_ATTEMPT = 40
EVENTS_PER_TRIAL = 20
EVENTS_PER_RUN = 50
# The sweep runner's backoff (`sweep.Runner`: base 2 s, doubling, capped at 300 s), as ASL's
# Retry spells it (States Language spec, "Retrying after error": IntervalSeconds, BackoffRate,
# MaxDelaySeconds, JitterStrategy).
RETRY_INTERVAL_S = 2
RETRY_BACKOFF_RATE = 2.0
RETRY_MAX_DELAY_S = 300
RETRY_MAX_ATTEMPTS = 10
# Error names of the aws-sdk integration are "<Service>.<Exception>" (Step Functions developer
# guide, "AWS SDK service integrations": error handling); SageMaker's modelled errors are
# ResourceLimitExceeded (a quota) and throttling. Both spellings of the service are listed:
# moto's interpreter names them after the lower-case API name.
RETRY_ERRORS = tuple(f"{service}.{error}" for service in ("SageMaker", "sagemaker")
                     for error in ("ResourceLimitExceededException", "ThrottlingException"))
THROTTLE_ERRORS = tuple(f"{service}.ThrottlingException" for service in ("SageMaker", "sagemaker")) + (
    "Batch.TooManyRequestsException", "batch.TooManyRequestsException")
# Each AWS service's job states: (ended well, ...), failed. A stopped job ends its trial as it is.
TERMINAL = {"sagemaker": (("Completed", "Stopped"), "Failed"), "batch": (("SUCCEEDED",), "FAILED")}
# Where a failed job says why: SageMaker's FailureReason; AWS Batch's statusReason and its
# container's reason (what `backends.batch` joins for `sweep.failures.failure_kind`), PascalCase
# as the AWS SDK integration returns them.
REASON_PATHS = {"sagemaker": ["$.described.raw.FailureReason"],
                "batch": ["$.described.raw.StatusReason", "$.described.raw.Container.Reason"]}
WHY = {"sagemaker": "Why SageMaker failed", "batch": "Why Batch failed"}
TRIAL_END = "Trial end"
# A request member this long (JSON bytes) that several attempts send unchanged is kept once (`_share`).
SHARE_MIN_BYTES = 200
NOT_CREATED = "Not created"


def placeholder_plan(sweep):
    """The sweep's plan for the placeholder tick (what `compile_plan` embeds)."""
    from orchestrator import sweep as sweeps

    return sweeps.plan(sweep, tick=PLACEHOLDER_TICK)


RESERVED = re.compile(r"[{}'\\]")


def _templated(value: Any, literals: dict[str, str]) -> Any:
    """`value` (a request, or a part of it) with every string holding PLACEHOLDER_LABEL turned
    into a `<key>.$` States.Format of `$.run` (the run's label). A string whose other parts hold
    a character intrinsics reserve (`{`, `}`, `'`, `\\`: the JSON of a hyperparameter
    environment variable) takes those parts from `$.literals`, plain JSON values that
    `literals` collects (the attempt's Start state puts them there), instead of escaping them
    in the template: a path argument is never parsed as a template."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, str) and PLACEHOLDER_LABEL in item:
                pieces = item.split(PLACEHOLDER_LABEL)
                if any(RESERVED.search(p) for p in pieces):
                    names = []
                    for piece in pieces:
                        names.append(f"s{len(literals)}")
                        literals[names[-1]] = piece
                    args = ", $.run, ".join(f"$.literals.{n}" for n in names)
                    out[f"{key}.$"] = f"States.Format('{'{}' * (2 * len(pieces) - 1)}', {args})"
                else:
                    args = ", ".join(["$.run"] * (len(pieces) - 1))
                    out[f"{key}.$"] = f"States.Format('{'{}'.join(pieces)}', {args})"
            else:
                out[key] = _templated(item, literals)
        return out
    if isinstance(value, list):
        if any(isinstance(v, str) and PLACEHOLDER_LABEL in v for v in value):
            # ASL's templates rewrite object members only; no request of ours has one here.
            raise InputError("a list of strings in the request holds the run's label; it cannot be templated")
        return [_templated(v, literals) for v in value]
    return value


def sfn_cased(value: Any, shape) -> Any:
    """`value`, a request of a botocore input `shape`, with every structure member's name in
    PascalCase, as Step Functions' AWS SDK integrations take them even for a camelCase API
    (Step Functions developer guide, "AWS SDK service integrations": API naming conventions).
    Map keys (tags, environment names) are data and stay as they are."""
    kind = getattr(shape, "type_name", None)
    if kind == "structure" and isinstance(value, dict):
        return {key[:1].upper() + key[1:]: sfn_cased(item, shape.members[key]) for key, item in value.items()}
    if kind == "list" and isinstance(value, list):
        return [sfn_cased(item, shape.member) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {key: sfn_cased(item, shape.value) for key, item in value.items()}
    return value


def _batch_shape(operation: str):
    import botocore.session

    return botocore.session.get_session().get_service_model("batch").operation_model(operation).input_shape


def _retry(errors: tuple[str, ...]) -> list[dict]:
    return [{"ErrorEquals": list(errors), "IntervalSeconds": RETRY_INTERVAL_S, "BackoffRate": RETRY_BACKOFF_RATE,
             "MaxDelaySeconds": RETRY_MAX_DELAY_S, "MaxAttempts": RETRY_MAX_ATTEMPTS, "JitterStrategy": "FULL"}]


def poll_seconds(plan) -> int:
    """The wait between describe calls: POLL_SECONDS, or longer when the polls of every trial's
    longest path of attempts (each running its max_run_minutes) would pass the execution's
    history (HISTORY_EVENTS). InputError (exit 2) when even the attempts' own events would."""
    import math

    run_s, fixed = 0, EVENTS_PER_RUN
    for graph in attempts.of_plan(plan).values():
        longest: dict[str, tuple[int, int]] = {}  # key -> (seconds, attempts) of its longest path
        for a in reversed(graph):
            after = [longest[k] for k in (a.on_capacity, a.on_retry) if k is not None]
            seconds, count = max(after, default=(0, 0))
            longest[a.key] = (seconds + a.prepared.spec.max_run_minutes * 60, count + 1)
        seconds, count = longest[graph[0].key]
        run_s += seconds
        fixed += EVENTS_PER_TRIAL + count * EVENTS_PER_ATTEMPT
    room = HISTORY_EVENTS - fixed
    if room <= 0:
        raise InputError(f"a run of sweep {plan.sweep.sweep!r} could make more state transitions than one Step Functions "
                         f"execution's history holds ({HISTORY_EVENTS:,} events: Step Functions quotas)",
                         hint="schedule fewer trials per sweep (split it into several sweeps), or lower max_retries")
    return max(POLL_SECONDS, math.ceil(EVENTS_PER_POLL * run_s / room))


def service(spec) -> str | None:
    """The AWS service a spec's job is created in (its backend's `operation`), when this module
    compiles it; None for a backend whose request no AWS service receives (local)."""
    from orchestrator import backends

    operation = backends.backend_class(spec.backend).operation
    return operation[0] if operation and operation[0] in TERMINAL else None


def _job_states(prefix: str, aws_service: str, attempt, poll_s: int) -> dict[str, dict]:
    """Start, create, describe, check and wait states of one attempt's job in its AWS service."""
    start, create, describe, wait, check = (f"{prefix} {s}" for s in ("Start", "Create", "Describe", "Wait", "Check"))
    request = attempt.prepared.request
    literals: dict[str, str] = {}
    caught = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": NOT_CREATED}]
    if aws_service == "batch":
        create_state = {"Resource": "arn:aws:states:::aws-sdk:batch:submitJob",
                        "Parameters": _templated(sfn_cased(request, _batch_shape("SubmitJob")), literals),
                        "ResultSelector": {"id.$": "$.JobId"}, "ResultPath": "$.submitted"}
        # The one job described, read in a Pass of its own: ArrayGetItem yields the item itself
        # (moto's interpreter reads a path like $.Jobs[0].Status as a list).
        describe_state = {"Resource": "arn:aws:states:::aws-sdk:batch:describeJobs",
                          "Parameters": {"Jobs.$": "States.Array($.submitted.id)"},
                          "ResultSelector": {"raw.$": "States.ArrayGetItem($.Jobs, 0)", "at": prefix,
                                             "attempt": attempt.number}}
        read = {"Type": "Pass", "Parameters": {
            "job.$": "$.described.raw.JobName", "status.$": "$.described.raw.Status", "raw.$": "$.described.raw",
            "at.$": "$.described.at", "attempt.$": "$.described.attempt"}, "ResultPath": "$.described", "Next": check}
    else:
        read = None
        create_state = {"Resource": "arn:aws:states:::aws-sdk:sagemaker:createTrainingJob",
                        "Parameters": _templated(request, literals), "ResultPath": None,
                        "Retry": _retry(RETRY_ERRORS)}
        describe_state = {"Resource": "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob",
                          "Parameters": _templated({"TrainingJobName": request["TrainingJobName"]}, literals),
                          "ResultSelector": {"job.$": "$.TrainingJobName", "status.$": "$.TrainingJobStatus",
                                             "raw.$": "$", "at": prefix, "attempt": attempt.number}}
    done, failed = TERMINAL[aws_service]
    return {
        start: ({"Type": "Pass", "Result": literals, "ResultPath": "$.literals", "Next": create} if literals
                else {"Type": "Pass", "Next": create}),
        create: {"Type": "Task", **create_state, "Catch": caught, "Next": describe},
        describe: {"Type": "Task", **describe_state, "ResultPath": "$.described", "Retry": _retry(THROTTLE_ERRORS),
                   "Next": f"{prefix} Read" if read else check},
        **({f"{prefix} Read": read} if read else {}),
        check: {
            "Type": "Choice",
            "Choices": [*({"Variable": "$.described.status", "StringEquals": status, "Next": TRIAL_END}
                          for status in done),
                        {"Variable": "$.described.status", "StringEquals": failed, "Next": WHY[aws_service]}],
            "Default": wait,
        },
        wait: {"Type": "Wait", "Seconds": poll_s, "Next": describe},
    }


def _shared_states(services: set[str], routes: list[dict]) -> dict[str, dict]:
    """The processor's states every trial shares: why a job failed (one Choice per AWS service,
    `failure_rules`), the failure's kind at `$.kind`, the next attempt of the attempt that
    failed (`routes`), and the trial's end."""
    states: dict[str, dict] = {}
    for aws_service in sorted(services):
        states[WHY[aws_service]] = {"Type": "Choice", "Choices": failure_rules.rules(
            REASON_PATHS[aws_service], {kind: f"Kind {kind}" for kind, _ in failure_rules.KINDS}),
            "Default": "Kind user"}
    for kind in dict.fromkeys(k for k, _ in failure_rules.KINDS):
        states[f"Kind {kind}"] = {"Type": "Pass", "Result": kind, "ResultPath": "$.kind", "Next": "Next attempt"}
    states["Next attempt"] = {"Type": "Choice", "Choices": routes, "Default": TRIAL_END} if routes else \
        {"Type": "Pass", "Next": TRIAL_END}
    states[TRIAL_END] = {"Type": "Pass", "End": True, "Parameters": {
        "trial.$": "$.trial", "job.$": "$.described.job", "status.$": "$.described.status",
        "attempt.$": "$.described.attempt"}}
    states[NOT_CREATED] = {"Type": "Pass", "End": True, "Parameters": {
        "trial.$": "$.trial", "status": "NotCreated", "error.$": "$.error.Error", "cause.$": "$.error.Cause"}}
    return states


def _routes(prefix_of: dict[str, str], graph) -> list[dict]:
    """Choice rules from (the attempt that failed, the failure's kind) to the next attempt."""
    routes = []
    for a in graph:
        for kind in attempts.RETRY_KINDS:
            nxt = a.on_capacity if kind == attempts.FAILOVER_KIND else a.on_retry
            if nxt is not None:
                routes.append({"And": [{"Variable": "$.described.at", "StringEquals": prefix_of[a.key]},
                                       {"Variable": "$.kind", "StringEquals": kind}],
                               "Next": f"{prefix_of[nxt]} Start"})
    return routes


def _share(processor_states: dict[str, dict]) -> dict[str, Any]:
    """Move each large request member that several create states send unchanged (the image and
    its metric definitions, most often) to one table, `$.shared`, which every Map iteration
    receives: each create state then names it (`"<Member>.$": "$.shared.<id>"`). A member whose
    value is templated (it holds `.$` keys) stays in place. Returns the table."""
    seen: dict[str, int] = {}
    creates = [state for name, state in processor_states.items() if name.endswith(" Create")]
    for state in creates:
        for key, value in state["Parameters"].items():
            text = json.dumps(value, sort_keys=True, separators=(",", ":"))
            if len(text) >= SHARE_MIN_BYTES and ".$\"" not in text and not key.endswith(".$"):
                seen[text] = seen.get(text, 0) + 1
    ids = {text: f"v{i}" for i, text in enumerate(t for t, n in seen.items() if n > 1)}
    for state in creates:
        params = state["Parameters"]
        for key in list(params):
            found = ids.get(json.dumps(params[key], sort_keys=True, separators=(",", ":")))
            if found is not None and not key.endswith(".$"):
                params[f"{key}.$"] = f"$.shared.{found}"
                del params[key]
    return {found: json.loads(text) for text, found in ids.items()}


def _run_label_states(first_trial_state: str, trial_ids: list[str], shared: dict[str, Any]) -> dict[str, dict]:
    """States that put the run's label (YYYYMMDDHHMM, UTC) at `$.run` and the trial ids, fixed
    at deploy, at `$.trials` (the input cannot add a trial)."""
    parts = ", ".join(f"States.ArrayGetItem($.parts, {i})" for i in range(5))
    return {
        "Fire time": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.scheduled_time", "IsPresent": True, "Next": "From scheduled time"}],
            "Default": "From start time",
        },
        "From scheduled time": {"Type": "Pass", "Parameters": {"time.$": "$.scheduled_time"}, "Next": "Split time"},
        "From start time": {"Type": "Pass", "Parameters": {"time.$": "$$.Execution.StartTime"}, "Next": "Split time"},
        # "2026-12-05T03:00:00Z" (Scheduler's <aws.scheduler.scheduled-time>) or
        # "2026-12-05T03:00:00.123Z" ($$.Execution.StartTime): the first five parts are the label's.
        "Split time": {"Type": "Pass", "Parameters": {"parts.$": "States.StringSplit($.time, '-T:.Z')"},
                       "Next": "Run label"},
        "Run label": {"Type": "Pass", "Parameters": {"run.$": f"States.Format('{{}}{{}}{{}}{{}}{{}}', {parts})",
                                                      "trials": trial_ids, "shared": shared},
                      "Next": first_trial_state},
    }


def compile_plan(plan) -> dict:
    """The ASL definition (a dict) of one run of `plan` (see the module docstring)."""
    if plan.identity.tick != PLACEHOLDER_LABEL:
        raise ValueError("compile_plan takes the plan of the placeholder tick (placeholder_plan)")
    refused = sorted({t.trial.spec.backend for t in plan.trials if service(t.trial.spec) is None})
    if refused:
        raise InputError(f"sweep {plan.sweep.sweep!r} has {', '.join(refused)} trials; a cloud schedule compiles "
                         "SageMaker and AWS Batch trials only",
                         hint="keep this sweep on the laptop path (`schedule run` or `schedule crontab`)")
    if not plan.trials:
        raise InputError(f"sweep {plan.sweep.sweep!r} has no trials to schedule")
    states: dict[str, dict] = {}
    choices, routes = [], []
    graphs = attempts.of_plan(plan)
    poll_s = poll_seconds(plan)
    for n, trial in enumerate(plan.trials):
        graph = graphs[trial.trial.trial_id]
        prefix_of = {a.key: f"T{n} {a.key}" for a in graph}
        for a in graph:
            states.update(_job_states(prefix_of[a.key], service(trial.trial.spec), a, poll_s))
        routes += _routes(prefix_of, graph)
        choices.append({"Variable": "$.trial", "StringEquals": trial.trial.trial_id,
                        "Next": f"{prefix_of[graph[0].key]} Start"})
    shared = _share(states)
    processor = {"StartAt": "Which trial",
                 "States": {"Which trial": {"Type": "Choice", "Choices": choices, "Default": "Unknown trial"},
                            "Unknown trial": {"Type": "Fail", "Error": "Orchestrator.UnknownTrial",
                                              "Cause": "the Map item names no trial of this sweep"},
                            **states, **_shared_states({service(t.trial.spec) for t in plan.trials}, routes)}}
    return {
        "Comment": f"sweep {plan.sweep.sweep} ({plan.identity.name}-{plan.identity.digest}): "
                   f"{len(plan.trials)} trial(s), compiled by orchestrator.schedule.statemachine",
        "StartAt": "Fire time",
        "States": {
            **_run_label_states("Trials", [t.trial.trial_id for t in plan.trials], shared),
            "Trials": {
                "Type": "Map",
                "ItemsPath": "$.trials",
                "ItemSelector": {"trial.$": "$$.Map.Item.Value", "run.$": "$.run", "shared.$": "$.shared"},
                "MaxConcurrency": plan.sweep.concurrency,
                "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **processor},
                "ResultPath": "$.trials_done",
                "Next": "Done",
            },
            "Done": {"Type": "Pass", "Parameters": {"run.$": "$.run", "trials.$": "$.trials_done"}, "End": True},
        },
    }


def check_size(plan, definition: dict) -> str:
    """The definition as sent, or InputError (exit 2) when Step Functions would refuse it:
    CreateStateMachine's definition is at most 1,048,576 characters (botocore's stepfunctions
    model, Definition max; Step Functions quotas, "Maximum definition size" 1 MB)."""
    from orchestrator import aws_contract

    text = definition_json(definition)
    aws_contract.check_body("stepfunctions", "CreateStateMachine", {
        "name": "orchestrator-schedule", "definition": text,
        "roleArn": "arn:aws:iam::123456789012:role/orchestrator-schedule"},
        hint=f"the state machine holds every attempt's request of the {len(plan.trials)} trials (their retries and "
             "failovers too); schedule fewer trials per sweep (split it into several sweeps), lower max_retries, "
             "or keep this one on the laptop path (`schedule run`)")
    return text


def execution_input(scheduled_time: str | None = None) -> dict:
    """A run's input: the fire time when known (the schedule's target passes
    `<aws.scheduler.scheduled-time>` there), else nothing (the start time is used)."""
    return {} if scheduled_time is None else {"scheduled_time": scheduled_time}


def definition_json(definition: dict) -> str:
    """The definition as Step Functions takes it (compact, key order kept)."""
    return json.dumps(definition, separators=(",", ":"))
