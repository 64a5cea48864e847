"""Why a trial's job failed, read by the state machine: the sweep runner's failure kinds
(`sweep.failures.failure_kind`) as Amazon States Language Choice rules.

Contract:
- `KINDS` lists, in `failures._REASON_KINDS`' order, each kind with the phrases that make a
  reason that kind. ASL has no regular expression: a Choice rule's `StringMatches` takes `*`
  wildcards only and is case-sensitive (States Language spec, "Choice Rules"), so each phrase
  is matched in the spellings AWS writes (lower, Capitalised, Title and UPPER case) and a
  regex's bounded gap (`.{0,40}`) becomes `*`. tests/test_schedule_statemachine.py holds the
  two classifications equal on the reasons failures.py documents.
- `rules(paths, targets)` is the Choice's rule list: the first kind one of `paths` (the
  reason fields of the described job, e.g. SageMaker's FailureReason, AWS Batch's statusReason
  and the container's reason) matches decides, each path guarded by IsPresent; `targets`
  maps a kind to the next state (a kind without a target falls to the Choice's Default).
"""

from __future__ import annotations

# (kind, phrases). `*` inside a phrase is a wildcard (a regex's `.{0,N}` or `.*?`).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("user", ("MISCONFIGURATION:", "ACTION_REQUIRED")),
    ("spot", ("Host EC2 (instance *) terminated",)),
    ("user", tuple(f"CannotPullContainerError*{p}" for p in (
        "not found", "manifest unknown", "access denied", "accessdenied", "unauthorized", " 403",
        "does not exist", "repository *not"))),
    ("internal", ("CannotPullContainerError", "CannotStartContainerError", "CannotInspectContainerError",
                  "DockerTimeoutError", "Task failed to start")),
    ("capacity", ("capacity", "unable to provision")),
    ("spot", ("spot*interrupt", "interrupt*spot", "spotinterruption")),
    ("internal", ("internal error", "internalerror", "internal server error", "internalservererror",
                  "internalfailure", "internal failure", "serviceunavailable", "service unavailable",
                  "an internal")),
)
# One-word identifiers AWS writes in CamelCase.
_CAMEL = {"internalfailure": "InternalFailure", "serviceunavailable": "ServiceUnavailable",
          "spotinterruption": "SpotInterruption", "internalservererror": "InternalServerError",
          "internalerror": "InternalError", "accessdenied": "AccessDenied"}


def spellings(phrase: str) -> list[str]:
    """The spellings of a lower-case phrase a reason may use: as is, Capitalised, Title Case,
    UPPER, and CamelCase for AWS's one-word identifiers. A phrase with capitals is AWS's own
    identifier, matched as written."""
    if phrase != phrase.lower():
        return [phrase]
    found = [phrase, phrase[:1].upper() + phrase[1:], phrase.title(), phrase.upper()]
    if phrase in _CAMEL:
        found.append(_CAMEL[phrase])
    return list(dict.fromkeys(found))


def patterns(kind_phrases: tuple[str, ...]) -> list[str]:
    """`*phrase*` StringMatches patterns of every spelling of the phrases."""
    return [f"*{spelling}*" for phrase in kind_phrases for spelling in spellings(phrase)]


def rules(paths: list[str], targets: dict[str, str]) -> list[dict]:
    """The Choice rules of a failed job (see the module docstring)."""
    out = []
    for kind, phrases in KINDS:
        matches = [{"And": [{"Variable": path, "IsPresent": True}, {"Variable": path, "StringMatches": pattern}]}
                   for pattern in patterns(phrases) for path in paths]
        out.append({"Or": matches, "Next": targets[kind]})
    return out
