"""One compiled cloud schedule: the plan, its attempts, its definition and items, where they go,
the stack's template and a run's worst case, built once per command (`compile_schedule`) and
passed to whatever plans, describes or deploys it.

Contract:
- `compile_schedule(plan)` refuses (exit 2) what Step Functions or CloudFormation would: a
  backend with no part in a schedule (its reason), an item over 256 KiB, a definition over 1 MB.
- Items and definition are content-addressed objects beside the first trial's source archive
  (`<output>/source/`): an object of such a key always holds these bytes. The Map's results are
  the execution's output while they fit (INLINE_RESULTS_BYTES), else written under
  `<output>/source/schedule-results/<sweep>/` (its ResultWriter).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# A trial's result (its id, job, status, attempt; a create's or poll's error and cause) is
# assumed to be at most RESULT_BYTES: the Map's results stay the execution's output while
# they fit its 256 KiB (Step Functions quotas, maximum input or output size), with room for the
# rest of it; beyond, the Map writes them to S3 (ResultWriter).
RESULT_BYTES = 1_000
INLINE_RESULTS_BYTES = 200_000


@dataclass(frozen=True)
class Compiled:
    plan: object
    graphs: dict  # trial id -> [attempts.Attempt]
    definition: dict
    definition_text: str
    items: list
    items_text: str
    items_at: tuple[str, str]
    definition_at: tuple[str, str]
    results_at: tuple[str, str]
    worst_usd: float
    template: dict

    @property
    def jobs(self) -> int:
        return sum(len(g) for g in self.graphs.values())


def _folder(plan) -> tuple[str, str]:
    bucket, key = plan.trials[0].prepared.source_uri.removeprefix("s3://").split("/", 1)
    return bucket, key.rsplit("/", 1)[0]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compile_schedule(plan) -> Compiled:
    """The schedule of `plan` (the placeholder tick's), compiled once (see the module docstring)."""
    from orchestrator.errors import InputError
    from orchestrator.schedule import attempts, in_aws_stack, statemachine

    if not plan.trials:
        raise InputError(f"sweep {plan.sweep.sweep!r} has no trials to schedule")
    bucket, folder = _folder(plan)
    results_at = (bucket, f"{folder}/schedule-results/{plan.sweep.sweep}")
    written = len(plan.trials) * RESULT_BYTES > INLINE_RESULTS_BYTES
    graphs = attempts.of_plan(plan)
    placed: dict[str, str] = {}

    def place_items(text: str) -> tuple[str, str]:  # the items' key is their bytes' digest
        placed["text"] = text
        return bucket, f"{folder}/schedule-items-{_digest(text)}.json"

    definition, items = statemachine.compile_plan(plan, graphs, place_items, results_at if written else None)
    text = statemachine.check_size(plan, definition)
    definition_at = (bucket, f"{folder}/statemachine-{_digest(text)}.json")
    partial = Compiled(plan, graphs, definition, text, items, placed["text"], place_items(placed["text"]),
                       definition_at, results_at, attempts.worst_usd(graphs), {})
    return Compiled(**{**partial.__dict__, "template": in_aws_stack.template(partial)})
