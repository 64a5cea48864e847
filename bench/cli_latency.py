"""How fast `validate` answers, relative to the cost of importing botocore.

Runs `python -m orchestrator validate <config>` and `python -c "import botocore.session"`
alternately (interleaved, so both see the same machine load), RUNS times each, and prints
one JSON object: both medians, their ratio, the goal (ratio at most 1.3), the run count and
the machine's load average before and after. A third command, timed in the same rounds, is the
floor any `validate` built on these libraries pays: a two-command typer app that imports PyYAML
and validates a one-field pydantic model (`floor_ratio`: its median over botocore's); what
`validate` costs above it is the orchestrator's own. The config is configs/vit-trn1-2xlarge.yaml, or
a minimal spec written to a temporary directory when the checkout lacks it. Run from
anywhere: `python bench/cli_latency.py`.

Both run with bytecode caches, as an installed package has them (pip compiles it): one
untimed run of each writes them, with PYTHONDONTWRITEBYTECODE unset for the children.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vit-trn1-2xlarge.yaml"
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
GOAL = 1.3
FALLBACK_SPEC = """\
name: vit-bench
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge}
compile_cache: {uri: s3://bench-bucket/compile-cache}
output: {uri: s3://bench-bucket/jobs}
"""
FLOOR_APP = """\
from pathlib import Path

import typer

app = typer.Typer()


@app.command()
def validate(path: Path = typer.Argument(...)) -> None:
    import yaml
    from pydantic import BaseModel

    class Spec(BaseModel):
        name: str

    print(Spec(name=str(yaml.safe_load(path.read_text())["name"])))


@app.command()
def other() -> None:
    pass


app()
"""


def timed(argv: list[str], env: dict, cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = CONFIG
        if not config.exists():
            config = Path(tmp) / "spec.yaml"
            config.write_text(FALLBACK_SPEC)
        env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(Path(tmp) / "home"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        validate = [sys.executable, "-m", "orchestrator", "validate", str(config)]
        botocore = [sys.executable, "-c", "import botocore.session"]
        floor_app = Path(tmp) / "floor_app.py"
        floor_app.write_text(FLOOR_APP)
        floor = [sys.executable, str(floor_app), "validate", str(config)]
        load_before = os.getloadavg()[0]
        # One untimed run of each writes the bytecode caches both then use.
        timed(validate, env, ROOT)
        timed(botocore, env, ROOT)
        timed(floor, env, ROOT)
        v, b, f = [], [], []
        for _ in range(RUNS):
            v.append(timed(validate, env, ROOT))
            b.append(timed(botocore, env, ROOT))
            f.append(timed(floor, env, ROOT))
        load_after = os.getloadavg()[0]
    v_med, b_med, f_med = statistics.median(v), statistics.median(b), statistics.median(f)
    print(json.dumps({
        "validate_median_s": round(v_med, 4),
        "botocore_import_median_s": round(b_med, 4),
        "ratio": round(v_med / b_med, 3),
        "goal": GOAL,
        "typer_floor_median_s": round(f_med, 4),
        "floor_ratio": round(f_med / b_med, 3),
        "runs": RUNS,
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "config": str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else "fallback spec",
    }))


if __name__ == "__main__":
    main()
