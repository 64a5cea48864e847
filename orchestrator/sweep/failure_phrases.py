"""The one table of failure phrases: which words in a failed job's reason make it which kind.
The sweep runner's regular expressions (`sweep.failures.failure_kind`) and the cloud schedule's
Choice rules (`schedule.failure_rules`) are both made from `KINDS`; neither writes a phrase.

Contract:
- `KINDS` is an ordered tuple of (kind, phrases); the first entry one of whose phrases occurs in
  a reason decides its kind (a reason none matches is the user's).
- A phrase is a grammar both matchers can express. Amazon States Language has no regular
  expression: a Choice rule's `StringMatches` takes `*` wildcards only (a literal `*` written
  `\\*`) and compares case as written (States Language spec, "Choice Rules"). So a phrase is
  literal text whose `*` means "any run of characters" (a regex's `.*?`, unbounded: no `.{0,40}`,
  no `\\b`, no character classes, no alternation: write two phrases). It never starts or ends
  with `*` (both matchers look for it anywhere), has no `**` and no backslash, so no literal `*`
  either (`check`).
- Case, per `*`-separated segment: a segment without capitals is matched whatever its case by
  the runner, and in the spellings AWS writes by the state machine (`spellings`: as is,
  Capitalised, Title, UPPER, and CamelCase for AWS's one-word identifiers in `CAMEL`); a segment
  with a capital is an identifier (AWS's own, e.g. "CannotPullContainerError"), matched as
  written by both. A reason in an odd case ("sPoT interruption") is read differently by the two:
  tests/test_schedule_retries.py holds them equal on the reasons AWS documents.
"""

from __future__ import annotations

import itertools
import re

# AWS Batch's reasons (as `backends.batch` joins them: "<statusReason>; <container reason>; exit
# code N") come first, being more specific than the general words after them (see
# `sweep.failures` for the AWS pages each is read from).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # A queue or compute environment that cannot run the job (also once jobStateTimeLimitActions
    # cancelled it): the stack must change. Before capacity, whose word some of them contain.
    ("user", ("MISCONFIGURATION:", "ACTION_REQUIRED")),
    # "Host EC2 (instance i-...) terminated.": a spot reclaim or an instance failure.
    ("spot", ("Host EC2 (instance *) terminated",)),
    # An image that does not exist or may not be pulled: the stack's to fix.
    ("user", tuple(f"CannotPullContainerError*{p}" for p in (
        "not found", "manifest unknown", "access denied", "accessdenied", "unauthorized", " 403",
        "does not exist", "repository *not"))),
    # Any other pull failure and ECS's errors starting a task: the agent's, retried.
    ("internal", ("CannotPullContainerError", "CannotStartContainerError", "CannotInspectContainerError",
                  "DockerTimeoutError", "Task failed to start")),
    ("capacity", ("capacity", "unable to provision")),
    ("spot", ("spot*interrupt", "interrupt*spot", "spotinterruption")),
    ("internal", ("internal error", "internalerror", "internal server error", "internalservererror",
                  "internalfailure", "internal failure", "serviceunavailable", "service unavailable",
                  "an internal")),
)
# One-word identifiers AWS writes in CamelCase (a spelling Title Case does not give).
CAMEL = {"internalfailure": "InternalFailure", "serviceunavailable": "ServiceUnavailable",
         "spotinterruption": "SpotInterruption", "internalservererror": "InternalServerError",
         "internalerror": "InternalError", "accessdenied": "AccessDenied"}


def check(phrase: str) -> list[str]:
    """The phrase's segments (split at `*`), or ValueError when it is outside the grammar."""
    segments = phrase.split("*")
    if not phrase or "\\" in phrase or any(not s for s in segments):
        raise ValueError(f"failure phrase {phrase!r}: text with single `*` wildcards inside it, no backslash "
                         "(Step Functions' StringMatches cannot say more)")
    return segments


def caseless(segment: str) -> bool:
    """Whether a segment is matched whatever its case (it has no capital)."""
    return segment == segment.lower()


def regex(phrases: tuple[str, ...]) -> re.Pattern:
    """One regular expression matching a reason that contains any of `phrases`."""
    alternatives = ["(?:" + ".*?".join(f"(?i:{re.escape(s)})" if caseless(s) else re.escape(s)
                                       for s in check(p)) + ")" for p in phrases]
    return re.compile("|".join(alternatives), re.S)


def spellings(segment: str) -> list[str]:
    """The spellings of a segment a reason may use (see the module docstring)."""
    if not caseless(segment):
        return [segment]
    found = [segment, segment[:1].upper() + segment[1:], segment.title(), segment.upper()]
    if segment in CAMEL:
        found.append(CAMEL[segment])
    return list(dict.fromkeys(found))


def wildcard_patterns(phrases: tuple[str, ...]) -> list[str]:
    """`*...*` StringMatches patterns: every spelling of every phrase, anywhere in a reason."""
    out = []
    for phrase in phrases:
        for combo in itertools.product(*(spellings(s) for s in check(phrase))):
            out.append("*" + "*".join(combo) + "*")
    return list(dict.fromkeys(out))


for _kind, _phrases in KINDS:  # a phrase outside the grammar fails at import, not in a run
    for _phrase in _phrases:
        check(_phrase)
