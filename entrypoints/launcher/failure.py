"""Why a job failed, in a few words, and the container contract's failure file.

SageMaker shows the failure file (`/opt/ml/output/failure`) as the job's FailureReason, at most
1,024 characters of it. The reason names the failing rank and its own error where a rank
wrote one, else the last error line a worker printed before torchrun's own report; torchrun's
report and its log lines are never the reason. Stdlib only.
"""

from __future__ import annotations

import re
import signal

from entrypoints.shared import atomic, contract, nospace

# SageMaker shows at most 1024 characters of FailureReason.
MAX_REASON = 1024
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Killed|Traceback)")
# A Python exception line ("ValueError: ...", "torch.OutOfMemoryError: ...", "No module named x").
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b|.*\bNo module named )")
# torchrun's glog-style log lines ("E1129 22:21:34.382000 ...") and its root-cause summary.
_GLOG_LINE = re.compile(r"^[EWIF]\d{4} \d\d:\d\d:\d\d")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")


def failure_reason(stats: dict[int, dict], tail: list[str], returncode: int | None,
                   signalled: int | None) -> str:
    """A short reason: the first rank's own error (its stats file), else the last error line
    a worker printed before torchrun's own failure report, with the root-cause rank torchrun
    names; torchrun's report and its log lines are never the reason. A full disk named in the
    worker's output is named in the reason."""
    if signalled is not None:
        return f"stopped: the launcher received {signal.Signals(signalled).name}"
    errors = [(rank, s["error"]) for rank, s in sorted(stats.items()) if s.get("error")]
    if errors:
        rank, error = errors[0]
        more = f" (and {len(errors) - 1} more ranks)" if len(errors) > 1 else ""
        return f"rank {rank}: {error}{more}"
    report = next((i for i, line in enumerate(tail) if "ChildFailedError" in line), len(tail))
    before = report
    for i in range(report - 1, -1, -1):
        if tail[i].startswith("Traceback (most recent call last)"):
            before = i  # torchrun's own traceback, which ends in ChildFailedError
            break
    root_rank = next((m.group(1) for line in tail[report:] if (m := _ROOT_RANK.match(line))), None)
    candidates = [line.strip() for line in tail[:before] if line.strip() and not _GLOG_LINE.match(line)]
    line = next((c for c in reversed(candidates) if _EXCEPTION_LINE.search(c)), None) or next(
        (c for c in reversed(candidates) if _ERROR_LINE.search(c)), None)
    who = f"rank {root_rank} (torchrun exited with code {returncode})" if root_rank is not None else (
        f"torchrun exited with code {returncode}")
    # A full disk said so in an earlier line (an OSError's context) than the error it caused.
    if line and nospace.NO_SPACE not in line and any(nospace.NO_SPACE in c for c in candidates):
        line += f" ({nospace.NO_SPACE})"
    return f"{who}: {line}" if line else who


def write_failure(ctr: contract.Contract, reason: str) -> None:
    """The container contract's failure file: SageMaker shows it as FailureReason."""
    text = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
    atomic.write_bytes(ctr.failure_file, text.encode("utf-8", "replace"), durable=False)
