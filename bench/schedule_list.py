"""Benchmark: `schedule list` of a cloud schedule whose run is RUNNING with `--trials` trials
(issue 35, item 5), its jobs read by the backends' list calls (as `schedule list` does) against
one DescribeTrainingJob per possible job (each trial's first job, then -r1, -r2, ... until one
is not found), on the same moto server.

Starts a `ThreadedMotoServer` on 127.0.0.1 in this process (fake credentials, a temporary
ORCHESTRATOR_HOME), makes a schedule stack whose outputs are a deploy's (the JobListing output
of the same shape) and a RUNNING execution of its state machine, then creates the run's
SageMaker training jobs by CreateTrainingJob with the names the run gives them: of the trials,
40 % in progress, 15 % completed, 10 % failed (half capacity, half the algorithm), 5 % failed
once and retried (-r1 in progress), 30 % with no job yet. Each way is timed over `--rounds`
rounds and its AWS calls counted by operation; both must find the same trials in the same
states. `--latency-ms` adds a modelled round trip to every call (a botocore before-send sleep),
as a real endpoint's, in a second comparison. Last, `python -m orchestrator schedule list` is
run as a user runs it (a child process, its imports included, against the same server; no
modelled latency) and must print one line per trial with a job. Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/schedule_list.py [--trials 1000] [--rounds 3] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from loopback_aws import threaded_moto, use_fake_credentials  # noqa: E402

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/orchestrator-schedule"
FIRED = "2026-12-05T03:00:00Z"
CAPACITY = "CapacityError: Unable to provision requested ML compute capacity."
ALGORITHM = "AlgorithmError: ExecuteUserScriptError: exit status 1"


def make_run(trials: int) -> tuple[str, list[str], dict[str, tuple[str, str]]]:
    """The stack, its running execution and the run's jobs in moto; returns (job prefix, trial
    ids, trial -> (latest job, its status))."""
    import boto3
    import moto_shim

    from orchestrator.names import Identity
    from orchestrator.schedule import in_aws_stack
    from orchestrator.schedule import statemachine as sm

    identity = Identity("bench-list", "0123abcd", sm.PLACEHOLDER_LABEL)
    listing = json.dumps({"jobs": identity.job_prefix, "trials": trials, "places": {"sagemaker": []}})
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(name="orchestrator-schedule-bench-list", roleArn=ROLE, definition=json.dumps(
        {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}))["stateMachineArn"]
    outputs = {"StateMachineArn": machine, in_aws_stack.LISTING_OUTPUT: listing, "Cron": "0 3 * * *",
               "Timezone": "UTC"}
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="orchestrator-schedule-bench-list", TemplateBody=json.dumps({
            "Resources": {"DeadLetterQueue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {k: {"Value": v} for k, v in outputs.items()}}))
    sfn.start_execution(stateMachineArn=machine, input=json.dumps(sm.execution_input(FIRED)))
    prefix = identity.job_prefix.replace(sm.PLACEHOLDER_LABEL, sm.run_label(json.dumps({"scheduled_time": FIRED}),
                                                                            datetime.now(timezone.utc)))
    client = boto3.client("sagemaker", region_name=REGION)
    base = {"AlgorithmSpecification": {"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
                                       "TrainingInputMode": "File"},
            "RoleArn": ROLE, "OutputDataConfig": {"S3OutputPath": "s3://bench/out"},
            "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}}
    records = moto_shim.sagemaker_jobs(REGION)

    def make(name: str, status: str, reason: str | None = None) -> None:
        client.create_training_job(TrainingJobName=name, **base)
        records[name].training_job_status, records[name].failure_reason = status, reason

    from orchestrator.names import TRIAL_HEX

    ids = [f"t{i:0{TRIAL_HEX}x}" for i in range(trials)]  # trial ids as `names.trial_id` makes them
    expected: dict[str, tuple[str, str]] = {}
    for i, trial in enumerate(ids):
        name, share = f"{prefix}-{trial}", i % 20
        if share < 8:
            make(name, "InProgress")
        elif share < 11:
            make(name, "Completed")
        elif share < 13:
            make(name, "Failed", CAPACITY if share == 11 else ALGORITHM)
        elif share < 14:
            make(name, "Failed", CAPACITY)
            name = f"{name}-r1"
            make(name, "InProgress")
        else:
            continue
        expected[trial] = (name, records[name].training_job_status)
    return prefix, ids, expected


def counting(latency_s: float) -> tuple[dict, collections.Counter]:
    import boto3

    calls: collections.Counter = collections.Counter()
    clients = {}
    for service in ("cloudformation", "stepfunctions", "sagemaker"):
        client = boto3.client(service, region_name=REGION)
        client.meta.events.register("before-call", lambda model, **_: calls.update([model.name]))
        if latency_s > 0:
            client.meta.events.register("before-send", lambda **_: time.sleep(latency_s))
        clients[service] = client
    return clients, calls


def by_listing(latency_s: float) -> tuple[dict, collections.Counter]:
    """`schedule list`'s own reading (`schedule.in_aws.deployed`)."""
    from orchestrator.schedule import in_aws

    clients, calls = counting(latency_s)
    [item] = in_aws.deployed(REGION, clients=clients)
    if item.jobs_problem or item.problem:
        raise SystemExit(f"listing failed: {item.jobs_problem or item.problem}")
    return {j["trial"]: (j["job"], j["status"]) for j in item.jobs}, calls


def by_describing(prefix: str, ids: list[str], latency_s: float) -> tuple[dict, collections.Counter]:
    """One DescribeTrainingJob per possible job: each trial's first, then its retries until a
    name is not found (what a reader without list calls must do)."""
    from botocore.exceptions import ClientError

    clients, calls = counting(latency_s)
    client = clients["sagemaker"]
    found = {}
    for trial in ids:
        n = 0
        while True:
            name = f"{prefix}-{trial}" + (f"-r{n}" if n else "")
            try:
                described = client.describe_training_job(TrainingJobName=name)
            except ClientError:
                break
            found[trial] = (name, described["TrainingJobStatus"])
            n += 1
    return found, calls


def compare(prefix: str, ids: list[str], expected: dict, rounds: int, latency_s: float) -> dict:
    out = {}
    for way, run in (("listing", lambda: by_listing(latency_s)),
                     ("describing", lambda: by_describing(prefix, ids, latency_s))):
        seconds = []
        for _ in range(rounds):
            started = time.perf_counter()
            found, calls = run()
            seconds.append(time.perf_counter() - started)
            if found != expected:
                raise SystemExit(f"{way}: {len(found)} trials read, {len(expected)} expected, or states differ")
        out[way] = {"best_s": round(min(seconds), 3), "median_s": round(sorted(seconds)[len(seconds) // 2], 3),
                    "calls": sum(calls.values()), "by_operation": dict(sorted(calls.items()))}
    out["speedup"] = round(out["describing"]["best_s"] / out["listing"]["best_s"], 1)
    return out


def cli_seconds(with_jobs: int, rounds: int) -> list[float]:
    """Wall seconds of `python -m orchestrator schedule list` in a child process, each round."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "orchestrator", "schedule", "list", "--region", REGION],
                              capture_output=True, text=True, env=env, timeout=600)
        seconds.append(round(time.perf_counter() - started, 2))
        lines = [line for line in done.stdout.splitlines() if line.startswith("  t")]
        if done.returncode != 0 or len(lines) != with_jobs:
            raise SystemExit(f"schedule list: exit {done.returncode}, {len(lines)} trial lines: {done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0,
                        help="a modelled round trip per call for a second comparison (0: none)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-schedule-list-"))
    use_fake_credentials()
    os.environ["ORCHESTRATOR_HOME"] = str(workdir / "home")
    with threaded_moto():
        started = time.perf_counter()
        prefix, ids, expected = make_run(args.trials)
        setup_s = time.perf_counter() - started
        report = {"trials": args.trials, "with_jobs": len(expected), "jobs_made_s": round(setup_s, 1),
                  "loopback": compare(prefix, ids, expected, args.rounds, 0.0)}
        if args.latency_ms > 0:
            report["with_latency"] = {"latency_ms": args.latency_ms,
                                      **compare(prefix, ids, expected, 1, args.latency_ms / 1000)}
        report["cli_s"] = cli_seconds(len(expected), args.rounds)
    report["load_average"] = round(os.getloadavg()[0], 2)
    report["python"] = sys.version.split()[0]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
