"""A planned sweep compiled to an Amazon States Language definition (Step Functions) and its
items, so a schedule runs in the cloud with no laptop: pure, one plan in, one definition and one
list of items out. Names no AWS service: each trial's backend brings its states
(`backends.scheduled`).

Contract:
- `compile_plan(plan)` takes the sweep's plan made for the tick `PLACEHOLDER_TICK`
  (`placeholder_plan(sweep)`) and returns (definition, items). Each item is one trial: its
  attempts (`attempts`: its first job, its retries and failovers), each attempt's request as
  its backend's AWS SDK integration takes it, serialised to JSON and split at the
  placeholder's label (`pieces`), and where each kind of failure leads (`next`, attempt
  indices). A run puts its label between the pieces (the "Render" loop of States.Format), so
  its requests are the plan's with the run's tick in place of the placeholder: job names keep
  the plan's length and read back into the tick sweep `<sweep>-<8 hex>-<run label>`.
- The items are a JSON array in S3 (the deploy uploads them, content-addressed), read by a
  Distributed Map's ItemReader; each trial runs in a child workflow execution with its own
  history ("Each child workflow execution has its own, separate execution history from that of
  the parent workflow": developer guide, "Using Map state in Distributed mode"), at most the
  sweep's concurrency at once (MaxConcurrency). The definition holds one group of states per
  backend and request shape, never a trial: its size does not grow with the trial count.
- The run's label is the schedule's fire time when the input carries it (`scheduled_time`, the
  Scheduler target's `<aws.scheduler.scheduled-time>`), else the execution's start time, in UTC
  at minute resolution: a tick runs at most once (SageMaker answers a second create of a name
  ResourceInUse; Batch accepts it: see `backends.batch.scheduled`).
- A poll waits `$.trial.poll` seconds (`budget.poll_seconds`: a minute, or longer when the
  trial's worst path would overflow its child's 25,000-event history). A describe that fails
  after its retries ends its trial as PollFailed, a create as NotCreated: never the run (the
  Map tolerates every failed child: ToleratedFailurePercentage 100).
- A failed job is read as the runner reads it (`failure_rules` on the backend's reason paths):
  capacity goes to the attempt's `next.capacity`, spot and internal to `next.spot` /
  `next.internal`, while the trial has one; anything else ends the trial.
- ARNs in the definition are written `arn:${Partition}:...`, filled by the stack's
  DefinitionSubstitutions (`substituted` for anything else).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from entrypoints.shared import contract
from orchestrator.backends import scheduled
from orchestrator.errors import InputError
from orchestrator.schedule import attempts, failure_rules

PLACEHOLDER_TICK = datetime(2000, 1, 1, 0, 0, tzinfo=timezone.utc)
# The container takes the run's label from its job name in the same place (`contract.for_run`).
PLACEHOLDER_LABEL = contract.RUN_PLACEHOLDER
NAMES = scheduled.Names()
PARTITION = "${Partition}"
# "By default, Step Functions runs 10,000 parallel child workflow executions" and an inline Map
# "supports up to 40 concurrent iterations" (developer guide, "Using Map state in Distributed
# mode" / "in Inline mode"): the sweep's concurrency is the Distributed Map's MaxConcurrency.
MAX_CONCURRENCY = 10_000
# A child execution's input, an item, is at most 256 KiB (Step Functions quotas, "Maximum input
# or output size for a task, state, or execution").
MAX_ITEM_BYTES = 262_144
# The Map's label: its child executions are named `<machine>/<label>:<id>`, which the role names.
MAP_LABEL = "Trials"


def placeholder_plan(sweep):
    """The sweep's plan for the placeholder tick (what `compile_plan` embeds)."""
    from orchestrator import sweep as sweeps

    return sweeps.plan(sweep, tick=PLACEHOLDER_TICK)


def part(spec) -> scheduled.ScheduledJobs:
    """The trial's backend's part of a schedule (NotScheduled, exit 2, when it has none)."""
    return scheduled.part_of(spec.backend)


def _item(graph, poll_s: int) -> tuple[dict, dict[str, tuple[str, dict]]]:
    """One trial's item (its id left to the caller), and the states groups its attempts need
    (group -> (backend, a request of it))."""
    index = {a.key: i for i, a in enumerate(graph)}
    groups: dict[str, dict] = {}
    out = []
    for a in graph:
        jobs = part(a.prepared.spec)
        request = jobs.request_for_sfn(a.prepared.request)
        group = jobs.group(a.prepared.request)
        groups.setdefault(group, (a.prepared.spec.backend, request))
        nxt = {}
        for kind in attempts.RETRY_KINDS:
            target = a.on_capacity if kind == attempts.FAILOVER_KIND else a.on_retry
            if target is not None:
                nxt[kind] = index[target]
        pieces = json.dumps(request, separators=(",", ":")).split(PLACEHOLDER_LABEL)
        out.append({"at": a.key, "n": a.number, "group": group, "pieces": pieces, "size": len(pieces), "next": nxt})
    return {"trial": None, "poll": poll_s, "attempts": out}, groups


def _render_states() -> dict[str, dict]:
    """Pick attempt `$.at.i` of the trial and render its request for the run (see the module
    docstring): pieces joined by the run's label, parsed."""
    return {
        "Begin": {"Type": "Pass", "Result": {"i": 0}, "ResultPath": "$.at", "Next": "Attempt"},
        "Attempt": {"Type": "Pass", "Parameters": {"a.$": "States.ArrayGetItem($.trial.attempts, $.at.i)"},
                    "ResultPath": "$.picked", "Next": "Render first"},
        "Render first": {"Type": "Pass", "Parameters": {"text.$": "States.ArrayGetItem($.picked.a.pieces, 0)", "i": 1},
                         "ResultPath": "$.render", "Next": "Render more"},
        "Render more": {"Type": "Choice", "Choices": [
            {"Variable": "$.render.i", "NumericLessThanPath": "$.picked.a.size", "Next": "Render step"}],
            "Default": "Request"},
        "Render step": {"Type": "Pass", "Parameters": {
            "text.$": "States.Format('{}{}{}', $.render.text, $.run, States.ArrayGetItem($.picked.a.pieces, $.render.i))",
            "i.$": "States.MathAdd($.render.i, 1)"}, "ResultPath": "$.render", "Next": "Render more"},
        "Request": {"Type": "Pass", "Parameters": {"request.$": "States.StringToJson($.render.text)"},
                    "ResultPath": "$.rendered", "Next": "Which backend"},
    }


def _routing_states(groups: list[str]) -> dict[str, dict]:
    """Kinds of failure, where each leads, the wait between polls, and the trial's ends."""
    states: dict[str, dict] = {}
    for kind in dict.fromkeys(k for k, _ in failure_rules.KINDS):
        states[f"Kind {kind}"] = {"Type": "Pass", "Result": kind, "ResultPath": "$.kind", "Next": "Next attempt"}
    states["Next attempt"] = {"Type": "Choice", "Choices": [
        {"And": [{"Variable": "$.kind", "StringEquals": kind},
                 {"Variable": f"$.picked.a.next.{kind}", "IsPresent": True}], "Next": f"Go {kind}"}
        for kind in attempts.RETRY_KINDS], "Default": NAMES.trial_end}
    for kind in attempts.RETRY_KINDS:
        states[f"Go {kind}"] = {"Type": "Pass", "Parameters": {"i.$": f"$.picked.a.next.{kind}"}, "ResultPath": "$.at",
                                "Next": "Attempt"}
    states[NAMES.wait] = {"Type": "Wait", "SecondsPath": "$.trial.poll", "Next": "Poll which"}
    states["Poll which"] = {"Type": "Choice", "Choices": [
        {"Variable": "$.picked.a.group", "StringEquals": g, "Next": NAMES.describe(g)} for g in groups],
        "Default": "Unknown group"}
    states["Which backend"] = {"Type": "Choice", "Choices": [
        {"Variable": "$.picked.a.group", "StringEquals": g, "Next": NAMES.create(g)} for g in groups],
        "Default": "Unknown group"}
    states["Unknown group"] = {"Type": "Fail", "Error": "Orchestrator.UnknownGroup",
                               "Cause": "the item's attempt names no states group of this definition"}
    states[NAMES.trial_end] = {"Type": "Pass", "End": True, "Parameters": {
        "trial.$": "$.trial.trial", "job.$": "$.described.job", "status.$": "$.described.status",
        "attempt.$": "$.picked.a.n", "kind.$": "$.kind"}}
    states[NAMES.not_created] = {"Type": "Pass", "End": True, "Parameters": {
        "trial.$": "$.trial.trial", "status": "NotCreated", "attempt.$": "$.picked.a.n",
        "error.$": "$.error.Error", "cause.$": "$.error.Cause"}}
    states[NAMES.poll_failed] = {"Type": "Pass", "End": True, "Parameters": {
        "trial.$": "$.trial.trial", "status": "PollFailed", "attempt.$": "$.picked.a.n",
        "error.$": "$.error.Error", "cause.$": "$.error.Cause"}}
    return states


def _run_label_states(next_state: str) -> dict[str, dict]:
    """States that put the run's label (YYYYMMDDHHMM, UTC) at `$.run`."""
    parts = ", ".join(f"States.ArrayGetItem($.parts, {i})" for i in range(5))
    return {
        "Fire time": {"Type": "Choice",
                      "Choices": [{"Variable": "$.scheduled_time", "IsPresent": True, "Next": "From scheduled time"}],
                      "Default": "From start time"},
        "From scheduled time": {"Type": "Pass", "Parameters": {"time.$": "$.scheduled_time"}, "Next": "Split time"},
        "From start time": {"Type": "Pass", "Parameters": {"time.$": "$$.Execution.StartTime"}, "Next": "Split time"},
        # "2026-12-05T03:00:00Z" (Scheduler's <aws.scheduler.scheduled-time>) or
        # "2026-12-05T03:00:00.123Z" ($$.Execution.StartTime): the first five parts are the label's.
        "Split time": {"Type": "Pass", "Parameters": {"parts.$": "States.StringSplit($.time, '-T:.Z')"},
                       "Next": "Run label"},
        "Run label": {"Type": "Pass", "Parameters": {"run.$": f"States.Format('{{}}{{}}{{}}{{}}{{}}', {parts})"},
                      "Next": next_state},
    }


def run_label(execution_input: str | None, started: datetime) -> str:
    """The label a run's states compute (`_run_label_states`), read from outside: the minute of
    the input's `scheduled_time` when it has one, else of the execution's start (UTC)."""
    try:
        given = json.loads(execution_input or "{}")
    except ValueError:
        given = {}
    fired = given.get("scheduled_time") if isinstance(given, dict) else None
    if isinstance(fired, str):
        parts = [p for p in fired.replace("-", " ").replace("T", " ").replace(":", " ").replace(".", " ")
                 .replace("Z", " ").split()]
        if len(parts) >= 5 and all(p.isdigit() for p in parts[:5]):
            return "".join(parts[:5])
    return started.astimezone(timezone.utc).strftime("%Y%m%d%H%M")


def _partitioned(value):
    """`arn:aws:` of the backends' resources written `arn:${Partition}:` (see the docstring)."""
    if isinstance(value, dict):
        return {k: _partitioned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_partitioned(v) for v in value]
    if isinstance(value, str) and value.startswith("arn:aws:states:::"):
        return f"arn:{PARTITION}:" + value[len("arn:aws:"):]
    return value


def compile_plan(plan, graphs: dict, place_items, results_at: tuple[str, str] | None = None):
    """(definition, items) of one run of `plan` (see the module docstring), its attempts
    `graphs` (`attempts.of_plan`); `place_items(items_text)` is the (bucket, key) the items are
    uploaded to, `results_at` the (bucket, prefix) of the Map's ResultWriter (None: the results
    are the execution's output, for small sweeps and tests)."""
    from orchestrator.schedule import budget

    if plan.identity.tick != PLACEHOLDER_LABEL:
        raise ValueError("compile_plan takes the plan of the placeholder tick (placeholder_plan)")
    if not plan.trials:
        raise InputError(f"sweep {plan.sweep.sweep!r} has no trials to schedule")
    for t in plan.trials:
        part(t.trial.spec)  # NotScheduled (exit 2) names the backend and its reason
    items, groups = [], {}
    for t in plan.trials:
        graph = graphs[t.trial.trial_id]
        item, found = _item(graph, budget.poll_seconds(plan, graph))
        item["trial"] = t.trial.trial_id
        size = len(json.dumps(item, separators=(",", ":")))
        if size > MAX_ITEM_BYTES:
            raise InputError(f"trial {t.trial.trial_id} of sweep {plan.sweep.sweep!r} needs {size:,} bytes of input "
                             f"for its {len(graph)} possible jobs, above Step Functions' {MAX_ITEM_BYTES:,} "
                             "(Step Functions quotas, maximum input size)",
                             hint="lower max_retries or the failover chain, or keep this sweep on the laptop path")
        items.append(item)
        groups.update({g: v for g, v in found.items() if g not in groups})
    items_at = place_items(json.dumps(items, separators=(",", ":")))
    states = {**_render_states(), **_routing_states(sorted(groups))}
    for group, (backend, request) in sorted(groups.items()):
        jobs = scheduled.part_of(backend)
        states.update(jobs.states(group, request, NAMES))
        states[NAMES.why(group)] = {"Type": "Choice", "Choices": failure_rules.rules(
            list(jobs.reason_paths), {kind: f"Kind {kind}" for kind, _ in failure_rules.KINDS}), "Default": "Kind user"}
    concurrency = min(plan.sweep.concurrency, MAX_CONCURRENCY)
    trials: dict = {
        "Type": "Map",
        "ItemReader": {"Resource": f"arn:{PARTITION}:states:::s3:getObject", "ReaderConfig": {"InputType": "JSON"},
                       "Parameters": {"Bucket": items_at[0], "Key": items_at[1]}},
        "ItemSelector": {"trial.$": "$$.Map.Item.Value", "run.$": "$.run", "kind": "none"},
        "MaxConcurrency": concurrency,
        "ToleratedFailurePercentage": 100.0,  # a float: moto's grammar reads NUMBER, not INT
        "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                          "StartAt": "Begin", "States": _partitioned(states)},
        "Label": MAP_LABEL,
        "ResultPath": "$.trials_done",
        "Next": "Done",
    }
    if results_at is not None:
        trials["ResultWriter"] = {"Resource": f"arn:{PARTITION}:states:::s3:putObject",
                                  "Parameters": {"Bucket": results_at[0], "Prefix": results_at[1]}}
    definition = {
        "Comment": f"sweep {plan.sweep.sweep} ({plan.identity.name}-{plan.identity.digest}), compiled by "
                   "orchestrator.schedule.statemachine: its trials are the items of the Map's ItemReader",
        "StartAt": "Fire time",
        "States": {**_run_label_states("Trials"), "Trials": trials,
                   "Done": {"Type": "Pass", "Parameters": {"run.$": "$.run", "trials.$": "$.trials_done"},
                            "End": True}},
    }
    return definition, items


def check_size(plan, definition: dict) -> str:
    """The definition as sent, or InputError (exit 2) when Step Functions would refuse it:
    CreateStateMachine's definition is at most 1,048,576 characters (botocore's stepfunctions
    model, Definition max; Step Functions quotas, "Maximum definition size" 1 MB)."""
    from orchestrator import aws_contract

    text = definition_json(definition)
    aws_contract.check_body("stepfunctions", "CreateStateMachine", {
        "name": "orchestrator-schedule", "definition": text,
        "roleArn": "arn:aws:iam::123456789012:role/orchestrator-schedule"},
        hint="the definition holds one group of states per backend and request shape; a sweep whose trials send "
             "fewer kinds of request compiles smaller")
    return text


def execution_input(scheduled_time: str | None = None) -> dict:
    """A run's input: the fire time when known (the schedule's target passes
    `<aws.scheduler.scheduled-time>` there), else nothing (the start time is used)."""
    return {} if scheduled_time is None else {"scheduled_time": scheduled_time}


def definition_json(definition: dict) -> str:
    """The definition as Step Functions takes it (compact, key order kept)."""
    return json.dumps(definition, separators=(",", ":"))


def substituted(text: str, partition: str = "aws") -> str:
    """The definition with its DefinitionSubstitutions filled, as CloudFormation does."""
    return text.replace(PARTITION, partition)
