"""What the sweep tests share: specs to sweep, `FakeCloud` (an in-memory backend with SageMaker's name
uniqueness and the intent-first ledger protocol; jobs move only when a test says so), a fake clock,
the moto SageMaker backend with unique names, and ways to drive the sweep commands."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import moto_shim
import pytest
from job_waits import patience

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.backends import JobStatus, Submitted, UnknownJob
from orchestrator.errors import BackendError, SpecError
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]


BASE = """\
name: vit-base
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge, count: 1}
image: {neuron_sdk: "2.30.0"}
model: {arch: vit_base_patch16_224, patch_embed: linear}
training:
  runtime: xla
  steps: 100
  warmup_steps: 5
  batch_size: 32
  optimizer: {name: adam, lr: 1.0e-4}
compile_cache: {uri: s3://sweep-bucket/compile-cache, mode: tarball}
output: {uri: s3://sweep-bucket/jobs}
max_run_minutes: 60
"""


SWEEP = """\
sweep: demo
base: base.yaml
grid:
  instance.type: [ml.trn1.2xlarge, ml.trn1.32xlarge]
  training.batch_size: [16, 32]
concurrency: 2
"""


def write(tmp_path: Path, sweep_text: str, base_text: str = BASE) -> Path:
    (tmp_path / "base.yaml").write_text(base_text)
    path = tmp_path / "sweep.yaml"
    path.write_text(sweep_text)
    return path


def load(tmp_path: Path, sweep_text: str, base_text: str = BASE) -> spec.SweepSpec:
    return spec.load_sweep(write(tmp_path, sweep_text, base_text))


def problems_of(tmp_path: Path, sweep_text: str, base_text: str = BASE) -> list:
    with pytest.raises(SpecError) as info:
        sweeps.plan(load(tmp_path, sweep_text, base_text))
    return info.value.problems


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def cli_run(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          timeout=patience(120), cwd=cwd, env=env)


class FakeCloud:
    """A backend with SageMaker's name uniqueness and the intent-first ledger protocol; jobs
    move only when the test says so. `refuse` holds errors the next submits raise."""

    name = "sagemaker"
    # No other machine submits to it: nothing to adopt, no job in flight elsewhere.
    shared = False
    place = "the fake cloud"

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.jobs: dict[str, dict] = {}
        self.creates: Counter = Counter()
        self.refuse: list[BackendError] = []
        self.stopped: list[str] = []
        self.max_in_flight = 0
        self.submit_calls = 0

    def quota_clients(self, attempts=None):
        return None  # no service quotas: the quota check reads none

    def submit(self, prepared) -> Submitted:
        self.submit_calls += 1
        name = prepared.job_name
        entry = self.ledger.record_intent(name, backend=self.name, region="us-east-1", spec_hash=prepared.spec_hash,
                                          request=prepared.request)
        if entry.status not in ("planned", "submitting"):
            return Submitted(name, created=False)
        self.ledger.transition(name, "submitting", expect=("planned",))
        if name in self.jobs:
            self.ledger.transition(name, "submitted", expect=("submitting",))
            return Submitted(name, created=False)
        if self.refuse:
            error = self.refuse.pop(0)
            if error.http_status and error.http_status < 500:
                self.ledger.transition(name, "planned", expect=("submitting",))
            raise error
        self.jobs[name] = {"status": "pending", "reason": None, "request": prepared.request}
        self.creates[name] += 1
        self.ledger.transition(name, "submitted", expect=("submitting",))
        self.max_in_flight = max(self.max_in_flight, self.in_flight())
        return Submitted(name, created=True)

    def in_flight(self) -> int:
        return sum(1 for j in self.jobs.values() if j["status"] in ("pending", "starting", "running"))

    def status(self, job_name: str) -> JobStatus:
        if job_name not in self.jobs:
            raise UnknownJob(f"no job {job_name}")
        job = self.jobs[job_name]
        tags = {t["Key"]: t["Value"] for t in job["request"]["Tags"]}
        return JobStatus(job_name, job["status"], failure_reason=job["reason"], tags=tags,
                         instance_type=job["request"]["ResourceConfig"]["InstanceType"],
                         billable_seconds=job.get("billable"))

    def stop(self, job_name: str) -> None:
        self.stopped.append(job_name)
        self.jobs[job_name]["status"] = "stopped"

    def finish(self, job_name: str, status: str = "completed", reason: str | None = None) -> None:
        self.jobs[job_name].update(status=status, reason=reason)

    def finish_all(self) -> None:
        for job in self.jobs.values():
            if job["status"] in ("pending", "running"):
                job["status"] = "completed"

    def instance_of(self, job_name: str) -> str:
        return self.jobs[job_name]["request"]["ResourceConfig"]["InstanceType"]


def refusal(code: str, status: int = 400) -> BackendError:
    return BackendError(f"CreateTrainingJob: {code}", code=code, http_status=status)


class Clock:
    def __init__(self):
        self.now = 1_800_000_000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def rig(tmp_path, orch_home):
    """(runner factory, cloud, clock): a saved sweep on a FakeCloud with a fake clock."""
    ledger = Ledger()
    cloud = FakeCloud(ledger)
    clock = Clock()

    def make(text: str = SWEEP, base: str = BASE, **options) -> sweeps.Runner:
        planned = sweeps.plan(load(tmp_path, text, base))
        definition = sweeps.save(planned, ledger)
        options.setdefault("poll_seconds", 5.0)
        return sweeps.Runner(definition, cloud, ledger, sleep=clock.sleep, clock=clock,
                             rng=random.Random(0), **options)

    return make, cloud, clock


def states(runner: sweeps.Runner) -> dict[str, str]:
    return {v.job_name: v.status for v in runner.views()}


def sweep_stop(runner):
    """What `python -m orchestrator sweep stop` does to a runner's sweep: the flag, then the stop."""
    sweeps.request_stop(runner.ledger, runner.d.sweep_id)
    return sweeps.stop(runner)


class UniqueNames:
    """A sagemaker client that answers a second create of a name with ResourceInUse, as
    SageMaker does (moto overwrites silently), and can lose the answer of the next create."""

    def __init__(self, client, creates: Counter):
        self._client = client
        self.creates = creates
        self.lose_next_answer = False
        self.refuse: list[str] = []  # error codes the next creates answer with

    def __getattr__(self, name):
        return getattr(self._client, name)

    def create_training_job(self, **request):
        from botocore.exceptions import ClientError, EndpointConnectionError

        name = request["TrainingJobName"]
        if self.refuse:
            code = self.refuse.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": f"{code} (scripted)"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "CreateTrainingJob")
        if self.creates[name]:
            raise ClientError({"Error": {"Code": "ResourceInUse", "Message": f"Training job {name} already exists"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "CreateTrainingJob")
        answer = self._client.create_training_job(**request)
        self.creates[name] += 1
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1")
        return answer


def moto_backend(ledger: Ledger, creates: Counter):
    import boto3

    from orchestrator.backends.sagemaker import SageMakerBackend

    sm = UniqueNames(boto3.client("sagemaker", region_name="us-east-1"), creates)
    return SageMakerBackend(sm, boto3.client("s3", region_name="us-east-1"),
                            boto3.client("logs", region_name="us-east-1"), ledger=ledger), sm


def set_moto_status(name: str, status: str) -> None:
    moto_shim.sagemaker_jobs("us-east-1")[name].training_job_status = status


@pytest.fixture
def bucket(moto_server):
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="sweep-bucket")
    return "sweep-bucket"


LOCAL_BASE = """\
name: fake
backend: local
instance: {type: ml.trn1.2xlarge, count: 1}
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 64, num_heads: 2, num_classes: 10}
training: {runtime: native, steps: 6, warmup_steps: 1, batch_size: 4, precision: fp32, workers_per_node: 1}
data: {source: synthetic, num_workers: 0}
compile_cache: {mode: "off"}
max_run_minutes: 10
"""


def invoke(*args):
    """The CLI in this process (ORCHESTRATOR_HOME from `orch_home`); our errors stay exceptions."""
    from typer.testing import CliRunner

    from orchestrator import cli

    return CliRunner().invoke(cli.app, list(args))


def local_sweep(tmp_path, trials: str = "[4, 8]") -> tuple[Path, sweeps.Definition]:
    path = write(tmp_path, f"sweep: loc\nbase: base.yaml\ngrid:\n  training.batch_size: {trials}\nconcurrency: 2\n",
                 LOCAL_BASE)
    return path, sweeps.save(sweeps.plan(spec.load_sweep(path)), Ledger())
