"""How often `plan` steps between the backend registry and the rest (issue 34, "resolve once").

Runs `python -m orchestrator plan <config>` in this process under `sys.setprofile` and prints
JSON: `entries`, the calls from code outside orchestrator/backends/ into the registry's
functions (`orchestrator/backends/__init__.py`, or `backends/registry.py` where it lives);
`climbs`, the calls from a backend's own code (orchestrator/backends/**, the registry and the
interface modules excepted) into a function of an orchestrator module outside backends/; and
where each entry came from. Usage: python bench/plan_walk.py [configs/vit-trn1-2xlarge.yaml]
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = str(ROOT / "orchestrator" / "backends") + "/"
REGISTRY = {str(ROOT / "orchestrator" / "backends" / name) for name in ("__init__.py", "registry.py")}
# The interface and the job values: protocols and data, not a backend's code.
INTERFACE = {str(ROOT / "orchestrator" / "backends" / name) for name in ("planning.py", "running.py", "job.py")}
ORCHESTRATOR = str(ROOT / "orchestrator") + "/"


def main() -> None:
    config = sys.argv[1] if len(sys.argv) > 1 else "configs/vit-trn1-2xlarge.yaml"
    sys.path.insert(0, str(ROOT))
    from orchestrator.cli import main as cli_main

    entries: Counter = Counter()
    climbs: Counter = Counter()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_code.co_filename
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        if callee in REGISTRY and not caller.startswith(BACKENDS) and caller.startswith(ORCHESTRATOR):
            where = f"{Path(caller).relative_to(ROOT)}:{frame.f_back.f_code.co_name}"
            entries[f"{where} -> {frame.f_code.co_name}"] += 1
        elif (caller.startswith(BACKENDS) and caller not in REGISTRY | INTERFACE
              and callee.startswith(ORCHESTRATOR) and not callee.startswith(BACKENDS)):
            climbs[f"{Path(caller).relative_to(ROOT)} -> {Path(callee).relative_to(ROOT)}"] += 1

    argv = sys.argv
    sys.argv = ["orchestrator", "plan", config]
    out = io.StringIO()
    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli_main()
    finally:
        sys.setprofile(None)
        sys.argv = argv
    print(json.dumps({"config": config, "entries": sum(entries.values()), "climbs": sum(climbs.values()),
                      "entry_sites": len(entries), "climb_sites": len(climbs),
                      "by_entry": dict(entries), "by_climb": dict(climbs)}, indent=1))


if __name__ == "__main__":
    main()
