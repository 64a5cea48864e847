"""Why a trial's job failed, read by the state machine: the sweep runner's failure kinds
(`sweep.failures.failure_kind`) as Amazon States Language Choice rules.

Contract:
- `KINDS` is `sweep.failure_phrases.KINDS`, the one table of failure phrases the runner's
  regular expressions are made from too: each kind, in order, with the phrases that make a
  reason that kind. Each phrase becomes `StringMatches` patterns (`*` wildcards only, case as
  written: `failure_phrases.wildcard_patterns` gives every spelling AWS writes).
  tests/test_schedule_retries.py holds the two classifications equal on the reasons AWS
  documents, and checks both are made from the table.
- `rules(paths, targets, table=KINDS)` is the Choice's rule list: the first kind one of
  `paths` (the reason fields of the described job, e.g. SageMaker's FailureReason, AWS Batch's
  statusReason and the container's reason) matches decides, each path guarded by IsPresent;
  `targets` maps a kind to the next state.
"""

from __future__ import annotations

from orchestrator.sweep.failure_phrases import KINDS, wildcard_patterns

__all__ = ["KINDS", "rules"]


def rules(paths: list[str], targets: dict[str, str], table=KINDS) -> list[dict]:
    """The Choice rules of a failed job (see the module docstring)."""
    out = []
    for kind, phrases in table:
        matches = [{"And": [{"Variable": path, "IsPresent": True}, {"Variable": path, "StringMatches": pattern}]}
                   for pattern in wildcard_patterns(phrases) for path in paths]
        out.append({"Or": matches, "Next": targets[kind]})
    return out
