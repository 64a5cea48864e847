"""Every example config loads; job configs pass the doctor and match their golden requests.

Golden files (tests/golden/<config>.json) hold the full CreateTrainingJob request of each job
config (a batch config's: its SubmitJob request, the archive named by ORCHESTRATOR_CODE_URI). Two fields are normalised before comparing, so the goldens do not depend on where
ORCHESTRATOR_HOME is or on the entrypoint sources: the archive hash inside the `code` channel's
S3Uri becomes `<archive-sha256-16>`, and the local store's path becomes `<ORCHESTRATOR_HOME>`. Regenerate after an intended change with:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_configs.py
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest

from orchestrator import doctor, request, spec

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
GOLDEN = Path(__file__).parent / "golden"
REFERENCE = ("vit-trn1-2xlarge", "vit-trn1-32xlarge", "vit-trn1n-2node", "vit-trn2-48xlarge")
SOURCE_HASH = re.compile(r"/source/[0-9a-f]{16}/")


def _is_sweep(path: Path) -> bool:
    data, _ = spec.read_yaml(path.read_text(), str(path))
    return isinstance(data, dict) and "sweep" in data


JOB_CONFIGS = [p for p in CONFIGS if not _is_sweep(p)]
SWEEP_CONFIGS = [p for p in CONFIGS if _is_sweep(p)]


@pytest.fixture(autouse=True)
def _isolated_home(orch_home):
    return orch_home


def _code_source(req: dict) -> dict:
    """The code channel's S3DataSource (where the source archive is), or for a SubmitJob a view
    of its ORCHESTRATOR_CODE_URI variable whose ["S3Uri"] reads and writes the value."""
    if "containerOverrides" in req:
        entry = next(e for e in req["containerOverrides"]["environment"] if e["name"] == "ORCHESTRATOR_CODE_URI")

        class View(dict):
            def __getitem__(self, key):
                return entry["value"]

            def __setitem__(self, key, value):
                entry["value"] = value

        return View()
    channel = next(c for c in req["InputDataConfig"] if c["ChannelName"] == "code")
    return channel["DataSource"]["S3DataSource"]


def _normalise(req: dict, home: Path) -> dict:
    text = json.dumps(req, sort_keys=True).replace(str(home), "<ORCHESTRATOR_HOME>")
    out = json.loads(text)
    source = _code_source(out)
    source["S3Uri"] = SOURCE_HASH.sub("/source/<archive-sha256-16>/", source["S3Uri"])
    return out


def test_the_reference_configs_exist():
    names = {p.stem for p in JOB_CONFIGS}
    assert set(REFERENCE) <= names


@pytest.mark.parametrize("path", JOB_CONFIGS, ids=lambda p: p.stem)
def test_job_config_loads_and_has_no_doctor_errors(path):
    loaded = spec.load(path)
    assert doctor.errors(doctor.findings(loaded)) == []


@pytest.mark.parametrize("path", SWEEP_CONFIGS, ids=lambda p: p.stem)
def test_sweep_config_loads(path):
    sweep = spec.load_sweep(path)
    assert sweep is not None


@pytest.mark.parametrize("path", JOB_CONFIGS, ids=lambda p: p.stem)
def test_request_matches_golden(path, orch_home):
    loaded = spec.load(path)
    actual = _normalise(request.prepare(loaded).request, orch_home)
    golden = GOLDEN / f"{path.stem}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert golden.exists(), f"no golden for {path.name}: run UPDATE_GOLDEN=1 pytest {Path(__file__).name}"
    assert actual == json.loads(golden.read_text())


@pytest.mark.parametrize("path", JOB_CONFIGS, ids=lambda p: p.stem)
def test_archive_is_reproducible_and_named_by_its_hash(path):
    loaded = spec.load(path)
    first, second = request.prepare(loaded), request.prepare(spec.load(path))
    assert first.archive == second.archive
    assert f"/source/{first.archive_sha256[:16]}/" in first.source_uri
    assert _code_source(first.request)["S3Uri"] == first.source_uri


def test_every_golden_belongs_to_a_config():
    assert {p.stem for p in GOLDEN.glob("*.json")} <= {p.stem for p in JOB_CONFIGS}


def test_normalising_only_touches_the_two_volatile_fields(orch_home):
    req = request.prepare(spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")).request
    normalised = _normalise(req, orch_home)
    expected = copy.deepcopy(req)
    _code_source(expected)["S3Uri"] = _code_source(normalised)["S3Uri"]
    assert normalised == expected
    assert "<archive-sha256-16>" in _code_source(normalised)["S3Uri"]


def test_reference_config_is_the_published_setup():
    s = spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    assert (s.model.arch, s.model.patch_embed, s.model.image_size) == ("vit_base_patch16_224", "linear", 224)
    assert (s.training.batch_size, s.training.optimizer.name, s.training.precision) == (32, "adam", "bf16")
    assert (s.data.source, s.training.steps, s.backend) == ("synthetic", 500, "sagemaker")
    assert s.instance.type == "ml.trn1.2xlarge" and s.instance.count == 1
    assert s.role_arn == "arn:aws:iam::123456789012:role/orchestrator-training"
    assert s.output.uri.startswith("s3://orchestrator-example-bucket/")


def test_inf2_config_is_the_reference_job_through_batch():
    ref = spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    inf2 = spec.load(ROOT / "configs" / "vit-inf2-xlarge.yaml")
    assert (inf2.backend, inf2.instance.type, inf2.role_arn) == ("batch", "inf2.xlarge", None)
    assert (inf2.model, inf2.training) == (ref.model, ref.training)
    req = request.prepare(inf2).request
    assert (req["jobQueue"], req["jobDefinition"]) == ("orchestrator-inf2-xlarge", "orchestrator-neuron-1chip")
    env = {e["name"]: e["value"] for e in req["containerOverrides"]["environment"]}
    assert env["SM_NUM_NEURONS"] == "2" and env["SM_CURRENT_INSTANCE_TYPE"] == "inf2.xlarge"


def test_multi_node_and_trn2_configs_say_what_they_are_for():
    two = spec.load(ROOT / "configs" / "vit-trn1n-2node.yaml")
    assert (two.instance.type, two.instance.count) == ("ml.trn1n.32xlarge", 2)
    trn2 = spec.load(ROOT / "configs" / "vit-trn2-48xlarge.yaml")
    assert (trn2.instance.type, trn2.instance.lnc) == ("ml.trn2.48xlarge", 2)


@pytest.mark.parametrize("path", SWEEP_CONFIGS, ids=lambda p: p.stem)
def test_sweep_config_plans_within_its_budget(path):
    """Every example sweep passes the doctor on every trial, each with a known cost bound."""
    from orchestrator import sweep as sweeps

    planned = sweeps.plan(spec.load_sweep(path))
    assert planned.trials
    assert all(0 <= t.usd_max < float("inf") for t in planned.trials)
    sweeps.check_budget(planned)


def test_the_comparison_sweep_is_trn1_on_sagemaker_against_inf2_on_batch():
    from orchestrator import sweep as sweeps

    planned = sweeps.plan(spec.load_sweep(ROOT / "configs" / "sweep-inf2-vs-trn1.yaml"))
    assert [(t.trial.spec.backend, t.trial.spec.instance.type) for t in planned.trials] == [
        ("sagemaker", "ml.trn1.2xlarge"), ("batch", "inf2.xlarge"), ("batch", "inf2.8xlarge")]
    assert planned.backends == ["sagemaker", "batch"]
