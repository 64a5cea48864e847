"""Benchmark: the status of many jobs, one job at a time (`status` each, the way a sweep's
refresh asked before issue 35, item 5) against all at once (`Backend.statuses`), for SageMaker
and AWS Batch, in one run.

Starts a `ThreadedMotoServer` on 127.0.0.1 in this process (fake credentials, a temporary
ORCHESTRATOR_HOME) and makes `--jobs` jobs in each service straight through its client, with
their ledger rows as a submit leaves them (the request, `submitted`): SageMaker training jobs,
and AWS Batch jobs in one queue (moto's docker runner off). Then, for each backend, on a fresh
backend each time (new clients, nothing cached: a new CLI process):

- one by one: `status(name)` of every job. For SageMaker this is DescribeTrainingJob and
  ListTags per job (the tags as `_tags` asks them, the way `status` read them before);
  for Batch, ListJobs (JOB_NAME filter) and DescribeJobs per job;
- at once: `statuses(names)`.

Between the two the ledger rows go back to `submitted`, so both record the same moves. The
calls each way made are counted per operation (a botocore event hook) and every answer is
checked (a JobStatus of that job, carrying its tags). `--latency-ms` adds that wait before
each call is sent (botocore's before-send event, on the calling thread), standing for AWS's
round trip, which moto on loopback does not have. Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/status_many.py [--jobs 1000] [--latency-ms 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loopback_aws import threaded_moto, use_fake_credentials  # noqa: E402
from sweep_submit import BASE, BUCKET  # noqa: E402

REGION = "us-east-1"
QUEUE = "bench-inf2-xlarge"
BATCH = f"""\
name: bench-batch
backend: batch
region: {REGION}
instance: {{type: inf2.xlarge}}
data: {{source: synthetic, num_workers: 1}}
compile_cache: {{uri: s3://{BUCKET}/cc}}
output: {{uri: s3://{BUCKET}/jobs}}
batch: {{job_queue: {QUEUE}, job_definition: bench-neuron-1chip}}
max_run_minutes: 30
"""


def counted(client) -> Counter:
    """Calls `client` makes from now on, by operation."""
    calls: Counter = Counter()
    client.meta.events.register("provide-client-params.*.*", lambda model, **_: calls.update([model.name]))
    return calls


def batch_queue(url: str) -> None:
    """A queue, its compute environment and a job definition in moto, its docker runner off."""
    import boto3

    body = json.dumps({"batch": {"use_docker": False}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/config", data=body, method="POST"),
                           timeout=30).read()
    iam, batch = boto3.client("iam"), boto3.client("batch", region_name=REGION)
    role = iam.create_role(RoleName="bench-batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    env = batch.create_compute_environment(computeEnvironmentName="bench-ce", type="UNMANAGED", state="ENABLED",
                                           serviceRole=role)
    batch.create_job_queue(jobQueueName=QUEUE, state="ENABLED", priority=1,
                           computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}])
    batch.register_job_definition(jobDefinitionName="bench-neuron-1chip", type="container",
                                  containerProperties={"image": "pytorch-training-neuronx", "vcpus": 4, "memory": 14745})


def make_jobs(kind: str, jobs: int, ledger) -> list[str]:
    """`jobs` jobs of `kind` made in the service, each with its ledger row `submitted`."""
    import boto3

    from orchestrator import request, spec
    from orchestrator.names import TAG_JOB

    prepared = request.prepare(spec.loads(BASE if kind == "sagemaker" else BATCH, "bench.yaml"))
    client = boto3.client(kind, region_name=REGION)
    names = []
    for i in range(jobs):
        name = f"bench-{kind}-{i:04d}"
        if kind == "sagemaker":
            tags = [t for t in prepared.request["Tags"] if t["Key"] != TAG_JOB] + [{"Key": TAG_JOB, "Value": name}]
            job = dict(prepared.request, TrainingJobName=name, Tags=tags)
        else:
            job = dict(prepared.request, jobName=name, tags={**prepared.request["tags"], TAG_JOB: name})
        ledger.record_intent(name, backend=kind, region=REGION, spec_hash=prepared.spec_hash, request=job)
        ledger.transition(name, "submitting", expect=("planned",))
        (client.create_training_job if kind == "sagemaker" else client.submit_job)(**job)
        ledger.transition(name, "submitted", expect=("submitting",))
        names.append(name)
    return names


def one_way(kind: str, names: list[str], ledger, at_once: bool, latency_s: float) -> dict:
    from orchestrator import backends
    from orchestrator.backends import JobStatus
    from orchestrator.names import TAG_JOB

    for name in names:  # both ways start from the rows a submit left
        ledger.transition(name, "submitted")
    backend = backends.create(kind, region=REGION, ledger=ledger)
    if kind == "sagemaker" and not at_once:
        backend._own_tags = backend._tags  # ListTags per job, as `status` asked before
    calls = counted(backend.client)
    if latency_s:
        backend.client.meta.events.register("before-send.*.*", lambda **_: time.sleep(latency_s))
    started = time.perf_counter()
    answers = backend.statuses(names) if at_once else {name: backend.status(name) for name in names}
    seconds = time.perf_counter() - started
    wrong = [n for n in names if not isinstance(answers.get(n), JobStatus) or answers[n].tags.get(TAG_JOB) != n]
    if wrong:
        raise SystemExit(f"{kind}: {len(wrong)} jobs without their status and tags, e.g. {wrong[0]}: "
                         f"{answers.get(wrong[0])!r}")
    return {"s": round(seconds, 2), "calls": dict(calls)}


def run(jobs: int, url: str, latency_s: float = 0.0) -> dict:
    import boto3

    from orchestrator.ledger import Ledger

    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    batch_queue(url)
    ledger = Ledger()
    result: dict = {"jobs": jobs, "latency_ms": round(latency_s * 1000)}
    for kind in ("sagemaker", "batch"):
        names = make_jobs(kind, jobs, ledger)
        by_one = one_way(kind, names, ledger, False, latency_s)
        at_once = one_way(kind, names, ledger, True, latency_s)
        result[kind] = {"one_by_one_s": by_one["s"], "at_once_s": at_once["s"],
                        "one_by_one_calls": by_one["calls"], "at_once_calls": at_once["calls"],
                        "speedup": round(by_one["s"] / max(at_once["s"], 0.01), 2)}
    result.update(load_average=os.getloadavg()[0], python=sys.version.split()[0])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added before each call is sent")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-status-many-"))
    use_fake_credentials()
    os.environ["ORCHESTRATOR_HOME"] = str(workdir / "home")
    with threaded_moto() as url:
        result = run(args.jobs, url, args.latency_ms / 1000)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
