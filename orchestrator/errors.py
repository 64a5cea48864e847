"""The errors the orchestrator raises. Only the CLI (`orchestrator/cli/`) prints them.

Every error carries what went wrong, where (when known) and how to fix it. `exit_code`
follows the house style: 2 for bad input, 1 for a backend or job failure. A module that
waits on something outside the command says so through `note`, which the CLI points at stderr.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import NamedTuple


class Problem(NamedTuple):
    """One located problem in an input file.

    `path` is the dotted field path ("training.batch_size"), empty for the document itself.
    `line` and `column` are 1-based; 0 when the location is unknown.
    """

    file: str
    line: int
    column: int
    path: str
    message: str

    def render(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}:{self.column}"
        field = f" {self.path}:" if self.path else ""
        return f"{where}:{field} {self.message}"


# The user part of a URL (scheme://USER[:PASSWORD]@host): AWS_ENDPOINT_URL may carry a proxy's
# credentials there, and botocore repeats the URL in its errors.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@'\"?#]+@")


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by ***: shown, never echoed."""
    return _URL_USERINFO.sub(r"\g<scheme>***@", text)


# Control characters (C0 but newline and tab, DEL, C1) and bidirectional overrides: a NUL, an
# escape sequence or a carriage return in a value would otherwise act on the terminal (or vanish
# from it) instead of being shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with each control character shown as its escape (a NUL as \\x00), as Python's
    repr writes it; newlines and tabs stay. The one terminal-safe escaping of everything shown:
    every line the CLI prints passes here, and renderers of data (results, ledger, AWS answers)
    apply it to each value before laying out a table."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class OrchestratorError(Exception):
    """Base of our errors: a message, an optional hint, an exit code. Credentials inside a
    URL in either are replaced by *** (`redact`)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        message = redact(message)
        super().__init__(message)
        self.message = message
        self.hint = None if hint is None else redact(hint)


class InputError(OrchestratorError):
    """Bad input from the user (spec, flag, file): exit 2."""

    exit_code = 2


class SpecError(InputError):
    """A spec that does not load or validate; holds every problem found, each located."""

    def __init__(self, problems: list[Problem], hint: str | None = None):
        self.problems = list(problems)
        lines = [p.render() for p in self.problems]
        super().__init__("\n".join(lines) if lines else "invalid spec", hint)


class BackendError(OrchestratorError):
    """The backend (SageMaker, S3, the local runner) refused or failed: exit 1.

    `code` is the service's machine-readable error code ("ThrottlingException",
    "ResourceLimitExceeded", "ResourceInUse", ...) and `http_status` its HTTP status: given to
    the constructor, or read from the botocore error this one was raised from (`raise ... from
    exc`); None when neither says. Callers that retry (sweeps, results) decide by these, not by
    the message text.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, code: str | None = None,
                 http_status: int | None = None):
        super().__init__(message, hint)
        self._code = code
        self._http_status = http_status

    def _response(self) -> dict:
        response = getattr(self.__cause__, "response", None)
        return response if isinstance(response, dict) else {}

    @property
    def code(self) -> str | None:
        if self._code is not None:
            return self._code
        found = self._response().get("Error", {}).get("Code")
        return str(found) if found else None

    @property
    def http_status(self) -> int | None:
        if self._http_status is not None:
            return self._http_status
        found = self._response().get("ResponseMetadata", {}).get("HTTPStatusCode")
        return found if isinstance(found, int) else None


class JobFailed(OrchestratorError):
    """A job ended in Failed or Stopped while we waited for it: exit 1."""

    exit_code = 1


# How much of a service's own text (error message, response body) goes into one of our errors.
MAX_SERVICE_MESSAGE = 300


@cache
def _html_patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern, re.Pattern]:
    """(an HTML page, its title, script/style/head, any tag): compiled on first use, since
    most commands never meet an HTML error page."""
    return (re.compile(r"<\s*(!doctype|html|head|body|title|h1|p|div|pre)\b", re.IGNORECASE),
            re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL),
            re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL),
            re.compile(r"<[^>]*>"))


def service_message(text, limit: int = MAX_SERVICE_MESSAGE) -> str:
    """Text a service sent (an error message, a response body) fit for one line of ours: an
    HTML page becomes its title and visible text, whitespace runs become one space, and more
    than `limit` characters end in "..."."""
    text = "" if text is None else str(text)
    page, title_of, noise, tag = _html_patterns()
    if page.search(text):
        import html

        title = title_of.search(text)
        body = tag.sub(" ", noise.sub(" ", title_of.sub(" ", text)))
        heading = tag.sub(" ", title.group(1)).strip() if title else ""
        text = html.unescape(f"{heading}: {body}" if heading else body)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


# Notes said while a command waits on something outside it (the ledger another process holds):
# the CLI points them at stderr (`set_notes`, at start, importing nothing else); the modules
# that wait call `note` and never print.
_notes: Callable[[str], None] | None = None


def set_notes(callback: Callable[[str], None] | None) -> None:
    """Where `note` says things (the CLI: stderr); None (the default) says nothing."""
    global _notes
    _notes = callback


def notes_heard() -> bool:
    """Whether a `note` reaches anyone (waiting in two parts to say so costs nothing then)."""
    return _notes is not None


def note(text: str) -> None:
    """Say `text` (one line) where `set_notes` pointed, if anywhere."""
    if _notes is not None:
        _notes(text)
