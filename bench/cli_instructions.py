"""`validate` against importing botocore, in instructions executed: the cli_latency comparison
made without the machine's noise.

Wall times on a shared machine move by more than the few milliseconds a change to `validate`'s
start-up is worth (cli_latency.py's ratio ranges over 0.2 between runs at load 2-3). The count of
instructions a process executes does not depend on the load: this script runs the same three
commands as cli_latency.py (`validate` on the example config, `import botocore.session`, the
typer + PyYAML + pydantic floor app) under valgrind's callgrind, once each with PYTHONHASHSEED=0
after an untimed run that writes the bytecode caches, and prints one JSON object: each
command's instruction count, the ratios to botocore's, and the load. Needs valgrind on PATH;
each run takes about a minute. `python bench/cli_instructions.py`.

The counts are not times: per instruction, importing botocore costs about as much wall time as
the others (docs/BENCHMARKS.md fits the three on one line), so the ratios of counts track the
ratios of quiet-machine medians, but they are not the same number.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cli_latency import CONFIG, FALLBACK_SPEC, FLOOR_APP, GOAL, ROOT


def instructions(argv: list[str], env: dict) -> int:
    """Instructions `argv` executes (callgrind's "Collected"), run in the checkout."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], env=env,
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        config = CONFIG
        if not config.exists():
            config = Path(tmp) / "spec.yaml"
            config.write_text(FALLBACK_SPEC)
        env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(Path(tmp) / "home"), PYTHONHASHSEED="0")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        floor_app = Path(tmp) / "floor_app.py"
        floor_app.write_text(FLOOR_APP)
        commands = {
            "validate": [sys.executable, "-m", "orchestrator", "validate", str(config)],
            "botocore": [sys.executable, "-c", "import botocore.session"],
            "floor": [sys.executable, str(floor_app), "validate", str(config)],
        }
        load_before = os.getloadavg()[0]
        for argv in commands.values():  # bytecode caches, and the catalog's cache of botocore's model
            subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        counts = {name: instructions(argv, env) for name, argv in commands.items()}
        load_after = os.getloadavg()[0]
    print(json.dumps({
        "validate_instructions": counts["validate"],
        "botocore_import_instructions": counts["botocore"],
        "typer_floor_instructions": counts["floor"],
        "ratio": round(counts["validate"] / counts["botocore"], 3),
        "floor_ratio": round(counts["floor"] / counts["botocore"], 3),
        "above_floor": counts["validate"] - counts["floor"],
        "goal": GOAL,
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "config": str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else "fallback spec",
    }))


if __name__ == "__main__":
    main()
