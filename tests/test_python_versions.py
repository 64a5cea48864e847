"""The Python versions the package declares are the ones its code runs on: vermin reads
orchestrator/ and entrypoints/ for the least Python each construct and library member needs
(hashlib.file_digest, for one, needs 3.11), against pyproject.toml's requires-python, which
ruff's target-version must match too."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from job_waits import patience

ROOT = Path(__file__).resolve().parents[1]


# Read as text: tomllib is 3.11's, and this test holds the code to 3.10.
PYPROJECT = (ROOT / "pyproject.toml").read_text()


def _declared() -> tuple[int, int]:
    found = re.search(r'^requires-python = ">=\s*3\.(\d+)"$', PYPROJECT, re.MULTILINE)
    assert found, "requires-python is not of the form >=3.N"
    return 3, int(found.group(1))


def test_ruff_targets_the_declared_python():
    major, minor = _declared()
    assert re.search(rf'^target-version = "py{major}{minor}"$', PYPROJECT, re.MULTILINE)


def test_the_code_needs_no_python_newer_than_declared():
    major, minor = _declared()
    vermin = Path(sys.executable).with_name("vermin")  # its console script, beside this Python
    done = subprocess.run([str(vermin), "--no-tips", "--eval-annotations", "--violations",
                           "--no-parse-comments", f"-t={major}.{minor}-", "orchestrator", "entrypoints"],
                          cwd=ROOT, capture_output=True, text=True, timeout=patience(300))
    assert done.returncode == 0, done.stdout + done.stderr
