"""What the launcher's tests share: a job made from a small local spec, and one host's
container tree with the launcher run on it (`python -m entrypoints.launcher.launch`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from job_waits import patience

from entrypoints.launcher import environment, torchrun
from entrypoints.shared import compile_cache, contract
from orchestrator import names, request, spec
from orchestrator.backends.local.layout import free_port

ROOT = Path(__file__).resolve().parents[1]

SPEC = """
name: {name}
backend: local
instance: {{type: {itype}, count: {count}}}
model: {{arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 32, num_heads: 2,
         num_classes: 10}}
training: {{runtime: native, compile: true, steps: 12, warmup_steps: 2, batch_size: 4, precision: fp32,
           workers_per_node: {workers}}}
data: {{source: synthetic, num_workers: 0}}
compile_cache: {{mode: "{mode}", push_interval_s: {push}}}
tags: {{team: vision}}
"""

def make_job(name: str = "lt", workers: int = 2, mode: str = "tarball", itype: str = "ml.trn1.2xlarge",
             count: int = 1, push: int = 60) -> dict:
    loaded = spec.loads(SPEC.format(name=name, workers=workers, mode=mode, itype=itype, count=count, push=push))
    return request.resolved_job(loaded, names.job_name(loaded))


class Host:
    """One host's container tree under tmp, and the launcher run on it."""

    def __init__(self, base: Path, job: dict, host: str = "algo-1", hosts: tuple[str, ...] = ("algo-1",)):
        self.root = base / host
        self.root.mkdir(parents=True)
        self.job = job
        self.job_file = self.root / "job.json"
        self.job_file.write_text(json.dumps(job))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SM_")}
        self.env.update(contract.sm_environment(self.root, list(hosts), host, job["instance"]["type"], {}, []))
        self.env[contract.MASTER_ADDR_ENV] = "127.0.0.1"
        self.env[torchrun.MASTER_PORT_ENV] = str(free_port())

    def run(self, *args: str, cwd: Path = ROOT, argv: list[str] | None = None, **extra: str):
        env = {**self.env, **extra}
        command = argv or [sys.executable, "-m", "entrypoints.launcher.launch", "--job", str(self.job_file), *args]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=patience(180))

    @property
    def results(self) -> dict:
        return json.loads((self.root / contract.OUTPUT_DATA_DIR / "results.json").read_text())

    def rank(self, rank: int) -> dict:
        return json.loads((self.root / contract.OUTPUT_DATA_DIR / "ranks" / f"rank-{rank}.json").read_text())

    @property
    def failure(self) -> str | None:
        path = self.root / contract.FAILURE_FILE
        return path.read_text() if path.exists() else None

    def cache_key(self, runtime: str = "native"):
        """The key the launcher computes for this host (same environment, same job)."""
        ctr = contract.Contract.from_env(self.env)
        env = environment.runtime_environment(self.job, ctr, self.env)
        world = ctr.num_nodes * self.job["workers_per_node"]
        return compile_cache.key_for(runtime, environment.cache_target(runtime, self.job, env), world, env)



def contract_for(hosts: list[str], current: str, itype: str = "ml.trn1n.32xlarge") -> contract.Contract:
    return contract.Contract.from_env(contract.sm_environment(Path("/x"), hosts, current, itype, {}, []))
