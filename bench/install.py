"""Installing the environment two ways, from an empty cache into a new environment each:
pip (pyproject.toml's requirements, as the Makefile did before uv.lock) and uv (`make venv`:
uv.lock exactly). Prints one JSON object. Heavy: each way downloads the whole training
environment (about 7 GB), so `make bench` leaves it out.

    python bench/install.py [--keep]     # from the checkout's root
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict, cwd: Path) -> float:
    start = time.monotonic()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return time.monotonic() - start


def pip_way(work: Path) -> float:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for e in ("train", "dev") for d in project["optional-dependencies"][e]]
    (work / "requirements.txt").write_text("\n".join(deps) + "\n")
    env = dict(os.environ, PIP_NO_CACHE_DIR="1")
    venv = work / "pip-venv"
    return timed(["sh", "-c", f"{sys.executable} -m venv {venv} && {venv}/bin/python -m pip install -q "
                  f"-r {work / 'requirements.txt'}"], env, ROOT)


def uv_way(work: Path, name: str) -> float:
    env = dict(os.environ, UV_CACHE_DIR=str(work / "uv-cache"))
    return timed(["make", "venv", f"VENV={work / name}"], env, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the environments and caches")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-install-"))
    try:
        load = os.getloadavg()[0]
        pip_s = pip_way(work)
        uv_s = uv_way(work, "uv-venv")
        warm_s = uv_way(work, "uv-venv-2")  # a second new environment, the cache filled
        print(json.dumps({"pip_no_cache_s": round(pip_s, 1), "uv_empty_cache_s": round(uv_s, 1),
                          "uv_warm_cache_new_env_s": round(warm_s, 1), "speedup": round(pip_s / uv_s, 2),
                          "load_average_at_start": round(load, 1)}))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
