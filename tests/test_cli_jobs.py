"""`orchestrator submit / status / logs / stop` against a loopback moto server: in-process
through `cli.main()`, and end to end as subprocesses reaching moto through AWS_ENDPOINT_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import moto_shim
import pytest
from botocore.stub import Stubber
from cli_harness import run_cli as _cli
from job_waits import patience

from orchestrator import backends, names, request, spec
from orchestrator.backends.sagemaker.backend import LOG_GROUP, SageMakerBackend
from orchestrator.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vit-trn1-2xlarge.yaml"
BUCKET = "orchestrator-example-bucket"
REGION = "us-east-1"
ACCOUNT = "123456789012"


def _moto_jobs() -> dict:
    return moto_shim.sagemaker_jobs(REGION, ACCOUNT)


def hook_sagemaker(monkeypatch, event: str, handler) -> None:
    """Register `handler` for the botocore `event` on the SageMaker client of every backend the
    CLI connects from now on (on top of hooks registered before)."""
    real_connect = SageMakerBackend.connect.__func__

    def connect(cls, region=None, **kw):
        backend = real_connect(cls, region, **kw)
        backend.sm.meta.events.register(event, handler)
        return backend

    monkeypatch.setattr(SageMakerBackend, "connect", classmethod(connect))


@pytest.fixture
def aws(moto_server, orch_home, monkeypatch):
    """The moto server with the example config's bucket; yields the CreateTrainingJob
    parameters the CLI's backend sent (hooked where the CLI builds its clients)."""
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    sent: list[dict] = []

    def record(params, **_):
        sent.append(json.loads(json.dumps(params, default=str)))

    hook_sagemaker(monkeypatch, "provide-client-params.sagemaker.CreateTrainingJob", record)
    return sent


@pytest.fixture
def prepared():
    return request.prepare(spec.load(CONFIG))


# --- submit -------------------------------------------------------------------------------------


def test_submit_creates_the_job_plan_showed(aws, prepared, monkeypatch, capsys):
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG))
    assert code == 0, err
    assert out.strip() == prepared.job_name
    assert aws == [json.loads(json.dumps(prepared.request))]
    assert prepared.estimate.describe() in err
    assert f"submitted to sagemaker in {REGION}" in err
    assert Ledger().get(prepared.job_name).status == "submitted"
    # What to do next: look at it, follow its output, or wait for it.
    assert (f"next: `python -m orchestrator status {prepared.job_name}` shows it, `python -m orchestrator logs -f "
            f"{prepared.job_name}` follows its output to the end, `python -m orchestrator submit {CONFIG} --wait` "
            "waits for it") in err

    # Again: same name, nothing new.
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG))
    assert code == 0 and out.strip() == prepared.job_name
    assert "nothing created" in err
    assert len(aws) == 1


def test_submit_dry_run_prints_what_plan_prints_and_sends_nothing(aws, monkeypatch, capsys):
    code, planned, _ = _cli(monkeypatch, capsys, "plan", str(CONFIG))
    assert code == 0
    code, dry, _ = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--dry-run")
    assert code == 0
    assert dry == planned
    assert aws == [] and _moto_jobs() == {}
    assert Ledger().entries() == []


def test_submit_refuses_a_spec_over_budget_once_with_exit_2(aws, tmp_path, monkeypatch, capsys):
    path = tmp_path / "pricey.yaml"
    text = CONFIG.read_text()
    assert "max_cost_usd: 40" in text
    path.write_text(text.replace("max_cost_usd: 40", "max_cost_usd: 0.5"))
    code, out, err = _cli(monkeypatch, capsys, "submit", str(path))
    assert code == 2 and out == ""
    assert err.count("N016-budget-exceeded") == 1
    assert f"{path}:" in err  # located in the spec
    assert aws == [] and Ledger().entries() == []


def test_submit_refuses_doctor_errors_with_exit_2(aws, tmp_path, monkeypatch, capsys):
    path = tmp_path / "inf2.yaml"
    path.write_text(CONFIG.read_text().replace("type: ml.trn1.2xlarge", "type: ml.inf2.xlarge"))
    code, _, err = _cli(monkeypatch, capsys, "submit", str(path))
    assert code == 2
    assert "ml.trn1.2xlarge" in err
    assert aws == []


def test_submit_rerun_refuses_doctor_errors_before_asking_sagemaker(aws, tmp_path, monkeypatch, capsys):
    listed = []
    hook_sagemaker(monkeypatch, "provide-client-params.sagemaker.ListTrainingJobs", lambda **kw: listed.append(1))
    path = tmp_path / "inf2.yaml"
    path.write_text(CONFIG.read_text().replace("type: ml.trn1.2xlarge", "type: ml.inf2.xlarge"))
    code, _, err = _cli(monkeypatch, capsys, "submit", str(path), "--rerun")
    assert code == 2 and "N001" in err
    assert aws == [] and listed == []


def test_submit_wait_follows_the_job_to_completion(aws, prepared, monkeypatch, capsys):
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--wait", "--interval", "0.05")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == prepared.job_name
    assert "status    completed (Completed)" in lines
    assert f"{prepared.job_name}: completed (Completed)" in err


def test_ctrl_c_while_waiting_says_the_job_keeps_running(aws, prepared, monkeypatch, capsys):
    import time

    def interrupted(_seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupted)
    hook_sagemaker(monkeypatch, "before-call.sagemaker.DescribeTrainingJob",  # keep the job running
                   lambda **_: setattr(_moto_jobs()[prepared.job_name], "training_job_status", "InProgress")
                   if prepared.job_name in _moto_jobs() else None)
    # No quota check: moto has no ListServiceQuotas, and botocore's retry of its 500 would
    # sleep, which this test turns into the Ctrl-C it means for the wait.
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--wait", "--interval", "5",
                          "--no-quota-check")
    assert code == 130
    assert f"{prepared.job_name} keeps running" in err and f"`python -m orchestrator stop {prepared.job_name}`" in err
    assert out.splitlines()[0] == prepared.job_name  # it was submitted before the wait


def test_submit_wait_exits_1_with_the_failure_reason(aws, prepared, monkeypatch, capsys):
    progress = iter([("InProgress", "Downloading", None), ("InProgress", "Training", None),
                     ("Failed", "Failed", "AlgorithmError: NEFF is invalid")])

    def advance(**_):
        job = _moto_jobs().get(prepared.job_name)
        step = next(progress, None) if job is not None else None  # not before the job exists
        if step is not None:
            job.training_job_status, job.secondary_status, failure = step
            if failure:
                job.failure_reason = failure

    hook_sagemaker(monkeypatch, "before-call.sagemaker.DescribeTrainingJob", advance)
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--wait", "--interval", "0.05")
    assert code == 1
    assert "failure   AlgorithmError: NEFF is invalid" in out
    assert f"error: job {prepared.job_name} failed: AlgorithmError: NEFF is invalid" in err
    assert f"`python -m orchestrator logs {prepared.job_name}`" in err
    # Every change was shown once, in order.
    shown = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[") and "m" in line[:8]]
    assert shown == [f"{prepared.job_name}: starting (Downloading)", f"{prepared.job_name}: running (Training)",
                     f"{prepared.job_name}: failed (Failed)"]
    assert Ledger().get(prepared.job_name).status == "failed"


# --- status, logs, stop ------------------------------------------------------------------------


def test_status_json_and_text_for_a_failed_job_exit_0(aws, prepared, monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0
    job = _moto_jobs()[prepared.job_name]
    job.training_job_status, job.secondary_status = "Failed", "Failed"
    job.failure_reason, job.billable_time_in_seconds = "OutOfMemory on algo-1", 77

    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name, "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["status"], data["secondary"], data["failure_reason"]) == ("failed", "Failed", "OutOfMemory on algo-1")
    assert (data["billable_seconds"], data["backend"], data["terminal"]) == (77, "sagemaker", True)
    assert data["tags"]["orchestrator:spec-hash"] == prepared.spec_hash

    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name)
    assert code == 0
    assert "status    failed (Failed)" in out and "failure   OutOfMemory on algo-1" in out
    assert "billable  77 s" in out


def test_status_shows_the_last_known_step_from_the_jobs_results(aws, prepared, monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0
    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name)
    assert code == 0 and "step " not in out  # no results.json yet: nothing to say
    job = _moto_jobs()[prepared.job_name]
    job.training_job_status, job.secondary_status = "InProgress", "Training"
    beat = {"schema": "orchestrator.results/v1", "status": "running", "steps_done": 120, "steps": 500,
            "heartbeat_at": "2026-11-29T22:03:00Z", "ended_at": None}
    key = f"jobs/results/{prepared.job_name}/results.json"
    boto3.client("s3", region_name=REGION).put_object(Bucket=BUCKET, Key=key, Body=json.dumps(beat).encode())
    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name)
    assert code == 0 and "step      120 of 500 (heartbeat 2026-11-29T22:03:00Z)" in out.splitlines()
    # Killed before its final record: the heartbeat is its last known step.
    job.training_job_status, job.secondary_status = "Stopped", "Stopped"
    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name, "--json")
    data = json.loads(out)
    assert data["status"] == "stopped"
    assert data["progress"] == {"record": "running", "steps_done": 120, "steps": 500,
                                "at": "2026-11-29T22:03:00Z", "uri": f"s3://{BUCKET}/{key}"}
    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name)
    assert ("step      120 of 500 (heartbeat 2026-11-29T22:03:00Z: its last known step (it ended before writing "
            "its final results))") in out


def test_status_of_a_job_outside_the_ledger_uses_region(aws, prepared, monkeypatch, capsys):
    boto3.client("sagemaker", region_name=REGION).create_training_job(**prepared.request)
    code, out, _ = _cli(monkeypatch, capsys, "status", prepared.job_name, "--region", REGION)
    assert code == 0 and "status    completed" in out
    code, _, err = _cli(monkeypatch, capsys, "status", prepared.job_name, "--region", "eu-west-1")
    assert code == 2
    assert f"no SageMaker training job named {prepared.job_name} in eu-west-1" in err


def test_logs_prints_every_host_merged(aws, prepared, monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0
    _seed(prepared.job_name, {"algo-1": ["a", "c"], "algo-2": ["b"]}, order=["a", "b", "c"])
    code, out, _ = _cli(monkeypatch, capsys, "logs", prepared.job_name)
    assert code == 0
    assert out.splitlines() == ["[algo-1] a", "[algo-2] b", "[algo-1] c"]


def _stub_in_progress(stub, job: str) -> None:
    """The answers for a job that is training and not in the ledger: DescribeTrainingJob for
    the CLI's question whether SageMaker has it (else AWS Batch is asked), then
    DescribeTrainingJob and ListTags for the command's status."""
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{job}"
    described = {
        "TrainingJobName": job, "TrainingJobArn": arn, "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training", "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600}, "ModelArtifacts": {"S3ModelArtifacts": "s3://orchestrator-example-bucket/jobs/output/model.tar.gz"},
        "CreationTime": 0}
    stub.add_response("describe_training_job", described, {"TrainingJobName": job})
    stub.add_response("describe_training_job", described, {"TrainingJobName": job})
    stub.add_response("list_tags", {"Tags": []}, {"ResourceArn": arn})


def test_stop_asks_sagemaker_to_stop(orch_home, monkeypatch, capsys):
    client = boto3.client("sagemaker", region_name=REGION)
    stub = Stubber(client)
    _stub_in_progress(stub, "vit-1")
    stub.add_response("stop_training_job", {}, {"TrainingJobName": "vit-1"})
    stub.activate()
    real = backends.create

    def create(name, *, region=None, **clients):
        assert (name, region) == ("sagemaker", "eu-central-1")
        return real(name, region=region, sagemaker_client=client, s3_client=None, logs_client=None, **clients)

    _replace_create(monkeypatch, create)
    code, out, _ = _cli(monkeypatch, capsys, "stop", "vit-1", "--region", "eu-central-1")
    assert code == 0 and out.strip() == "vit-1: stop requested"
    stub.assert_no_pending_responses()


def test_stop_refused_by_sagemaker_exits_1(orch_home, monkeypatch, capsys):
    # The job was training when asked, and ended before the stop reached SageMaker.
    client = boto3.client("sagemaker", region_name=REGION)
    stub = Stubber(client)
    _stub_in_progress(stub, "vit-1")
    stub.add_client_error("stop_training_job", service_error_code="ValidationException",
                          service_message="The training job is in status Completed.")
    stub.activate()
    real = backends.create
    _replace_create(monkeypatch, lambda name, *, region=None, **kw: real(
        name, region=region, sagemaker_client=client, s3_client=None, logs_client=None, **kw))
    code, _, err = _cli(monkeypatch, capsys, "stop", "vit-1")
    assert code == 1
    assert "error: StopTrainingJob vit-1: SageMaker refused the request: The training job is in status Completed." in err


@pytest.fixture
def no_stop(monkeypatch):
    """Fail the test if any backend is asked to stop a job (moto has no StopTrainingJob)."""
    from orchestrator.backends.local import LocalBackend

    def stop(self, job_name):
        raise AssertionError(f"asked to stop {job_name}")

    monkeypatch.setattr(SageMakerBackend, "stop", stop)
    monkeypatch.setattr(LocalBackend, "stop", stop)


@pytest.mark.parametrize("command", ["status", "logs", "stop"])
def test_a_mistyped_job_name_with_credentials_says_where_it_looked(aws, no_stop, orch_home, monkeypatch, capsys,
                                                                   command):
    hint = where_it_looked(monkeypatch, capsys, command, "no-such-job", orch_home,
                           f"and no SageMaker training job named no-such-job in {REGION}")
    assert hint.endswith("if it is a SageMaker or AWS Batch job in another region, pass --region")


def where_it_looked(monkeypatch, capsys, command: str, job: str, home, sagemaker: str) -> str:
    """Run `command job` for a name nobody knows; check the exit-2 error names the ledger, the
    local jobs folder and what SageMaker said (`sagemaker`); return the hint line."""
    code, out, err = _cli(monkeypatch, capsys, command, job)
    assert code == 2 and out == "" and "Traceback" not in err
    error, hint = err.rstrip("\n").split("\n")
    assert error == (f"error: no job {job}: it is in neither the ledger ({home / 'ledger.sqlite3'}) nor the local "
                     f"jobs ({home / 'jobs'}), {sagemaker}")
    assert hint.startswith(f"hint: check the name (`ls {home / 'jobs'}` lists the local jobs")
    return hint


def _local_job(home: Path, job: str, state: str) -> None:
    """A local job as the local backend leaves it once it has ended: its ledger row and status.json."""
    Ledger().record_intent(job, backend="local", region=REGION, spec_hash="0" * 64, request={})
    folder = home / "jobs" / job
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": state, "secondary": state.capitalize(),
                                                    "created": 1.0, "started": 2.0, "ended": 3.0}))


def test_stop_of_an_ended_job_says_so_on_both_backends(aws, prepared, no_stop, orch_home, monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0  # moto completes it at once
    code, out, err = _cli(monkeypatch, capsys, "stop", prepared.job_name)
    assert code == 0 and err == ""
    assert out.strip() == f"{prepared.job_name} already completed; nothing to stop"

    _local_job(orch_home, "local-done-1", "failed")
    code, out, _ = _cli(monkeypatch, capsys, "stop", "local-done-1")
    assert code == 0 and out.strip() == "local-done-1 already failed; nothing to stop"


def _replace_create(monkeypatch, create) -> None:
    """`create` in place of `backends.create`: the commands' own calls, and those of the
    registry's `locate` (status, logs, stop), which calls the registry's."""
    from orchestrator.backends import registry

    monkeypatch.setattr(backends, "create", create)
    monkeypatch.setattr(registry, "create", create)


def _quick_polls(monkeypatch, on_sleep=lambda: None) -> None:
    """Backends the CLI builds poll without waiting, calling `on_sleep` instead."""
    _replace_create(monkeypatch, lambda name, **kw: _REAL_CREATE(name, sleep=lambda _: on_sleep(), **kw))


_REAL_CREATE = backends.create


def test_logs_of_a_job_without_log_streams_says_so_on_stderr(aws, prepared, monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0
    _quick_polls(monkeypatch)
    job = prepared.job_name
    for args in (["logs", job], ["logs", job, "-f"]):
        code, out, err = _cli(monkeypatch, capsys, *args)
        assert code == 0 and out == ""  # stdout is for log lines only
        assert err.strip() == f"note: no log streams for {job} in {LOG_GROUP} (the job is completed)", args

    moto = _moto_jobs()[job]
    moto.training_job_status, moto.secondary_status = "InProgress", "Downloading"
    code, out, err = _cli(monkeypatch, capsys, "logs", job)
    assert code == 0 and out == ""
    assert err.strip() == f"note: no log streams for {job} in {LOG_GROUP} yet (the job is starting)"

    # Following: the note comes first (the wait may be long), then one when the job ended without logs.
    def finish():
        moto.training_job_status, moto.secondary_status = "Completed", "Completed"

    _quick_polls(monkeypatch, finish)
    code, out, err = _cli(monkeypatch, capsys, "logs", job, "--follow")
    assert code == 0 and out == ""
    assert err.splitlines() == [
        f"note: no log streams for {job} in {LOG_GROUP} yet (the job is starting); waiting for them (Ctrl-C stops)",
        f"note: no log streams for {job} in {LOG_GROUP} (the job is completed)"]


def test_logs_of_a_local_job_without_log_lines_says_so_on_stderr(orch_home, monkeypatch, capsys):
    _local_job(orch_home, "local-quiet-1", "completed")
    code, out, err = _cli(monkeypatch, capsys, "logs", "local-quiet-1")
    assert code == 0 and out == ""
    assert err.strip() == "note: no log lines for local-quiet-1 (the job is completed)"


# --- data in tables is shown verbatim, never read as rich markup ---------------------------------


BRACKETED_DETAILS = ["AlgorithmError: ExecuteUserScriptError: [/opt/ml/code/train.py] exited 1",
                     "[user] bad hyperparameter", "[capacity] no ml.trn1.2xlarge capacity [bold]now"]


def _bracketed_sweep(tmp_path: Path) -> Path:
    path = tmp_path / "brackets.yaml"
    path.write_text(f"sweep: brackets\nbase: {CONFIG}\nconcurrency: 1\ngrid:\n"
                    '  data.source: ["s3://qa-bucket/[/a]"]\n  environment.EXPERIMENT: ["[/a]", "[bold]x", "[red]"]\n')
    # (Not a tag axis: SageMaker refuses brackets in tags, and the doctor says so, N029.)
    return path


def test_sweep_plan_shows_bracketed_grid_values_verbatim(orch_home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = _cli(monkeypatch, capsys, "sweep", "plan", str(_bracketed_sweep(tmp_path)))
    assert code == 0, err
    assert out.count("data.source=s3://qa-bucket/[/a] ") == 3  # overrides one per line
    for value in ("[/a]", "[bold]x", "[red]"):
        assert f"environment.EXPERIMENT={value} " in out


def test_sweep_status_shows_bracketed_details_verbatim(orch_home, tmp_path, monkeypatch, capsys):
    from orchestrator import sweep as sweeps

    monkeypatch.setenv("COLUMNS", "300")
    ledger = Ledger()
    planned = sweeps.plan(spec.load_sweep(_bracketed_sweep(tmp_path)))
    definition = sweeps.save(planned, ledger)
    for trial, detail in zip(planned.trials, BRACKETED_DETAILS, strict=True):
        ledger.transition(trial.job_name, "failed", detail=detail)
    code, out, err = _cli(monkeypatch, capsys, "sweep", "status", definition.sweep_id, "--no-refresh")
    assert code == 0, err
    for detail in BRACKETED_DETAILS:
        assert detail in out
    assert "environment.EXPERIMENT=[bold]x" in out


def test_live_sweep_display_shows_bracketed_text_verbatim():
    import io
    import types

    from rich.console import Console

    from orchestrator.cli.sweep import SweepDisplay

    views = [types.SimpleNamespace(trial=types.SimpleNamespace(trial_id=f"t{i}", backend="[be]"), job_name=f"[job]-{i}",
                                   instance_type="ml.[/x]", status="failed", detail=detail)
             for i, detail in enumerate(BRACKETED_DETAILS)]
    # Trials on two backends: the backend column is shown, verbatim too.
    display = SweepDisplay(types.SimpleNamespace(views=lambda: views, d=types.SimpleNamespace(backends=("a", "b"))))
    progress = types.SimpleNamespace(counts={"failed": 3}, sweep_id="[b]s", total=3, in_flight=0, elsewhere=0,
                                     waiting_reason="[capacity] backing off", events=["12:00:00 [user] refused"])
    console = Console(file=io.StringIO(), width=300)
    console.print(display.render(progress))
    shown = console.file.getvalue()
    for text in [*BRACKETED_DETAILS, "[job]-0", "ml.[/x]", "[be]", "sweep [b]s", "[capacity] backing off",
                 "[user] refused"]:
        assert text in shown


# --- end to end: subprocesses reaching moto through AWS_ENDPOINT_URL ------------------------------


def _run(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=patience(120))


def test_cli_end_to_end_in_subprocesses(moto_server, orch_home, prepared):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    assert env["AWS_ENDPOINT_URL"] == moto_server and moto_server.startswith("http://127.0.0.1:")

    done = _run("submit", str(CONFIG), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == prepared.job_name
    # What reached the (fake) service is our request: the archive at its content address, the job.
    bucket, key = prepared.source_uri[5:].split("/", 1)
    assert boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read() == prepared.archive
    job = _moto_jobs()[prepared.job_name]
    assert job.resource_config == prepared.request["ResourceConfig"]
    assert job.hyper_parameters == prepared.request["HyperParameters"]
    assert Ledger().get(prepared.job_name).request == prepared.request

    job.training_job_status, job.secondary_status = "InProgress", "Training"
    done = _run("status", prepared.job_name, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["status"], json.loads(done.stdout)["secondary"]) == ("running", "Training")
    assert Ledger().get(prepared.job_name).status == "running"

    _seed(prepared.job_name, {"algo-1": ["step 10 loss=6.9"], "algo-2": ["step 10 loss=6.8"]},
          order=["step 10 loss=6.8", "step 10 loss=6.9"])
    job.training_job_status, job.secondary_status = "Completed", "Completed"
    done = _run("logs", prepared.job_name, "--follow", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[algo-2] step 10 loss=6.8", "[algo-1] step 10 loss=6.9"]

    done = _run("status", "no-such-job", env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no SageMaker training job named no-such-job in us-east-1" in done.stderr


def test_cli_unreachable_endpoint_is_exit_1_without_traceback(orch_home, tmp_path):
    # A job the ledger knows is on SageMaker: not reaching it is a backend failure.
    Ledger().record_intent("vit-1", backend="sagemaker", region=REGION, spec_hash="0" * 64, request={})
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")
    done = _run("status", "vit-1", env=env)
    assert done.returncode == 1
    assert "cannot reach the AWS endpoint" in done.stderr and "Traceback" not in done.stderr
    # A name nobody knows here: still a network failure (exit 1), not "no such job" (issue 14);
    # the error says the name is known neither in the ledger nor locally.
    done = _run("status", "vit-2", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: DescribeTrainingJob: cannot reach the AWS endpoint")
    assert ("; vit-2 is in neither the ledger" in done.stderr
            and "so only SageMaker in us-east-1 could say whether it exists" in done.stderr)
    assert "no job vit-2" not in done.stderr


def _seed(job: str, hosts: dict[str, list[str]], order: list[str]) -> None:
    """Put each host's messages in its stream, timestamped so that `order` is the time order."""
    logs = boto3.client("logs", region_name=REGION)
    try:
        logs.create_log_group(logGroupName=LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    base = int(time.time() * 1000) - 60_000  # CloudWatch drops events older than 14 days
    for host, messages in hosts.items():
        stream = f"{job}/{host}-1700000000"
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream,
                            logEvents=[{"timestamp": base + 10 * order.index(m), "message": m} for m in messages])


def test_submit_rerun_makes_a_new_job_of_the_same_spec(aws, prepared, monkeypatch, capsys):
    first = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--rerun")
    again = _cli(monkeypatch, capsys, "submit", str(CONFIG))
    second = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--rerun")
    third = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--rerun")
    assert [r[0] for r in (first, again, second, third)] == [0, 0, 0, 0]
    hash8 = prepared.spec_hash[:8]
    assert first[1].strip() == prepared.job_name  # never submitted: the plain name
    assert again[1].strip() == prepared.job_name and "nothing created" in again[2]
    assert second[1].strip() == f"{prepared.job_name}-r1"
    assert third[1].strip() == f"{prepared.job_name}-r2"
    assert [call["TrainingJobName"] for call in aws] == [
        prepared.job_name, f"vit-trn1-2xlarge-{hash8}-r1", f"vit-trn1-2xlarge-{hash8}-r2"]
    # The rerun is the same request under another name (its job file, hence its source archive
    # in the code channel, names the job too, and so does its TensorBoard output folder).
    def same_part(call: dict) -> dict:
        rest = {k: v for k, v in call.items() if k not in ("TrainingJobName", "HyperParameters", "Tags")}
        rest["InputDataConfig"] = [c for c in rest["InputDataConfig"] if c["ChannelName"] != "code"]
        board = rest.pop("TensorBoardOutputConfig")
        assert board["S3OutputPath"] == f"s3://orchestrator-example-bucket/jobs/tensorboard/{call['TrainingJobName']}"
        return {**rest, "TensorBoardLocalPath": board["LocalPath"]}

    assert same_part(aws[1]) == same_part(aws[0])
    codes = [next(c for c in call["InputDataConfig"] if c["ChannelName"] == "code") for call in aws]
    assert len({c["DataSource"]["S3DataSource"]["S3Uri"] for c in codes}) == 3


def test_submit_dry_run_rerun_shows_the_name_the_real_submit_uses(aws, prepared, orch_home, monkeypatch, capsys):
    # Never submitted (no ledger yet): the plain name, and the dry run creates no ledger.
    code, out, _ = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--dry-run", "--rerun")
    assert code == 0 and f'"TrainingJobName": "{prepared.job_name}"' in out
    assert not (orch_home / "ledger.sqlite3").exists()
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0
    code, out, _ = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--dry-run", "--rerun")
    assert code == 0 and f'"TrainingJobName": "{prepared.job_name}-r1"' in out
    assert len(aws) == 1 and len(Ledger().entries()) == 1  # the dry run sent and recorded nothing
    code, out, _ = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--rerun")
    assert code == 0 and out.strip() == f"{prepared.job_name}-r1" == aws[-1]["TrainingJobName"]


def test_submit_rerun_from_a_fresh_home_picks_the_first_name_free_in_sagemaker(aws, prepared, orch_home, tmp_path,
                                                                              monkeypatch, capsys):
    """Another laptop submitted the spec and three reruns (one stopped): this ledger knows none
    of them, SageMaker does. --rerun takes -r4, creates it, and --wait follows the new job."""
    sm = boto3.client("sagemaker", region_name=REGION)
    taken = [prepared.job_name] + [names.rerun_job_name(prepared.spec, n) for n in (1, 2, 3)]
    for name in taken:
        sm.create_training_job(**{**prepared.request, "TrainingJobName": name})
    _moto_jobs()[taken[2]].training_job_status = "Stopped"
    assert not (orch_home / "ledger.sqlite3").exists()
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--dry-run", "--rerun")
    assert code == 0 and f'"TrainingJobName": "{prepared.job_name}-r4"' in out
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--rerun", "--wait", "--interval", "0.05")
    assert code == 0, err
    assert out.splitlines()[0] == f"{prepared.job_name}-r4"
    assert "submitted to sagemaker" in err and "nothing created" not in err
    assert [call["TrainingJobName"] for call in aws] == [f"{prepared.job_name}-r4"]
    assert "status    completed" in out
    # The name SageMaker has but a listing missed is still caught by DescribeTrainingJob.
    from orchestrator import reruns

    class Lagging:
        name = "sagemaker"

        def job_names(self, containing, *, in_flight=False):
            return []

        def exists(self, name):
            return name in _moto_jobs()

    assert reruns.rerun_name(prepared.spec, set(), Lagging()) == f"{prepared.job_name}-r5"


def test_submit_rerun_of_a_54_character_name_fits_63(aws, tmp_path, monkeypatch, capsys):
    name = "v" * 50 + "-b16"
    path = tmp_path / "long.yaml"
    path.write_text(CONFIG.read_text().replace("name: vit-trn1-2xlarge", f"name: {name}"))
    first = _cli(monkeypatch, capsys, "submit", str(path))
    assert first[0] == 0 and len(first[1].strip()) == 63
    for n in (1, 2):
        code, out, err = _cli(monkeypatch, capsys, "submit", str(path), "--rerun")
        assert code == 0, err
        rerun = out.strip()
        assert len(rerun) <= 63 and rerun.endswith(f"{first[1].strip()[-9:]}-r{n}")
        assert rerun == aws[-1]["TrainingJobName"] and names.JOB_NAME_PATTERN.match(rerun)


# --- arguments are checked before any AWS call ------------------------------------------------


@pytest.fixture
def no_backend(orch_home, monkeypatch):
    """backends.create, recording the regions asked for and stopping there (exit 1): no AWS call."""
    from orchestrator.errors import BackendError

    asked: list = []

    def create(name, *, region=None, **_):
        asked.append((name, region))
        raise BackendError("stub backend: not called in this test")

    _replace_create(monkeypatch, create)
    return asked


@pytest.mark.parametrize("command", ["status", "logs", "stop"])
@pytest.mark.parametrize("job", ["", "a b c", "x" * 64, "a" * 200, "../../etc/passwd", "vit_1", "vit-", "vit.1"])
def test_job_arguments_that_are_not_job_names_exit_2_before_any_call(no_backend, monkeypatch, capsys, command, job):
    code, out, err = _cli(monkeypatch, capsys, command, job)
    assert code == 2 and out == ""
    assert "error: JOB " in err and "is not a job name" in err and "1-63" in err and "Traceback" not in err
    assert no_backend == []


@pytest.mark.parametrize("region", ["Mars", "us-east", "us_east_1", "useast1", "", "us-east-1 ", "eu-west-1/x"])
def test_region_values_that_are_not_region_names_exit_2_before_any_call(no_backend, monkeypatch, capsys, region):
    for args in (["status", "vit-1"], ["logs", "vit-1"], ["stop", "vit-1"]):
        code, _, err = _cli(monkeypatch, capsys, *args, "--region", region)
        assert code == 2 and f"error: --region {region!r} is not an AWS region name" in err
    assert no_backend == []


@pytest.mark.parametrize("region", ["us-east-1", "us-gov-west-1", "cn-north-1", "ap-southeast-5", "eu-isoe-west-1"])
def test_real_region_shapes_are_accepted(no_backend, monkeypatch, capsys, region):
    code, _, err = _cli(monkeypatch, capsys, "status", "vit-1", "--region", region)
    assert code == 1 and "stub backend" in err
    assert no_backend == [("sagemaker", region)]
    # One rule for regions everywhere: a spec and `prices refresh` take the same names.
    from orchestrator import prices
    from orchestrator import spec as specs

    prices.check_known([], [region])
    assert specs.loads(f"name: x\nbackend: local\nregion: {region}\n").region == region


def test_infra_and_prices_regions_are_checked_before_any_call(orch_home, monkeypatch, capsys):
    from orchestrator import infra, prices

    def no_call(*_, **__):
        raise AssertionError("an AWS client was made")

    monkeypatch.setattr(infra, "make_client", no_call)
    monkeypatch.setattr(prices, "client", no_call)
    for args in (["infra", "outputs"], ["infra", "policy"], ["infra", "deploy"], ["prices", "refresh"],
                 ["prices", "refresh", "--region", "us-east-1"]):
        code, _, err = _cli(monkeypatch, capsys, *args, "--region", "eu west 1")
        assert code == 2 and "error: --region 'eu west 1' is not an AWS region name" in err, (args, err)


def test_region_help_names_the_variables_the_code_reads():
    import typer.main

    from orchestrator import cli
    from orchestrator.region import REGION_DEFAULTS

    # One order everywhere (region.default_region), told by one string.
    told = ("AWS_REGION, else AWS_DEFAULT_REGION, else the region of your AWS config profile (AWS_PROFILE), "
            "else us-east-1")
    assert REGION_DEFAULTS == told
    group = typer.main.get_command(cli.app)
    for path in (["status"], ["logs"], ["stop"], ["infra", "deploy"], ["infra", "outputs"], ["infra", "policy"],
                 ["results"], ["prices", "refresh"]):
        command = group
        for name in path:
            command = command.commands[name]
        option = next(p for p in command.params if "--region" in p.opts)
        assert f"default: {told})" in option.help and "botocore does not read" not in option.help, path


def test_status_of_a_local_job_without_its_folder_points_at_the_jobs_folder(orch_home, monkeypatch, capsys):
    Ledger().record_intent("local-job-1", backend="local", region="us-east-1", spec_hash="0" * 64, request={})
    code, _, err = _cli(monkeypatch, capsys, "status", "local-job-1")
    assert code == 2 and "no local job named local-job-1" in err
    assert "`orchestrator status`" not in err and f"hint: each local job has a folder in {orch_home / 'jobs'}" in err


# --- --debug ------------------------------------------------------------------------------------


def test_debug_shows_the_traceback_and_keeps_the_exit_code_and_hint(no_backend, tmp_path, monkeypatch, capsys):
    code, out, err = _cli(monkeypatch, capsys, "--debug", "status", "vit_1")
    assert code == 2 and out == ""
    lines = err.rstrip("\n").splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert any(line.startswith("orchestrator.errors.InputError: JOB 'vit_1' is not a job name") for line in lines)
    assert lines[-1].startswith("hint: use the job name `submit` printed")
    # A spec error is exit 2 too, with or without --debug.
    assert _cli(monkeypatch, capsys, "--debug", "validate", str(tmp_path / "typo.yaml"))[0] == 2
    # A backend error keeps its exit 1.
    code, _, err = _cli(monkeypatch, capsys, "--debug", "status", "vit-1")
    assert code == 1 and "BackendError: stub backend" in err


# --- a job name nobody here knows, and one the ledger knows better than the backend ------------


@pytest.fixture
def no_credentials(orch_home, monkeypatch):
    """No AWS credentials anywhere (the conftest already keeps config files and IMDS out)."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: no credentials to sign with
    return orch_home


@pytest.mark.parametrize("command", ["status", "logs", "stop"])
def test_a_mistyped_job_name_without_credentials_is_exit_2_naming_where_it_looked(
        no_credentials, monkeypatch, capsys, command):
    hint = where_it_looked(monkeypatch, capsys, command, "local-smoke-typo", no_credentials,
                           f"and SageMaker in {REGION} could not be asked: DescribeTrainingJob: no usable AWS "
                           "credentials (Unable to locate credentials)")
    assert "if it is a SageMaker job, configure credentials" in hint


def test_a_job_the_ledger_knows_without_credentials_stays_a_backend_error(no_credentials, monkeypatch, capsys):
    Ledger().record_intent("vit-1", backend="sagemaker", region=REGION, spec_hash="0" * 64, request={})
    code, _, err = _cli(monkeypatch, capsys, "status", "vit-1")
    assert code == 1 and err.startswith("error: DescribeTrainingJob: no usable AWS credentials")


def test_a_local_job_without_its_ledger_row_is_found_in_the_jobs_folder(no_credentials, monkeypatch, capsys):
    folder = no_credentials / "jobs" / "local-done-2"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": "completed", "secondary": "Completed",
                                                    "created": 1.0, "started": 2.0, "ended": 3.0}))
    code, out, err = _cli(monkeypatch, capsys, "status", "local-done-2", "--json")
    assert code == 0, err
    assert (json.loads(out)["backend"], json.loads(out)["status"]) == ("local", "completed")


def test_status_of_a_sweep_job_whose_submit_failed_says_what_the_ledger_knows(aws, monkeypatch, capsys):
    ledger = Ledger()
    ledger.record_intent("sw-1a2b3c4d-t0000000a", backend="sagemaker", region=REGION, spec_hash="0" * 64,
                         request={}, sweep_id="sw-1a2b3c4d", trial_id="t0000000a")
    ledger.transition("sw-1a2b3c4d-t0000000a", "failed",
                      detail="[permanent] CreateTrainingJob: SageMaker refused the request: bad role")
    code, _, err = _cli(monkeypatch, capsys, "status", "sw-1a2b3c4d-t0000000a")
    assert code == 2
    assert ("error: no SageMaker training job named sw-1a2b3c4d-t0000000a in us-east-1; the ledger records "
            "sw-1a2b3c4d-t0000000a (sagemaker, us-east-1) as failed: [permanent] CreateTrainingJob: SageMaker "
            "refused the request: bad role") in err
    assert "hint: `python -m orchestrator sweep status sw-1a2b3c4d` shows its trial" in err
    assert "check the job name" not in err

    ledger.record_intent("plain-1", backend="sagemaker", region=REGION, spec_hash="0" * 64, request={})
    ledger.transition("plain-1", "planned", detail="CreateTrainingJob plain-1: access denied")
    code, _, err = _cli(monkeypatch, capsys, "logs", "plain-1")
    assert code == 2 and "the ledger records plain-1 (sagemaker, us-east-1) as planned (never created: " \
        "CreateTrainingJob plain-1: access denied)" in err


def test_a_plain_submit_that_failed_says_it_was_never_created_and_to_submit_again(aws, monkeypatch, capsys):
    ledger = Ledger()
    ledger.record_intent("plain-2", backend="sagemaker", region=REGION, spec_hash="0" * 64, request={})
    ledger.transition("plain-2", "planned", detail="CreateTrainingJob plain-2: access denied")
    for command in ("status", "logs", "stop"):
        code, out, err = _cli(monkeypatch, capsys, command, "plain-2")
        assert code == 2 and out == "" and "Traceback" not in err
        assert "as planned (never created: CreateTrainingJob plain-2: access denied)" in err
        assert "hint: the job was never created: fix that, then submit its spec again " \
            "(`python -m orchestrator submit SPEC`)" in err
        assert "check the job name" not in err and "check the name" not in err


def _queued_trial(job: str) -> None:
    """A sweep trial waiting for its turn, as the sweep runner plans it: planned, no detail."""
    Ledger().record_intent(job, backend="sagemaker", region=REGION, spec_hash="0" * 64, request={},
                           status="planned", sweep_id="sw-1a2b3c4d", trial_id=job.rsplit("-", 1)[-1])


def test_a_queued_sweep_trial_reads_as_not_submitted_yet(aws, monkeypatch, capsys):
    _queued_trial("sw-1a2b3c4d-t0000000b")
    code, _, err = _cli(monkeypatch, capsys, "status", "sw-1a2b3c4d-t0000000b")
    assert code == 2
    assert "as planned (not submitted yet)" in err and "never created" not in err
    assert ("hint: `python -m orchestrator sweep status sw-1a2b3c4d` shows its trial; the sweep's runner submits "
            "it in its turn") in err


def test_stop_of_a_trial_cancelled_before_submission_has_nothing_to_stop(aws, no_stop, monkeypatch, capsys):
    from orchestrator.sweep import STOPPED_BEFORE_SUBMISSION

    _queued_trial("sw-1a2b3c4d-t0000000b")
    Ledger().transition("sw-1a2b3c4d-t0000000b", "stopped", detail=STOPPED_BEFORE_SUBMISSION)
    code, out, err = _cli(monkeypatch, capsys, "stop", "sw-1a2b3c4d-t0000000b")
    assert code == 0, err
    assert out.strip() == ("sw-1a2b3c4d-t0000000b: the ledger records it as stopped: [stopped] by sweep stop before "
                           "submission, and the sagemaker backend has no job of this name; nothing to stop")
    assert Ledger().get("sw-1a2b3c4d-t0000000b").status == "stopped"
    # A trial still to come is not "nothing to stop": the backend has no job to stop yet (exit 2).
    _queued_trial("sw-1a2b3c4d-t0000000c")
    assert _cli(monkeypatch, capsys, "stop", "sw-1a2b3c4d-t0000000c")[0] == 2


def test_region_of_a_job_the_ledger_knows_is_the_ledgers(aws, prepared, orch_home, monkeypatch, capsys):
    assert _cli(monkeypatch, capsys, "submit", str(CONFIG))[0] == 0  # in us-east-1; moto completes it
    code, out, err = _cli(monkeypatch, capsys, "status", prepared.job_name, "--region", "eu-west-1")
    assert code == 0 and "status    completed" in out
    assert err == (f"note: --region eu-west-1 ignored: the ledger ({orch_home / 'ledger.sqlite3'}) records "
                   f"{prepared.job_name} on SageMaker in {REGION}\n")
    code, out, err = _cli(monkeypatch, capsys, "status", prepared.job_name, "--region", REGION)
    assert code == 0 and err == ""


@pytest.mark.parametrize("command", ["status", "logs", "stop"])
def test_a_damaged_local_status_file_is_exit_2_naming_it(orch_home, monkeypatch, capsys, command):
    _local_job(orch_home, "local-bad-1", "running")
    status_file = orch_home / "jobs" / "local-bad-1" / "status.json"
    status_file.write_text("{bad")
    code, out, err = _cli(monkeypatch, capsys, command, "local-bad-1")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"error: {status_file}: the local job's status file is damaged: not JSON")
    assert f"rm -r {status_file.parent}) to forget it" in err


# --- one region default for every command that calls AWS -----------------------------------------


@pytest.fixture
def profile_region(tmp_path, monkeypatch) -> str:
    """Only the AWS config profile names a region: no AWS_REGION, no AWS_DEFAULT_REGION."""
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = ap-south-1\n\n[profile work]\nregion = eu-north-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "work")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    return "eu-north-1"


@pytest.fixture
def clients_made(monkeypatch) -> list:
    """(service, region) of every boto3 client made from a Session, made as asked."""
    made: list = []
    real = boto3.session.Session.client

    def client(self, service, *args, **kwargs):
        made.append((service, kwargs.get("region_name") or self.region_name))
        return real(self, service, *args, **kwargs)

    monkeypatch.setattr(boto3.session.Session, "client", client)
    return made


def test_every_command_that_calls_aws_takes_the_profiles_region(
        moto_server, orch_home, profile_region, clients_made, monkeypatch, capsys):
    from orchestrator import prices

    for command in ("status", "logs", "stop"):
        code, _, err = _cli(monkeypatch, capsys, command, "vit-9")
        assert code == 2 and f"no SageMaker training job named vit-9 in {profile_region}" in err, err
    assert ("sagemaker", profile_region) in clients_made

    clients_made.clear()
    code, _, err = _cli(monkeypatch, capsys, "infra", "outputs")
    assert code == 2 and f"no stack 'orchestrator' in region {profile_region}" in err, err
    assert clients_made == [("cloudformation", profile_region)]

    # A fresh session: boto3's default one has read another config file before this test.
    boto3.session.Session(region_name=REGION).client("s3").create_bucket(Bucket=BUCKET)
    clients_made.clear()
    code, _, err = _cli(monkeypatch, capsys, "results", "--prefix", f"s3://{BUCKET}/jobs", "--sweep", "sw")
    assert code == 2 and "no results for sweep sw" in err, err
    assert ("sagemaker", profile_region) in clients_made  # where the sweep's jobs were listed

    asked: list = []

    def fetch(client, types, regions):
        asked.extend(regions)
        return prices.Refresh(as_of="2026-01-01")

    monkeypatch.setattr(prices, "fetch", fetch)
    code, _, err = _cli(monkeypatch, capsys, "prices", "refresh", "--types", "ml.trn1.2xlarge")
    assert code == 1 and asked == [profile_region], err

    # AWS_DEFAULT_REGION, then AWS_REGION, win over the profile; --region over both.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert _cli(monkeypatch, capsys, "prices", "refresh", "--types", "ml.trn1.2xlarge")[0] == 1
    monkeypatch.setenv("AWS_REGION", "eu-west-2")
    assert _cli(monkeypatch, capsys, "prices", "refresh", "--types", "ml.trn1.2xlarge")[0] == 1
    assert _cli(monkeypatch, capsys, "prices", "refresh", "--types", "ml.trn1.2xlarge", "--region", "eu-west-3")[0] == 1
    assert asked == [profile_region, "eu-west-1", "eu-west-2", "eu-west-3"]


def test_a_profile_that_does_not_exist_is_exit_2_without_a_traceback(orch_home, monkeypatch, capsys):
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    for args in (["status", "vit-9"], ["infra", "outputs"], ["prices", "refresh"]):
        code, _, err = _cli(monkeypatch, capsys, *args)
        assert code == 2 and "Traceback" not in err, (args, err)
        assert "error: cannot read the AWS configuration: The config profile (no-such-profile) could not be found" in err
        assert "hint: fix or unset AWS_PROFILE" in err


def test_concurrent_reruns_never_report_each_others_job_as_their_own(aws, prepared, monkeypatch, capsys):
    """QA: three concurrent `submit --rerun` made two jobs, one saying `already submitted ...
    nothing created` of the job another had just made. Here another submit takes the chosen
    name between the choice and this submit: this one takes the next free name instead."""
    from orchestrator import backends, reruns

    choose = reruns.rerun_name
    raced: list[str] = []

    def chosen_then_taken(loaded, ledger_names, backend=None, **kwargs):
        name = choose(loaded, ledger_names, backend, **kwargs)
        if not raced:  # the other process's submit of the same name lands first
            raced.append(name)
            backends.create("sagemaker", region=REGION).submit(request.prepare(spec.load(CONFIG), job_name=name))
        return name

    monkeypatch.setattr(reruns, "rerun_name", chosen_then_taken)
    code, out, err = _cli(monkeypatch, capsys, "submit", str(CONFIG), "--rerun")
    assert code == 0, err
    assert raced == [prepared.job_name]
    assert out.strip() == f"{prepared.job_name}-r1" and "nothing created" not in err
    assert f"note: {prepared.job_name} was taken by a concurrent submit meanwhile; trying the next free name" in err
    assert [call["TrainingJobName"] for call in aws] == [prepared.job_name, f"{prepared.job_name}-r1"]
