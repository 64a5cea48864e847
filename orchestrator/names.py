"""Names: job names, sweep ids, the tags every job carries, and reading a job name back.

Contract:
- A job name follows SageMaker's rule, which every backend keeps (`JOB_NAME_RULE`). A job of
  a spec is `<spec name>-<8 hex of its spec hash>` (`job_name`): the same spec always gets
  the same name, which is what lets a crashed submit be reconciled instead of duplicated.
  Rerun `n` is that name plus `-r<n>`, the spec's name cut short when needed so that it fits
  in 63 characters (the hash stays whole).
- A sweep's id is `<sweep name>-<8 hex>` (`sweep_identity`: the hex hashes the sweep name
  and its trials' spec hashes, so run policy such as concurrency may change without making
  a new sweep); a scheduled tick appends `-<YYYYMMDDHHMM>` (UTC). A trial id is `t` plus 8
  hex of the trial's spec hash. A sweep's job is `<job prefix>-<trial id>`, with `-r<N>` for
  its N-th resubmission; the job prefix is the sweep id with its name part cut short (never
  the trial or retry part) to fit in 63 characters.
- Every job carries `TAG_SPEC_HASH` and `TAG_JOB`; a sweep's jobs `TAG_SWEEP` and
  `TAG_TRIAL`, and its resubmissions `TAG_ATTEMPT`.
- A job known only by its name is read back into its sweep by the same rules
  (`in_sweep`), so results with no tags and SageMaker jobs with no results yet are matched
  as tagged ones are.
- A name (or an override list) shown in a narrow table breaks only after a separator
  (`shown_lines`); `fitted_widths` gives a table's columns widths in which no word is cut.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from orchestrator.errors import InputError

MAX_JOB_NAME = 63
JOB_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
JOB_NAME_RULE = "1-63 letters, digits and dashes, starting and ending with a letter or digit (SageMaker's rule)"

TAG_SPEC_HASH = "orchestrator:spec-hash"
TAG_JOB = "orchestrator:job"
TAG_SWEEP = "orchestrator:sweep"
TAG_TRIAL = "orchestrator:trial"
# On every resubmission of a trial: "retry", "resumed" (after sweep stop), or
# "failover:<the instance type it failed over from>" (a different configuration: results says so).
TAG_ATTEMPT = "orchestrator:attempt"

TRIAL_HEX = 8
# The retry suffix has room for two digits ("-r99", see MAX_PREFIX).
MAX_ATTEMPT = 99
# "-t" + 8 hex, then at most "-r99": the sweep part gets what is left of the 63.
_TRIAL_PART = 2 + TRIAL_HEX
_RETRY_PART = 4
MAX_PREFIX = MAX_JOB_NAME - _TRIAL_PART - _RETRY_PART

# A sweep id: <name>-<8 hex digest>, and for a scheduled tick -<YYYYMMDDHHMM> after it.
SWEEP_ID = re.compile(r"(?P<name>.+)-(?P<digest>[0-9a-f]{8})(?:-(?P<tick>[0-9]{12}))?")
# A sweep's job: <job prefix>-t<8 hex>[-rN].
_SWEEP_JOB = re.compile(rf"(?P<prefix>.+)-(?P<trial>t[0-9a-f]{{{TRIAL_HEX}}})(?:-r(?P<attempt>[0-9]+))?")


# --- job names -----------------------------------------------------------------------------


def is_job_name(value: str) -> bool:
    """Whether `value` is a valid job name (`JOB_NAME_RULE`)."""
    return bool(value) and len(value) <= MAX_JOB_NAME and JOB_NAME_PATTERN.match(value) is not None


def check_job_name(name: str) -> None:
    """InputError when `name`, made from a spec, is not a valid job name."""
    if len(name) > MAX_JOB_NAME:
        raise InputError(f"job name {name!r} is {len(name)} characters; SageMaker allows {MAX_JOB_NAME}",
                         hint="shorten the spec's name (or the sweep/trial suffix)")
    if not JOB_NAME_PATTERN.match(name):
        raise InputError(f"job name {name!r} is not valid: use letters, digits and single dashes",
                         hint="the name must start and end with a letter or digit")


def job_name(spec, suffix: str | None = None) -> str:
    """`<spec.name>-<8 hex of the spec hash>`, or `<spec.name>-<suffix>` when given.

    Raises InputError when the result is not a valid job name.
    """
    from orchestrator.spec import spec_hash

    tail = spec_hash(spec)[:8] if suffix is None else suffix
    name = f"{spec.name}-{tail}"
    check_job_name(name)
    return name


def rerun_job_name(spec, n: int) -> str:
    """The name of rerun `n` (>= 1) of `spec`: `<name>-<8 hex>-r<n>`, always a valid job name.

    A spec name may take 54 characters, so the plain name may already be 63 long; the spec's
    name is then shortened (trailing dashes dropped) to make room for `-r<n>`. The hash stays
    whole, so reruns of different specs with the same long name never collide.
    """
    from orchestrator.spec import spec_hash

    if n < 1:
        raise ValueError(f"rerun numbers start at 1, got {n}")
    tail = f"-{spec_hash(spec)[:8]}-r{n}"
    room = MAX_JOB_NAME - len(tail)
    if room < 1:
        raise InputError(f"rerun {n} of {spec.name!r} leaves no room for the spec's name in a job name",
                         hint="change any field of the spec (a tag will do): a changed spec gets a new job name, "
                              "so it needs no rerun number")
    name = f"{spec.name[:room].rstrip('-')}{tail}"
    check_job_name(name)
    return name


def local_job_name(spec, rerun: int = 0) -> str:
    """`<name>-<8 hex>-local`: a spec run on this machine first (`submit --local`), beside the
    real job's name, never it; its rerun `n` (`submit --local --rerun`) is `...-local-r<n>`.
    The spec's name is shortened to fit; the hash stays whole."""
    from orchestrator.spec import spec_hash

    tail = f"-{spec_hash(spec)[:8]}-local" + (f"-r{rerun}" if rerun else "")
    name = f"{spec.name[:MAX_JOB_NAME - len(tail)].rstrip('-')}{tail}"
    check_job_name(name)
    return name


# --- sweeps --------------------------------------------------------------------------------


def trial_id(spec_digest: str) -> str:
    """The trial id of a trial whose spec hash is `spec_digest`."""
    return "t" + spec_digest[:TRIAL_HEX]


def tick_label(when: datetime) -> str:
    """A tick's time as it appears in sweep ids: UTC, minute resolution."""
    return when.astimezone(timezone.utc).strftime("%Y%m%d%H%M")


@dataclass(frozen=True)
class Identity:
    """A sweep's id and the job names and tags derived from it (see the module docstring)."""

    name: str
    digest: str
    tick: str | None = None  # YYYYMMDDHHMM, UTC

    @property
    def suffix(self) -> str:
        return self.digest if self.tick is None else f"{self.digest}-{self.tick}"

    @property
    def sweep_id(self) -> str:
        return f"{self.name}-{self.suffix}"

    @property
    def job_prefix(self) -> str:
        room = MAX_PREFIX - len(self.suffix) - 1
        return f"{self.name[:room].rstrip('-')}-{self.suffix}"

    def job_name(self, trial: str, attempt: int = 0) -> str:
        name = f"{self.job_prefix}-{trial}"
        return name if attempt == 0 else f"{name}-r{attempt}"

    def tags(self, trial: str) -> dict[str, str]:
        return {TAG_SWEEP: self.sweep_id, TAG_TRIAL: trial}

    def owns(self, job: str) -> bool:
        """Whether `job` has the shape of a job of this sweep (any trial, any attempt)."""
        return self.parse(job) is not None

    def parse(self, job: str) -> tuple[str, int] | None:
        """(trial id, attempt) of a job of this sweep, None for any other name."""
        return trial_attempt(job, self.job_prefix)


def trial_attempt(job: str, job_prefix: str) -> tuple[str, int] | None:
    """(trial id, attempt) of a job named `Identity.job_name` under `job_prefix` (a sweep's, or a
    cloud schedule run's with its label in it), None for any other name."""
    found = _SWEEP_JOB.fullmatch(job)
    if found is None or found["prefix"] != job_prefix:
        return None
    return found["trial"], int(found["attempt"] or 0)


def sweep_identity(sweep_name: str, spec_hashes: list[str], tick: datetime | None = None) -> Identity:
    """The identity of the sweep `sweep_name` whose trials have `spec_hashes`, in trial order."""
    canonical = json.dumps({"sweep": sweep_name, "trials": spec_hashes}, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    return Identity(sweep_name, digest, tick_label(tick) if tick is not None else None)


def sweep_keys(sweep_id: str) -> set[str]:
    """The names a user may give for a sweep id: the id itself, its sweep name, and for a
    scheduled tick the untimed id."""
    keys = {sweep_id}
    found = SWEEP_ID.fullmatch(sweep_id)
    if found:
        keys.add(found["name"])
        if found["tick"]:
            keys.add(f"{found['name']}-{found['digest']}")
    return keys


def tagged_in_sweep(tagged: str, sweep: str) -> bool:
    """Whether a job whose TAG_SWEEP is `tagged` belongs to `sweep` (an id, a name, or a
    schedule's untimed id)."""
    return sweep in sweep_keys(tagged)


def in_sweep(job: str, sweep: str | None) -> bool:
    """Whether a job known only by its name belongs to `sweep` (an id, a name, or a schedule's
    untimed id; None: every job does). A name of a sweep's shape belongs when its job prefix
    is the one `sweep` makes, read as a name or as an id; any other name when it starts with
    `<sweep>-`."""
    if sweep is None:
        return True
    shaped = _SWEEP_JOB.fullmatch(job)
    parts = SWEEP_ID.fullmatch(shaped["prefix"]) if shaped else None
    if parts is None:
        return job.startswith(f"{sweep}-")
    digest, tick = parts["digest"], parts["tick"]
    prefix = shaped["prefix"]
    # `sweep` read as a sweep name ...
    if Identity(sweep, digest, tick).job_prefix == prefix:
        return True
    # ... or as a sweep id, timed or untimed.
    asked = SWEEP_ID.fullmatch(sweep)
    return (asked is not None and asked["digest"] == digest and asked["tick"] in (None, tick)
            and Identity(asked["name"], digest, tick).job_prefix == prefix)


def listing_needle(sweep: str) -> str:
    """A substring of every job name of `sweep` (read as a name or as an id): the start of the
    name part, as much of it as a job prefix keeps for the longest suffix."""
    asked = SWEEP_ID.fullmatch(sweep)
    name = asked["name"] if asked else sweep
    kept = MAX_PREFIX - len("-12345678-202601010000") - 1
    return name[:kept].rstrip("-") or name[:1]


# Where a job name or an override list may break across lines in a narrow table: after its
# separators, never inside a word (issue 32: at 80 columns names folded mid-word).
PIECE = re.compile(r"[^-._=,/ ]*[-._=,/ ]+|[^-._=,/ ]+")


def shown_lines(text: str, width: int) -> str:
    """`text` (a job name, overrides) as lines of at most `width` characters, broken after a
    separator (- . _ = , / or a space); only a piece longer than a whole line is broken inside
    (nothing is ever cut: every character shows). Existing line breaks stay."""
    if width < 1:
        return text
    out: list[str] = []
    for given in text.split("\n"):
        line = ""
        for piece in PIECE.findall(given):
            if line and len(line) + len(piece.rstrip(" ")) > width:
                out.append(line.rstrip(" "))
                line = ""
            while len(piece.rstrip(" ")) > width:  # a piece wider than the column: broken, not cut
                if line:
                    out.append(line.rstrip(" "))
                    line = ""
                out.append(piece[:width])
                piece = piece[width:]
            line += piece
        out.append(line.rstrip(" "))
    return "\n".join(out)



# The widest a fitted table keeps a column's least width: a longer word is broken inside.
FIT_CELL = 12
SEPARATORS = "-._=,/ "


def _words(text: str) -> list[str]:
    """The pieces `shown_lines` breaks `text` into (each ends at a separator), spaces dropped."""
    return [p.rstrip(" ") for line in text.split("\n") for p in PIECE.findall(line)]


def fitted_widths(columns: list[tuple[str, list[str], bool]], total: int, first: tuple[str, ...] = ()) -> list[int]:
    """The widths of a table's columns, each (header, its cells, kept whole), that share `total`
    characters of content, their cells then broken by `shown_lines`. Each column first gets its
    least: a whole column (numbers) its widest cell, any other its longest word between
    separators, and its header's longest word (without its separator: a header may break
    before one), each at most FIT_CELL, so no word is cut; what is left makes short cells
    (FIT_CELL at most) whole, then goes fairly to the `first` columns (the job name, the
    overrides) up to their whole length, less what their lines broken at separators leave
    unused, then makes other columns whole (headers too), cheapest first, then goes fairly to
    the others. Where `total`
    is less than the least, the least (the table is then wider than `total`)."""
    least, whole, wants = [], [], []
    for header, cells, keep in columns:
        words = [len(w.rstrip(SEPARATORS)) for w in _words(header)]
        words += [len(c) for c in cells] if keep else [len(w) for c in cells for w in _words(c)]
        least.append(min(max([1, *words]), FIT_CELL))
        lines = [len(line) for c in cells for line in c.split("\n")]
        whole.append(max([1, *lines]))  # the cells on one line each, the header aside
        wants.append(max([len(line) for line in header.split("\n")] + lines))
    widths = list(least)
    left = total - sum(least)
    firsts = [i for i, (header, _, _) in enumerate(columns) if header in first]
    others = [i for i in range(len(columns)) if i not in firsts]

    def whole_where_affordable(candidates: list[int], target: list[int]) -> int:
        """Widen each candidate to its `target` width, cheapest first, while what is left
        allows; what is left then."""
        rest = left
        for i in sorted(candidates, key=lambda j: (target[j] - widths[j], j)):
            if 0 < target[i] - widths[i] <= rest:
                rest -= target[i] - widths[i]
                widths[i] = target[i]
        return rest

    def fair(group: list[int], rest: int) -> int:
        wanting = [i for i in group if wants[i] > widths[i]]
        while rest > 0 and wanting:  # max-min fair: a character at a time to the narrowest that wants more
            i = min(wanting, key=lambda j: (widths[j], j))
            widths[i] += 1
            rest -= 1
            if widths[i] >= wants[i]:
                wanting.remove(i)
        return rest

    # Short cells whole first: "0.0003" broken after "0." would read as two values.
    left = whole_where_affordable([i for i in others if whole[i] <= FIT_CELL], whole)
    tight = set()
    for _ in range(len(firsts) + 1):  # what one's lines do not use may serve another first column
        left = fair([i for i in firsts if i not in tight], left)
        for i in firsts:  # what their lines, broken at separators, do not use goes to the others
            header, cells, _ = columns[i]
            used = max(len(line) for text in (header, *cells) for line in shown_lines(text, widths[i]).split("\n"))
            if least[i] <= used < widths[i]:
                left += widths[i] - used
                widths[i] = used
                tight.add(i)
    left = whole_where_affordable(others, wants)  # then headers and long cells whole, cheapest first
    fair(others, left)
    return widths
