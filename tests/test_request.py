"""The CreateTrainingJob request: deterministic, valid per botocore, and true to the contract."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import ParamValidator
from cli_harness import run_cli as _cli
from job_waits import patience

from entrypoints.shared import contract
from orchestrator import catalog, locations, names, request, sourcedir, spec
from orchestrator.backends.sagemaker import request as sagemaker_request
from orchestrator.errors import InputError, SpecError

ROOT = Path(__file__).resolve().parents[1]

BASE = """\
name: req-test
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge}
image: {neuron_sdk: "2.30.0"}
compile_cache: {uri: s3://orchestrator-example-bucket/cc}
output: {uri: s3://orchestrator-example-bucket/jobs}
max_run_minutes: 60
tags: {team: vision}
"""


@pytest.fixture(autouse=True)
def _isolated_home(orch_home):
    return orch_home


def _spec(base: str = BASE, **overrides):
    loaded = spec.loads(base, "job.yaml")
    return spec.with_overrides(loaded, overrides) if overrides else loaded


def _job_specs() -> list[Path]:
    out = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        data, _ = spec.read_yaml(path.read_text(), str(path))
        if isinstance(data, dict) and "sweep" not in data:
            out.append(path)
    return out


def _input_shape():
    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model("CreateTrainingJob").input_shape


def _strict(value, shape, where: str = "") -> list[str]:
    """What botocore's ParamValidator leaves out: max lengths, patterns, enums (the service checks them)."""
    problems = []
    meta = shape.metadata
    if shape.type_name == "structure":
        for key, item in value.items():
            problems += _strict(item, shape.members[key], f"{where}.{key}")
    elif shape.type_name == "list":
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where}: {len(value)} items > {meta['max']}")
        for i, item in enumerate(value):
            problems += _strict(item, shape.member, f"{where}[{i}]")
    elif shape.type_name == "map":
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where}: {len(value)} entries > {meta['max']}")
        for key, item in value.items():
            problems += _strict(key, shape.key, f"{where}<key {key}>")
            problems += _strict(item, shape.value, f"{where}.{key}")
    elif shape.type_name == "string":
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where}: length {len(value)} > {meta['max']}")
        if "enum" in meta and value not in meta["enum"]:
            problems.append(f"{where}: {value!r} not in enum")
        pattern = meta.get("pattern")
        # Java's \p{...} classes have no Python spelling; those few patterns are left to the service.
        if pattern and "\\p{" not in pattern and not re.fullmatch(pattern, value):
            problems.append(f"{where}: {value!r} does not match {pattern}")
    elif shape.type_name == "integer":
        if "max" in meta and value > meta["max"]:
            problems.append(f"{where}: {value} > {meta['max']}")
    return problems


def _validate(req: dict) -> None:
    shape = _input_shape()
    report = ParamValidator().validate(req, shape)
    assert not report.has_errors(), report.generate_report()
    assert _strict(req, shape, "CreateTrainingJob") == []


def test_strict_checker_catches_what_param_validator_misses():
    req = _build(_spec())
    req["ResourceConfig"]["InstanceType"] = "ml.inf2.xlarge"
    req["TrainingJobName"] = "x" * 64
    assert not ParamValidator().validate(req, _input_shape()).has_errors()
    problems = _strict(req, _input_shape())
    assert any("InstanceType" in p for p in problems) and any("TrainingJobName" in p for p in problems)


# --- job names ---------------------------------------------------------------------


def test_job_name_is_name_and_hash_prefix():
    s = _spec()
    name = names.job_name(s)
    assert name == f"req-test-{spec.spec_hash(s)[:8]}"
    assert names.job_name(_spec()) == name
    assert names.job_name(_spec(**{"training.steps": 501})) != name
    assert names.job_name(s, suffix="t003") == "req-test-t003"


def test_job_name_limits():
    long = _spec(name="a" * 54)
    assert len(names.job_name(long)) == 63
    with pytest.raises(InputError, match="63"):
        names.job_name(long, suffix="123456789")
    with pytest.raises(InputError, match="not valid"):
        names.job_name(_spec(), suffix="trial_1")


def test_rerun_names_keep_the_hash_and_always_fit_63_characters():
    s = _spec()
    assert names.rerun_job_name(s, 1) == f"{names.job_name(s)}-r1"
    # A 54-character name: the plain job name is already 63 long, so the name part gives way.
    long = _spec(name="a" * 50 + "-bcd")
    hash8 = spec.spec_hash(long)[:8]
    for n in (1, 9, 10, 12345):
        name = names.rerun_job_name(long, n)
        assert len(name) <= 63 and names.JOB_NAME_PATTERN.match(name), name
        assert name.endswith(f"-{hash8}-r{n}") and name.startswith("a" * 40)
    # The cut falls on the name's dash: it is dropped, never doubled before the hash.
    assert names.rerun_job_name(long, 1) == f"{'a' * 50}-{hash8}-r1"
    assert names.rerun_job_name(long, 100000) == f"{'a' * 46}-{hash8}-r100000"
    # A rerun number so long that even the hash and it overflow 63 characters.
    with pytest.raises(InputError, match="leaves no room") as info:
        names.rerun_job_name(s, 10 ** 60)
    assert "change any field of the spec" in info.value.hint


# --- the job file ------------------------------------------------------------------


def test_resolved_job_follows_the_contract_schema(tmp_path):
    s = _spec()
    name = names.job_name(s)
    job = request.resolved_job(s, name)
    assert set(job) == {"schema", "job_name", "spec_hash", "spec", "instance", "workers_per_node",
                        "compile_cache", "results_uri", "environment", "tags"}
    path = tmp_path / contract.JOB_FILE
    path.write_text(json.dumps(job))
    assert contract.load_job(path) == job
    assert job["schema"] == contract.JOB_FILE_SCHEMA and job["spec_hash"] == spec.spec_hash(s)
    # A spec without mlflow: leaves it out of the job file (the archive's bytes stay as before).
    assert job["spec"] == s.model_dump(mode="json", exclude={"mlflow"})
    assert job["instance"] == {"type": "ml.trn1.2xlarge", "family": "trn1", "neuron_cores": 2,
                               "logical_cores": 2, "lnc": 1, "vcpus": 8}
    assert job["workers_per_node"] == 2
    assert job["compile_cache"] == {"uri": "s3://orchestrator-example-bucket/cc", "mode": "tarball",
                                    "push_interval_s": 60}
    assert job["results_uri"] == f"s3://orchestrator-example-bucket/jobs/results/{name}/results.json"
    assert job["tags"] == {"team": "vision", "orchestrator:spec-hash": spec.spec_hash(s), "orchestrator:job": name}


@pytest.mark.parametrize(("itype", "lnc", "workers"), [
    ("ml.trn1.32xlarge", None, 32), ("ml.trn1n.32xlarge", None, 32),
    ("ml.trn2.48xlarge", None, 64), ("ml.trn2.48xlarge", 1, 128),
])
def test_workers_default_to_logical_cores(itype, lnc, workers):
    s = _spec(**{"instance.type": itype, "instance.lnc": lnc})
    assert request.resolved_job(s, "x-1")["workers_per_node"] == workers


def test_local_job_defaults_to_the_local_store(orch_home):
    s = _spec("name: req-local\nbackend: local\n")
    job = request.resolved_job(s, "req-local-1")
    assert job["workers_per_node"] == 1
    assert job["compile_cache"]["uri"] == f"file://{orch_home}/store/compile-cache"
    assert job["results_uri"] == f"file://{orch_home}/store/jobs/results/req-local-1/results.json"
    assert job["environment"] == {}


def test_extra_tags_are_added():
    job = request.resolved_job(_spec(), "x-1", extra_tags={"orchestrator:sweep": "instances"})
    assert job["tags"]["orchestrator:sweep"] == "instances"


# --- the job's environment, as sent -------------------------------------------------


def test_the_compile_cache_key_follows_the_flags_as_sent():
    from entrypoints.shared import compile_cache

    def key(s):
        job = request.prepare(s).job
        return compile_cache.key_for("xla", job["instance"]["family"], 2, job["environment"])

    default, generic = key(_spec()), key(_spec(environment={"NEURON_CC_FLAGS": "--model-type=generic"}))
    assert default.flags == "--model-type=transformer" and generic.flags == "--model-type=generic"
    assert default.digest() != generic.digest()


# --- the request -------------------------------------------------------------------


def _build(s, source="s3://orchestrator-example-bucket/jobs/source/0123456789abcdef/sourcedir.tar.gz"):
    name = names.job_name(s)
    job = request.resolved_job(s, name)
    where = dataclasses.replace(locations.of(s, name), source=source)
    return sagemaker_request.build(s, job_name=name, where=where, job=job,
                                   hyperparameters=request.hyperparameters(s, name), target=catalog.resolve(s))


def test_request_shape():
    s = _spec()
    req = _build(s)
    name = names.job_name(s)
    assert req["TrainingJobName"] == name
    algo = req["AlgorithmSpecification"]
    assert algo["TrainingImage"] == catalog.image("2.30.0").uri("us-east-1")
    assert algo["TrainingInputMode"] == "File"
    assert req["RoleArn"] == s.role_arn
    assert req["OutputDataConfig"] == {"S3OutputPath": "s3://orchestrator-example-bucket/jobs"}
    assert req["ResourceConfig"] == {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100}
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600}
    assert req["EnableManagedSpotTraining"] is False
    assert req["Environment"] == catalog.resolve(s).environment
    # The code travels as the `code` channel; synthetic data needs no other.
    assert [c["ChannelName"] for c in req["InputDataConfig"]] == ["code"]
    for absent in ("CheckpointConfig", "RetryStrategy"):
        assert absent not in req
    _validate(req)


def test_the_container_entrypoint_unpacks_the_code_channel_and_execs_launch_py():
    source = "s3://orchestrator-example-bucket/jobs/source/0123456789abcdef/sourcedir.tar.gz"
    req = _build(_spec(), source)
    assert req["InputDataConfig"][0] == {
        "ChannelName": "code",
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source,
                                        "S3DataDistributionType": "FullyReplicated"}},
    }
    entrypoint = req["AlgorithmSpecification"]["ContainerEntrypoint"]
    assert entrypoint[:2] == ["/bin/bash", "-c"] and "ContainerArguments" not in req["AlgorithmSpecification"]
    # exec: the shell replaces itself with launch.py, which stays the container's first process.
    assert entrypoint[2].endswith('&& exec python3 "$b/code/launch.py" --container')
    assert '"$b/input/data/code/sourcedir.tar.gz"' in entrypoint[2]
    # botocore's limits for TrainingContainerEntrypoint (_validate checks the whole request too).
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingContainerEntrypoint")
    assert len(entrypoint) <= shape.metadata["max"]
    assert all(len(part) <= shape.member.metadata["max"] for part in entrypoint)
    _validate(req)


def test_the_container_entrypoint_runs_launch_py_as_the_first_process(tmp_path):
    """The entrypoint line itself, under bash: it unpacks the archive from the code channel
    into <base>/code and execs launch.py there, in the same process (the first one)."""
    import subprocess
    import sys

    base = tmp_path / "ml"
    channel = base / "input" / "data" / "code"
    channel.mkdir(parents=True)
    payload = tmp_path / "src"
    payload.mkdir()
    (payload / "launch.py").write_text("import os, sys; print(os.getpid(), sys.argv[1:])\n")
    with tarfile.open(channel / "sourcedir.tar.gz", "w:gz") as tar:
        tar.add(payload / "launch.py", arcname="launch.py")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").symlink_to(sys.executable)
    env = {"SAGEMAKER_BASE_DIR": str(base), "PATH": f"{shim}:/usr/bin:/bin"}
    proc = subprocess.Popen(contract.container_entrypoint(), env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=patience(60))
    assert proc.returncode == 0 and out.split(" ", 1) == [str(proc.pid), "['--container']\n"]
    assert (base / "code" / "launch.py").is_file()


def test_hyperparameters_are_json_encoded_for_the_toolkit():
    s = _spec()
    source = "s3://orchestrator-example-bucket/jobs/source/0123456789abcdef/sourcedir.tar.gz"
    hps = _build(s, source)["HyperParameters"]
    assert all(isinstance(v, str) for v in hps.values())
    assert {k: json.loads(v) for k, v in hps.items()} == {
        "sagemaker_program": "launch.py",
        "sagemaker_region": "us-east-1",
        "sagemaker_job_name": names.job_name(s),
        "sagemaker_container_log_level": 20,
    }
    assert hps["sagemaker_program"] == '"launch.py"'


def test_spot_sets_max_wait_and_checkpoints():
    s = _spec(**{"instance.spot": True, "instance.max_wait_minutes": 180})
    req = _build(s)
    assert req["EnableManagedSpotTraining"] is True
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 10800}
    assert req["CheckpointConfig"] == {
        "S3Uri": f"s3://orchestrator-example-bucket/jobs/checkpoints/{names.job_name(s)}",
        "LocalPath": "/opt/ml/checkpoints",
    }
    _validate(req)


def test_spot_without_max_wait_cannot_be_built():
    with pytest.raises(InputError, match="max_wait_minutes"):
        _build(_spec(**{"instance.spot": True}))


def test_a_local_spot_spec_without_max_wait_is_refused_in_its_instance_block(tmp_path, monkeypatch, capsys):
    # The doctor refuses it first (N012, for every backend); the request builder refuses it
    # too, located, for callers that build without the doctor.
    path = tmp_path / "job.yaml"
    path.write_text("name: spot-local\nbackend: local\ninstance:\n  type: ml.trn1.2xlarge\n  spot: true\n"
                    "max_run_minutes: 30\n")
    code, _, err = _cli(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and f"{path}:4:3: instance.max_wait_minutes: managed spot training needs" in err
    loaded = spec.load(path)
    with pytest.raises(SpecError) as info:
        _build(loaded)
    [problem] = info.value.problems
    assert (problem.file, problem.line, problem.path) == (str(path), 4, "instance.max_wait_minutes")
    assert "e.g. `instance: {type: ml.trn1.2xlarge, spot: true, max_wait_minutes: 30}`" in info.value.hint
    code, out, err = _cli(monkeypatch, capsys, "plan", str(path))
    assert code == 2 and out == "" and f"error: {path}:4:3: instance.max_wait_minutes: managed spot" in err
    assert "hint: set instance.max_wait_minutes to at least max_run_minutes (30)" in err


def test_checkpoints_without_spot():
    req = _build(_spec(**{"training.checkpoint_every": 100}))
    assert req["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    assert req["EnableManagedSpotTraining"] is False


def test_retry_strategy():
    req = _build(_spec(max_retry_attempts=3))
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 3}
    _validate(req)


def test_s3_data_becomes_the_train_channel():
    req = _build(_spec(**{"data.source": "s3://orchestrator-example-bucket/imagenet/train"}))
    assert req["InputDataConfig"][1:] == [{
        "ChannelName": "train",
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                        "S3Uri": "s3://orchestrator-example-bucket/imagenet/train",
                                        "S3DataDistributionType": "FullyReplicated"}},
    }]
    _validate(req)


def test_tags_sorted_with_spec_hash_and_job():
    s = _spec(tags={"zeta": "1", "alpha": "2"})
    tags = _build(s)["Tags"]
    assert [t["Key"] for t in tags] == sorted(t["Key"] for t in tags)
    as_dict = {t["Key"]: t["Value"] for t in tags}
    assert as_dict == {"alpha": "2", "zeta": "1", "orchestrator:spec-hash": spec.spec_hash(s),
                       "orchestrator:job": names.job_name(s)}


def test_pinned_image_uri_is_used_as_is():
    uri = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:custom"
    req = _build(_spec(**{"image.neuron_sdk": None, "image.uri": uri}))
    assert req["AlgorithmSpecification"]["TrainingImage"] == uri


def test_local_request_has_the_same_shape_with_placeholders(orch_home):
    s = _spec("name: req-local\nbackend: local\n")
    req = _build(s, source=f"file://{orch_home}/store/jobs/source/0123456789abcdef/sourcedir.tar.gz")
    assert req["RoleArn"] == sagemaker_request.LOCAL_ROLE_ARN
    assert req["AlgorithmSpecification"]["TrainingImage"] == "local"
    assert req["OutputDataConfig"]["S3OutputPath"] == f"file://{orch_home}/store/jobs"
    assert ParamValidator().validate(req, _input_shape()).has_errors() is False


@pytest.mark.parametrize("values", [
    {"loss": 6.907755, "step_time_s": 0.1234, "samples_per_s": 518.6},
    {"loss": 1.5e-05, "step_time_s": 12, "samples_per_s": 2.0e6},
])
def test_metric_regexes_match_the_entrypoint_lines(values):
    definitions = sagemaker_request.metric_definitions()
    names = {**contract.METRIC_NAMES, **contract.LAUNCH_METRIC_NAMES}
    assert [d["Name"] for d in definitions] == list(names)
    summary = {"step_time_p50_s": 0.25, "samples_per_s": 256.0, "time_to_first_step_s": 31.5, "compile_s": 29.0}
    used = {"neuroncore_util_pct": 71.5, "host_vcpu_pct": 12.25, "device_memory_gib": 20.5, "host_memory_gib": 64.0}
    lines = {
        contract.METRICS_TAG: "[1,0]<stdout>: " + contract.metric_line(contract.METRICS_TAG, step=40, **values),
        contract.SUMMARY_TAG: contract.metric_line(contract.SUMMARY_TAG, steps=500, **summary),
        contract.UTILIZATION_TAG: contract.metric_line(contract.UTILIZATION_TAG, **used),
    }
    figures = {contract.METRICS_TAG: values, contract.SUMMARY_TAG: summary, contract.UTILIZATION_TAG: used}
    for d in definitions:
        tag, key = names[d["Name"]]
        match = re.search(d["Regex"], lines[tag])
        assert match, (d, lines[tag])
        assert float(match.group(1)) == pytest.approx(float(figures[tag][key]), rel=1e-5)
        for other in set(lines) - {tag}:
            assert re.search(d["Regex"], lines[other]) is None


def test_a_metric_line_cut_in_two_gives_no_value_rather_than_a_wrong_one():
    line = contract.metric_line(contract.METRICS_TAG, step=40, loss=2.345678, step_time_s=0.125, samples_per_s=518.6)
    assert len(line) < contract.MAX_METRIC_LINE
    regexes = {d["Name"]: d["Regex"] for d in sagemaker_request.metric_definitions()}
    for cut in range(1, len(line)):
        for piece in (line[:cut].strip(), line[cut:].strip()):
            for name, regex in regexes.items():
                match = re.search(regex, piece)
                if match:  # a whole "key=value;" survived in this piece: it must be the true value
                    key = contract.METRIC_NAMES[name][1]
                    assert float(match.group(1)) == pytest.approx({"loss": 2.345678, "step_time_s": 0.125,
                                                                   "samples_per_s": 518.6}[key], rel=1e-5)


def test_metric_lines_survive_the_toolkits_chunked_reading(capsys):
    """The SageMaker training toolkit's own reader (process.watch: 64 KB reads, each stripped and
    split at newlines) fed output whose chunk boundaries fall inside metric lines: every value
    SageMaker's regexes then find is one the trainer printed."""
    import asyncio

    process = pytest.importorskip("sagemaker_training.process")
    printed = [contract.metric_line(contract.METRICS_TAG, step=s, loss=1.0 / s, step_time_s=0.1 + s / 1000,
                                    samples_per_s=160.0 + s) for s in range(1, 400)]
    data = "".join(f"noise line {i} " + "x" * (i % 97) + "\n" + line + "\n" for i, line in enumerate(printed)).encode()
    size = process._DEFAULT_BUF_SIZE
    # Chunks of the toolkit's size, then odd sizes, so that boundaries land inside many lines.
    bounds = list(range(0, len(data), size)) if len(data) > 2 * size else []
    bounds += list(range(0, len(data), 1_231))
    cuts = sorted(set(bounds) | {len(data)})

    class Chunked:
        def __init__(self):
            self.pieces = [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]

        async def read(self, n):
            assert n == size
            return self.pieces.pop(0) if self.pieces else b""

    asyncio.run(process.watch(Chunked(), 1))
    out = capsys.readouterr().out
    truth = {key: {round(float(re.search(rf"\b{key}=([^;]+);", line).group(1)), 9) for line in printed}
             for key in ("loss", "step_time_s", "samples_per_s")}
    found = 0
    for d in sagemaker_request.metric_definitions():
        tag, key = {**contract.METRIC_NAMES, **contract.LAUNCH_METRIC_NAMES}[d["Name"]]
        if tag != contract.METRICS_TAG:
            continue
        for value in re.findall(d["Regex"], out, flags=re.MULTILINE):
            found += 1
            assert round(float(value), 9) in truth[key], (key, value)
    assert found >= 3 * (len(printed) - len(cuts))  # only lines a boundary cut lose their values


def test_a_metric_line_is_one_write_and_flushed():
    class Stream:
        def __init__(self):
            self.calls = []

        def write(self, text):
            self.calls.append(("write", text))

        def flush(self):
            self.calls.append(("flush", None))

    stream = Stream()
    contract.write_line("orchestrator-metrics step=1;", stream)
    assert stream.calls == [("write", "orchestrator-metrics step=1;\n"), ("flush", None)]


# --- every example config -------------------------------------------------------


@pytest.mark.parametrize("path", _job_specs(), ids=lambda p: p.stem)
def test_every_config_builds_a_valid_request(path):
    s = spec.load(path)
    prepared = request.prepare(s)
    if s.backend == "sagemaker":
        _validate(prepared.request)
    elif s.backend == "batch":  # AWS Batch's SubmitJob
        shape = botocore.session.get_session().get_service_model("batch").operation_model("SubmitJob").input_shape
        assert not ParamValidator().validate(prepared.request, shape).has_errors()
    else:
        assert not ParamValidator().validate(prepared.request, _input_shape()).has_errors()


def test_trn1n_two_node_config_carries_efa():
    prepared = request.prepare(spec.load(ROOT / "configs" / "vit-trn1n-2node.yaml"))
    for key, value in contract.EFA_ENV.items():
        assert prepared.request["Environment"][key] == value
    assert prepared.request["ResourceConfig"]["InstanceCount"] == 2


# --- prepare ----------------------------------------------------------------------


def test_prepare_is_deterministic():
    first = request.prepare(_spec())
    second = request.prepare(_spec())
    assert first.request == second.request
    assert first.archive == second.archive
    assert first.archive_sha256 == sourcedir.archive_sha256(first.archive)
    assert first.source_uri == (f"s3://orchestrator-example-bucket/jobs/source/{first.archive_sha256[:16]}"
                                "/sourcedir.tar.gz")
    assert first.request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == first.source_uri
    assert first.spec_hash == spec.spec_hash(_spec())
    assert first.estimate.usd_max == pytest.approx(1.34375 * 1.5)  # an hour at EC2's price x the markup


def test_prepare_ships_the_job_file_in_the_archive():
    prepared = request.prepare(_spec(), job_name="req-test-t001", extra_tags={"orchestrator:trial": "t001"})
    with tarfile.open(fileobj=io.BytesIO(prepared.archive), mode="r:gz") as tar:
        shipped = json.loads(tar.extractfile(contract.JOB_FILE).read())
    assert shipped == prepared.job
    assert shipped["job_name"] == prepared.request["TrainingJobName"] == "req-test-t001"
    assert {"Key": "orchestrator:trial", "Value": "t001"} in prepared.request["Tags"]


def test_prepare_returns_findings_without_raising():
    prepared = request.prepare(_spec(**{"budget.max_cost_usd": 0.5}))
    assert [f.rule for f in prepared.findings] == ["N016-budget-exceeded"]


def test_prepare_raises_the_doctors_located_error_when_it_cannot_build():
    s = _spec(BASE.replace('neuron_sdk: "2.30.0"', 'neuron_sdk: "2.24.0"'))
    with pytest.raises(SpecError) as info:
        request.prepare(s)
    problem = info.value.problems[0]
    assert problem.path == "image.neuron_sdk" and problem.line == 5
    assert "N010-image-unknown" in problem.message


def test_prepare_rejects_an_invalid_job_name():
    with pytest.raises(InputError):
        request.prepare(_spec(), job_name="bad_name")


# --- `orchestrator plan` -----------------------------------------------------------


def test_cli_plan_json_is_one_object_with_the_prepared_request(monkeypatch, capsys):
    path = ROOT / "configs" / "vit-trn1n-2node.yaml"
    code, out, err = _cli(monkeypatch, capsys, "plan", str(path), "--json")
    assert code == 0
    data = json.loads(out)
    prepared = request.prepare(spec.load(path))
    assert data["request"] == prepared.request
    assert data["source_uri"] == prepared.source_uri and data["archive_sha256"] == prepared.archive_sha256
    assert data["estimate"]["usd_max"] == pytest.approx(prepared.estimate.usd_max)
    assert data["estimate"]["price"]["source"] == prepared.estimate.price.source
    assert [f["rule"] for f in data["findings"]] == ["N018-efa-env-added"]
    assert data["findings"][0]["line"] > 0
    assert "N018-efa-env-added" in err


def test_cli_plan_prints_request_and_cost(monkeypatch, capsys):
    path = ROOT / "configs" / "vit-trn1-2xlarge.yaml"
    code, out, _ = _cli(monkeypatch, capsys, "plan", str(path))
    assert code == 0
    prepared = request.prepare(spec.load(path))
    assert out.startswith(json.dumps(prepared.request, indent=2))
    assert prepared.estimate.describe() in out
    assert prepared.source_uri in out


def test_cli_plan_refuses_a_spec_with_doctor_errors(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace("max_run_minutes: 60", "max_run_minutes: 60\nbudget: {max_cost_usd: 0.1}"))
    code, out, err = _cli(monkeypatch, capsys, "plan", str(path), "--json")
    assert code == 2 and out == ""
    assert f"{path}:9:24:" in err and "N016-budget-exceeded" in err and "hint:" in err


def test_validate_doctor_plan_never_import_heavy_modules(tmp_path):
    script = (
        "import json, sys\n"
        "from orchestrator import cli\n"
        "sys.argv = ['orchestrator'] + sys.argv[1:]\n"
        "try:\n    cli.main()\nexcept SystemExit as exc:\n    code = exc.code or 0\n"
        "heavy = sorted(m for m in ('torch', 'torch_xla', 'pandas', 'matplotlib', 'timm') if m in sys.modules)\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(tmp_path))
    config = str(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    for args in (["validate", config], ["doctor", config], ["plan", config], ["plan", config, "--json"]):
        done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                              timeout=patience(120))
        report = json.loads(done.stderr.strip().splitlines()[-1])
        assert report == {"code": 0, "heavy": []}, (args, done.stderr)


# --- one way, once: spec -> doctor -> request -> backend ----------------------------------------


@pytest.fixture
def counted(monkeypatch):
    """How often the catalog resolves a spec, the cost is estimated and the budget checked."""
    from orchestrator import cost
    from orchestrator.doctor import budget

    calls = {"resolve": 0, "estimate": 0, "budget": 0}

    def counting(module, name, key):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(catalog, "resolve", "resolve")
    counting(cost, "estimate", "estimate")
    counting(budget, "check_budget", "budget")
    return calls


def test_prepare_resolves_estimates_and_checks_the_budget_once(counted):
    from orchestrator import doctor

    prepared = request.prepare(_spec())
    assert counted == {"resolve": 1, "estimate": 1, "budget": 1}
    assert prepared.target == catalog.resolve(_spec()) and prepared.estimate.known
    # Given the doctor's diagnosis, prepare derives none of it again.
    diagnosis = doctor.diagnose(_spec())
    counted.update(resolve=0, estimate=0, budget=0)
    again = request.prepare(diagnosis)
    assert counted == {"resolve": 0, "estimate": 0, "budget": 0}
    assert again.request == prepared.request and again.findings == prepared.findings


@pytest.mark.parametrize("args", [(), ("--rerun",)])
def test_submit_checks_the_budget_once(moto_server, counted, monkeypatch, capsys, args):
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="orchestrator-example-bucket")
    config = ROOT / "configs" / "vit-trn1-2xlarge.yaml"
    code, out, err = _cli(monkeypatch, capsys, "submit", str(config), *args)
    assert code == 0, err
    assert counted == {"resolve": 1, "estimate": 1, "budget": 1}
    assert "cost: at most" in err and out.strip().startswith("vit-trn1-2xlarge-")


def test_submit_refuses_a_spec_over_budget_after_one_check(moto_server, counted, tmp_path, monkeypatch, capsys):
    path = tmp_path / "pricey.yaml"
    path.write_text((ROOT / "configs" / "vit-trn1-2xlarge.yaml").read_text().replace("max_cost_usd: 40",
                                                                                     "max_cost_usd: 0.5"))
    code, out, err = _cli(monkeypatch, capsys, "submit", str(path), "--rerun")
    assert code == 2 and out == "" and err.count("N016-budget-exceeded") == 1
    assert counted == {"resolve": 1, "estimate": 1, "budget": 1}
