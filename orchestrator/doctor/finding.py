"""One result of a doctor rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

Severity = Literal["error", "warning", "info"]
ORDER = {"error": 0, "warning": 1, "info": 2}


class Finding(NamedTuple):
    """One result of a rule: what is wrong (`message`), what to change (`fix`), and where
    (`path`, a dotted spec field)."""

    rule: str
    severity: Severity
    message: str
    fix: str
    path: str

    def to_json(self, spec: JobSpec | None = None) -> dict:
        out = {"rule": self.rule, "severity": self.severity, "message": self.message, "fix": self.fix,
               "path": self.path}
        if spec is not None:
            file, line, column = spec.locate(self.path)
            out.update(file=file, line=line, column=column)
        return out
