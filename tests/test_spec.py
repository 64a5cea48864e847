"""The job spec: strict fields, located errors, did-you-mean, and a fuzzed loader."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from job_waits import patience

from orchestrator import spec
from orchestrator.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]

SAGEMAKER = """\
name: vit-trn1
backend: sagemaker
region: us-east-1
role_arn: arn:aws:iam::123456789012:role/orchestrator-training
instance: {type: ml.trn1.2xlarge, count: 1}
model:
  arch: vit_base_patch16_224
  patch_embed: linear
training:
  runtime: xla
  steps: 500
  batch_size: 32
  optimizer: {name: adam, lr: 1.0e-4}
compile_cache: {uri: s3://bucket-a/compile-cache, mode: tarball}
output: {uri: s3://bucket-a/jobs}
tags: {team: vision}
"""

LOCAL = """\
name: local-tiny
backend: local
model: {arch: vit_tiny_patch16_224, image_size: 32, patch_size: 8, depth: 1, embed_dim: 64, num_heads: 2}
training: {runtime: native, steps: 6, warmup_steps: 1, batch_size: 4}
compile_cache: {mode: "off"}
"""


def problems(text: str, name: str = "job.yaml") -> list:
    with pytest.raises(SpecError) as info:
        spec.loads(text, name)
    return info.value.problems


def test_valid_specs_load_frozen_with_defaults():
    loaded = spec.loads(SAGEMAKER, "job.yaml")
    assert loaded.instance.type == "ml.trn1.2xlarge"
    assert loaded.training.warmup_steps == 10
    assert loaded.image.neuron_sdk is None and loaded.image.uri is None
    with pytest.raises(pydantic.ValidationError):
        loaded.name = "other"  # frozen
    local = spec.loads(LOCAL, "local.yaml")
    assert local.output.uri is None and local.compile_cache.mode == "off"


def test_unknown_key_is_located_with_did_you_mean():
    text = SAGEMAKER.replace("  batch_size: 32", "  bach_size: 32")
    [problem] = problems(text)
    assert (problem.file, problem.line, problem.column) == ("job.yaml", 12, 3)
    assert problem.path == "training.bach_size"
    assert "did you mean 'batch_size'" in problem.message


def test_wrong_type_points_at_the_value():
    text = SAGEMAKER.replace("count: 1", "count: two")
    [problem] = problems(text)
    assert problem.path == "instance.count"
    assert problem.line == 5 and problem.column == text.splitlines()[4].index("two") + 1
    assert "integer" in problem.message


@pytest.mark.parametrize("old, new, path, said", [
    ("steps: 500", "steps: '30'", "training.steps", "expected an integer, got the text '30'; write 30 without quotes"),
    ("count: 1}", 'count: "2"}', "instance.count", "expected an integer, got the text '2'; write 2 without quotes"),
    ("count: 1}", "count: 1, spot: \"yes\"}", "instance.spot",
     "expected true or false, got the text 'yes'; write true without quotes"),
    ("steps: 500", "steps: 30.0", "training.steps", "expected an integer, got 30.0"),
    ("lr: 1.0e-4}", "lr: '0.1'}", "training.optimizer.lr", "expected a number, got the text '0.1'; write 0.1 without quotes"),
    ("count: 1}", "count: 1, keep_alive_minutes: 1" + "0" * 310 + "}", "instance.keep_alive_minutes",
     "100000000000...000000 (311 digits) is out of range: a number here is at most 9223372036854775807"),
])
def test_numbers_and_booleans_are_strict_and_a_huge_one_is_out_of_range(old, new, path, said):
    """Where the README says numbers are strict: text is not a number nor a boolean, and a number
    too large for any field is said so (not met later as a cost or a missing price)."""
    [problem] = problems(SAGEMAKER.replace(old, new))
    assert (problem.path, problem.message) == (path, said)


def test_yaml_numbers_and_booleans_still_pass():
    loaded = spec.loads(SAGEMAKER.replace("count: 1}", "count: 1, spot: true, max_wait_minutes: 200}")
                        .replace("lr: 1.0e-4", "lr: 1"), "job.yaml")
    assert loaded.instance.spot is True and loaded.training.optimizer.lr == 1.0
    # 1e-5 without a dot is a number (YAML 1.2), not the text YAML 1.1 makes of it; quoted, it is text.
    assert spec.loads(SAGEMAKER.replace("lr: 1.0e-4", "lr: 1e-5"), "job.yaml").training.optimizer.lr == 1e-5
    [problem] = problems(SAGEMAKER.replace("lr: 1.0e-4", "lr: '1e-5'"))
    assert problem.message == "expected a number, got the text '1e-5'; write 1e-5 without quotes"


def test_missing_required_field():
    text = "\n".join(line for line in LOCAL.splitlines() if not line.startswith("name:"))
    [problem] = problems(text)
    assert problem.path == "name" and "missing" in problem.message


def test_several_problems_are_all_reported():
    text = SAGEMAKER.replace("steps: 500", "steps: -1").replace("count: 1", "count: 0")
    found = {p.path for p in problems(text)}
    assert found == {"training.steps", "instance.count"}


def test_cross_field_rules_name_the_field():
    [problem] = problems(LOCAL.replace("runtime: native", "runtime: xla, compile: true"))
    assert problem.path == "training.compile" and "native" in problem.message
    [problem] = problems(SAGEMAKER.replace("role_arn: arn:aws:iam::123456789012:role/orchestrator-training\n", ""))
    assert problem.path == "role_arn" and problem.line == 1
    [problem] = problems(SAGEMAKER.replace("uri: s3://bucket-a/jobs", "uri: file:///tmp/jobs"))
    assert problem.path == "output.uri"
    [problem] = problems(LOCAL.replace("warmup_steps: 1", "warmup_steps: 6"))
    assert problem.path == "training.warmup_steps"


def test_yaml_syntax_error_is_located():
    [problem] = problems("name: x\ntraining: {steps: 3\nbackend: local\n")
    assert problem.line >= 2 and "YAML syntax" in problem.message


def test_duplicate_keys_are_refused():
    [problem] = problems(LOCAL + "name: again\n")
    assert problem.path == "name" and "duplicate" in problem.message and problem.line == 6


def test_aliases_that_explode_or_recurse_are_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 8):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    assert "aliases repeat more than" in problems(bomb)[0].message
    assert "recursive" in problems("a: &a [*a]\n")[0].message


def test_many_written_out_values_are_not_taken_for_aliases():
    """Issue 22, item 9: 10,000 written-out variants (MAX_TRIALS) are 30,000 values and no
    alias; only the values aliases repeat count against MAX_EXPANDED_NODES."""
    from orchestrator.spec.source import MAX_EXPANDED_NODES, read_yaml

    text = "variants:\n" + "".join(f"  - {{training.batch_size: {i % 7 + 1}, training.optimizer.lr: {i}.0e-6}}\n"
                                   for i in range(spec.MAX_TRIALS))
    data, _ = read_yaml(text, "sweep.yaml")
    assert len(data["variants"]) == spec.MAX_TRIALS > MAX_EXPANDED_NODES // 3
    # Aliases still may repeat up to the limit, not past it.
    few = "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * 198) + "]\n"
    assert read_yaml(few, "ok.yaml")[0]["b"][197][99] == "x"
    many = "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * 201) + "]\n"
    with pytest.raises(SpecError, match="aliases repeat more than 20000 values"):
        read_yaml(many, "bomb.yaml")


def test_non_mapping_and_empty_documents():
    assert "empty" in problems("")[0].message
    assert "mapping" in problems("- a\n- b\n")[0].message


def test_unsafe_tags_are_not_constructed():
    assert "constructor" in problems("name: !!python/object/apply:os.system [echo hi]\n")[0].message


def test_spec_hash_is_stable_and_sensitive():
    a = spec.loads(SAGEMAKER, "a.yaml")
    b = spec.loads(SAGEMAKER.replace("region: us-east-1\n", ""), "b.yaml")  # default equals explicit
    c = spec.loads(SAGEMAKER.replace("batch_size: 32", "batch_size: 16"), "c.yaml")
    assert spec.spec_hash(a) == spec.spec_hash(b) != spec.spec_hash(c)
    assert len(spec.spec_hash(a)) == 64


def test_with_overrides_validates_again():
    base = spec.loads(SAGEMAKER, "job.yaml")
    changed = spec.with_overrides(base, {"training.batch_size": 16, "instance.type": "ml.trn1.32xlarge"})
    assert changed.training.batch_size == 16 and changed.instance.type == "ml.trn1.32xlarge"
    with pytest.raises(SpecError) as info:
        spec.with_overrides(base, {"training.batch_size": 0})
    assert info.value.problems[0].path == "training.batch_size"


def test_infra_outputs_fill_missing_fields(tmp_path):
    (tmp_path / "infra.yaml").write_text(
        "role_arn: arn:aws:iam::111122223333:role/from-stack\n"
        "compile_cache_uri: s3://stack-bucket/compile-cache\n"
        "output_uri: s3://stack-bucket/jobs\nregion: eu-west-1\n"
    )
    text = "name: x\ninfra: infra.yaml\n"
    (tmp_path / "job.yaml").write_text(text)
    loaded = spec.load(tmp_path / "job.yaml")
    assert loaded.role_arn == "arn:aws:iam::111122223333:role/from-stack"
    assert loaded.compile_cache.uri == "s3://stack-bucket/compile-cache"
    assert loaded.output.uri == "s3://stack-bucket/jobs" and loaded.region == "eu-west-1"
    (tmp_path / "job2.yaml").write_text(text + "output: {uri: s3://mine/out}\n")
    assert spec.load(tmp_path / "job2.yaml").output.uri == "s3://mine/out"  # the spec wins
    (tmp_path / "job3.yaml").write_text("name: x\ninfra: missing.yaml\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job3.yaml")
    assert info.value.problems[0].path == "infra" and info.value.problems[0].line == 2


def test_a_misspelt_key_in_the_infra_file_is_located_there_with_a_suggestion(tmp_path):
    (tmp_path / "infra.yaml").write_text("output_uri: s3://stack-bucket/jobs\nrole_ar: arn:aws:iam::1:role/x\n")
    (tmp_path / "job.yaml").write_text("name: x\ninfra: infra.yaml\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    problem = info.value.problems[0]
    assert problem.file.endswith("infra.yaml") and (problem.line, problem.path) == (2, "role_ar")
    assert "did you mean 'role_arn'?" in problem.message


def test_a_region_other_than_the_stacks_is_refused_when_the_stack_fills_fields(tmp_path):
    (tmp_path / "infra.yaml").write_text("role_arn: arn:aws:iam::111122223333:role/from-stack\n"
                                         "compile_cache_uri: s3://stack-bucket/compile-cache\n"
                                         "output_uri: s3://stack-bucket/jobs\nregion: us-east-1\n")
    (tmp_path / "job.yaml").write_text("name: x\ninfra: infra.yaml\nregion: eu-west-1\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    problem = info.value.problems[0]
    assert (problem.path, problem.line) == ("region", 3)
    assert "us-east-1" in problem.message and "remove region:" in info.value.hint
    # The same region, or a spec that takes nothing from the stack, is fine.
    (tmp_path / "same.yaml").write_text("name: x\ninfra: infra.yaml\nregion: us-east-1\n")
    assert spec.load(tmp_path / "same.yaml").region == "us-east-1"
    (tmp_path / "own.yaml").write_text(
        "name: x\ninfra: infra.yaml\nregion: eu-west-1\nrole_arn: arn:aws:iam::111122223333:role/mine\n"
        "output: {uri: s3://mine/jobs}\ncompile_cache: {uri: s3://mine/compile-cache}\n")
    assert spec.load(tmp_path / "own.yaml").region == "eu-west-1"


def test_unreadable_and_binary_files(tmp_path):
    with pytest.raises(SpecError):
        spec.load(tmp_path / "nope.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "bin.yaml")
    assert "UTF-8" in info.value.message


def test_schema_documents_every_field():
    schema = spec.json_schema()
    defs = schema["$defs"]

    def undocumented(props: dict) -> list[str]:
        return [name for name, prop in props.items() if not prop.get("description")]

    assert undocumented(schema["properties"]) == []
    for name, model in defs.items():
        assert undocumented(model.get("properties", {})) == [], name


def test_cli_validate_exit_codes(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(LOCAL)
    bad = tmp_path / "bad.yaml"
    bad.write_text(LOCAL.replace("batch_size: 4", "batch_sise: 4"))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(good)], env=env,
                        capture_output=True, text=True, timeout=patience(60))
    assert ok.returncode == 0, ok.stderr
    fail = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(bad)], env=env,
                          capture_output=True, text=True, timeout=patience(60))
    assert fail.returncode == 2
    assert f"{bad}:4:" in fail.stderr and "did you mean 'batch_size'" in fail.stderr
    assert "Traceback" not in fail.stderr
    schema = subprocess.run([sys.executable, "-m", "orchestrator", "schema"], env=env,
                            capture_output=True, text=True, timeout=patience(60))
    assert schema.returncode == 0 and json.loads(schema.stdout)["title"] == "JobSpec"


# --- Fuzzing: >= 2,000 generated or mutated documents, zero uncaught exceptions ------------

FIELD_WORDS = ["name", "backend", "instance", "type", "count", "training", "steps", "batch_size",
               "optimizer", "lr", "model", "arch", "image_size", "tags", "data", "source", "infra",
               "compile_cache", "mode", "uri", "output", "budget", "environment", "spot", "<<"]
SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True), st.booleans(), st.none(),
    st.text(max_size=20), st.sampled_from(["ml.trn1.2xlarge", "s3://b/p", "local", "xla", "off", "1e-4"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELD_WORDS), st.text(max_size=8)), children, max_size=5),
    ),
    max_leaves=20,
)
YAML_CHARS = string.ascii_letters + string.digits + " :-[]{},&*!|>'\"#%@`\n\t.?<=\\"


def assert_located_or_valid(text: str) -> None:
    try:
        loaded = spec.loads(text, "fuzz.yaml")
    except SpecError as exc:
        assert exc.problems, "an error with no problems"
        for problem in exc.problems:
            assert problem.file == "fuzz.yaml"
            assert problem.line >= 1 and problem.column >= 1, problem
            assert problem.message
    else:
        assert isinstance(loaded, spec.JobSpec)


# The number of examples is the Hypothesis profile's (tests/conftest.py): a small one for
# `make test`, 700 each in `make test-slow`.
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.mark.fuzz
@FUZZ
@given(st.text(alphabet=YAML_CHARS, max_size=300))
def test_fuzz_raw_text(text):
    assert_located_or_valid(text)


@pytest.mark.fuzz
@FUZZ
@given(VALUES)
def test_fuzz_generated_documents(value):
    assert_located_or_valid(yaml.safe_dump(value, allow_unicode=True) if value is not None else "")


@pytest.mark.fuzz
@FUZZ
@given(st.sampled_from([SAGEMAKER, LOCAL]), st.lists(
    st.tuples(st.sampled_from(["delete", "insert", "dup_line", "swap", "value"]),
              st.integers(min_value=0, max_value=10_000), st.sampled_from(list(YAML_CHARS)), SCALARS),
    min_size=1, max_size=4))
def test_fuzz_mutated_valid_documents(base, mutations):
    text = base
    for kind, pos, char, scalar in mutations:
        lines = text.splitlines(keepends=True) or [""]
        i = pos % max(len(text), 1)
        if kind == "delete":
            text = text[:i] + text[i + 1:]
        elif kind == "insert":
            text = text[:i] + char + text[i:]
        elif kind == "dup_line":
            j = pos % len(lines)
            text = "".join(lines[: j + 1] + lines[j:])
        elif kind == "swap":
            j = pos % len(lines)
            k = (pos // 7) % len(lines)
            lines[j], lines[k] = lines[k], lines[j]
            text = "".join(lines)
        else:
            j = pos % len(lines)
            key = lines[j].split(":", 1)[0]
            text = "".join(lines[:j] + [f"{key}: {json.dumps(scalar)}\n"] + lines[j + 1:])
    assert_located_or_valid(text)


def test_pattern_errors_say_what_is_expected_in_words():
    [problem] = problems(LOCAL.replace("name: local-tiny", "name: local tiny"))
    assert problem.path == "name" and "'local tiny' is not valid" in problem.message
    assert "single dashes" in problem.message and "^[" not in problem.message
    [problem] = problems(SAGEMAKER.replace("s3://bucket-a/jobs", "s3://b/jobs"))
    assert problem.path == "output.uri" and "s3://BUCKET/PREFIX" in problem.message
    [problem] = problems(SAGEMAKER.replace("role/orchestrator-training", "user/someone"))
    assert problem.path == "role_arn" and "IAM role ARN" in problem.message


# --- QA fixes: files that are not regular files, strict numbers, YAML words, file kinds -------


@pytest.mark.timeout(30)
def test_only_regular_files_are_read(tmp_path):
    def message(path) -> str:
        with pytest.raises(SpecError) as info:
            spec.load(path)
        [problem] = info.value.problems
        assert problem.file == str(path)
        return problem.message

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block forever: it must not be opened
    assert "not a regular file" in message(fifo)
    if Path("/dev/zero").exists():  # endless: reading it whole would never finish
        assert "not a regular file" in message(Path("/dev/zero"))
    (tmp_path / "adir").mkdir()
    assert "is a directory" in message(tmp_path / "adir")
    assert message(tmp_path / "missing.yaml") == "does not exist"
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "#" * spec.MAX_SPEC_BYTES)
    assert "larger than" in message(big)


def test_read_is_bounded_even_if_the_file_grows(tmp_path, monkeypatch):
    # A file whose size says small but which reads on (a file growing under us, /proc): at
    # most the limit + 1 bytes are read, and it is refused as too large.
    path = tmp_path / "job.yaml"
    path.write_text(LOCAL)
    reads = []
    real_fdopen = os.fdopen

    class Endless:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def fileno(self):
            return self.handle.fileno()

        def read(self, size=-1):
            reads.append(size)
            assert size > 0, "an unbounded read"
            return b"#" * size

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: Endless(real_fdopen(fd, mode)))
    with pytest.raises(SpecError) as info:
        spec.load(path)
    assert "larger than" in info.value.message and reads == [spec.MAX_SPEC_BYTES + 1]


@pytest.mark.timeout(30)
def test_infra_file_problems_are_accurate(tmp_path):
    def infra_problem(ref: str):
        (tmp_path / "job.yaml").write_text(f"name: x\ninfra: {ref}\n")
        with pytest.raises(SpecError) as info:
            spec.load(tmp_path / "job.yaml")
        [problem] = info.value.problems
        assert (problem.file, problem.line, problem.path) == (str(tmp_path / "job.yaml"), 2, "infra")
        assert "`python -m orchestrator infra outputs --write" in info.value.hint
        return problem.message

    assert infra_problem("missing.yaml").endswith("missing.yaml does not exist")
    (tmp_path / "adir").mkdir()
    assert "is a directory" in infra_problem("adir")
    os.mkfifo(tmp_path / "pipe.yaml")
    assert "not a regular file" in infra_problem("pipe.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"role_arn: \xff\xfe\n")
    assert "not UTF-8 text (byte 10)" in infra_problem("bin.yaml")


def infra_load_problems(tmp_path, infra_text: str, name: str = "infra.yaml") -> list:
    """The problems of loading `name: x` with `infra:` pointing at a file holding `infra_text`."""
    (tmp_path / name).write_text(infra_text)
    (tmp_path / "job.yaml").write_text(f"name: x\ninfra: {name}\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    return info.value.problems


def test_infra_value_problems_are_located_in_the_infra_file(tmp_path):
    infra = tmp_path / "i2.yaml"
    [problem] = infra_load_problems(
        tmp_path, "compile_cache_uri: s3://stack-bucket/cc\noutput_uri: file:///tmp/out\n\nrole_arn: 5\n", "i2.yaml")
    assert (problem.file, problem.line, problem.column, problem.path) == (str(infra), 4, 11, "role_arn")
    # Not 'write "5" in quotes', which would only fail the ARN pattern next.
    assert "write it in quotes, as an IAM role ARN such as" in problem.message
    infra.write_text("role_arn: arn:aws:iam::111122223333:role/r\ncompile_cache_uri: s3://stack-bucket/cc\n"
                     "output_uri: file:///tmp/out\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    [problem] = info.value.problems  # a cross-field rule on a filled value: also in the infra file
    assert (problem.file, problem.line, problem.path) == (str(infra), 3, "output.uri")


@pytest.mark.parametrize("fragment, path, expected", [
    ("training: {runtime: native, steps: 6, warmup_steps: 1, batch_size: true}", "training.batch_size",
     "expected a number, got a boolean (true)"),
    ("training: {runtime: native, steps: true, warmup_steps: 1}", "training.steps", "got a boolean"),
    ("training: {runtime: native, steps: 6, warmup_steps: 1, optimizer: {lr: yes}}", "training.optimizer.lr",
     "expected a number, got a boolean (yes)"),
    ("instance: {lnc: true}", "instance.lnc", "got a boolean"),
    ("budget: {max_cost_usd: .inf}", "budget.max_cost_usd", "must be a finite number, got .inf"),
    ("budget: {max_cost_usd: .nan}", "budget.max_cost_usd", "must be a finite number, got .nan"),
    ("training: {runtime: native, steps: 6, warmup_steps: 1, optimizer: {lr: .nan}}", "training.optimizer.lr",
     "must be a finite number"),
])
def test_booleans_and_non_finite_numbers_are_not_numbers(fragment, path, expected):
    text = LOCAL.replace("training: {runtime: native, steps: 6, warmup_steps: 1, batch_size: 4}\n", "") + fragment + "\n"
    [problem] = problems(text)
    assert problem.path == path and expected in problem.message
    assert problem.line == text.count("\n")  # the fragment's own line


def test_overrides_refuse_booleans_and_nan_too():
    base = spec.loads(LOCAL, "local.yaml")
    for value in (True, float("nan"), float("inf")):
        with pytest.raises(SpecError) as info:
            spec.with_overrides(base, {"training.optimizer.lr": value})
        assert info.value.problems[0].path == "training.optimizer.lr"


@pytest.mark.parametrize("fragment, path, expected", [
    ("compile_cache: {mode: off}", "compile_cache.mode",
     'got false (YAML reads unquoted off as a boolean); write "off" in quotes'),
    ("compile_cache: {mode: no}", "compile_cache.mode",
     "got false (YAML reads unquoted no as a boolean); expected 'tarball' or 'off'"),
    ("tags: {enabled: yes}", "tags.enabled", 'write "yes" in quotes'),
    # Quoting alone would not do here ("2.30" fails the pattern): the hint says the whole form.
    ("image: {neuron_sdk: 2.30}", "image.neuron_sdk",
     "got the number 2.3 (YAML read 2.30 as a number); write it in quotes, as a Neuron SDK version such as 2.30.0"),
    ("image: {neuron_sdk: 2.301}", "image.neuron_sdk", "as a Neuron SDK version such as 2.30.0"),
    ("environment: {FOO: 1}", "environment.FOO", 'got the number 1; write "1" in quotes'),
])
def test_yaml_words_read_as_booleans_or_numbers_say_to_quote(fragment, path, expected):
    text = LOCAL.replace('compile_cache: {mode: "off"}\n', "") + fragment + "\n"
    [problem] = problems(text)
    assert problem.path == path and problem.line == text.count("\n") and expected in problem.message


def test_a_pretrained_tag_on_the_arch_says_to_drop_it():
    text = LOCAL.replace("arch: vit_tiny_patch16_224", "arch: vit_base_patch16_224.augreg_in21k")
    [problem] = problems(text)
    assert problem.path == "model.arch"
    assert "names pretrained weights (augreg_in21k)" in problem.message
    assert "write the architecture alone: vit_base_patch16_224" in problem.message


def test_a_sweep_spec_is_named_as_such(tmp_path):
    sweep_text = "sweep: demo\nbase: job.yaml\ngrid:\n  training.batch_size: [16, 32]\nmax_run_minutes: 3\n"
    with pytest.raises(SpecError) as info:
        spec.loads(sweep_text, "sweep.yaml")
    [problem] = info.value.problems
    assert (problem.line, problem.column) == (1, 1) and "this is a sweep spec" in problem.message
    # Both what checks it and what runs it, in the form the README's set-up can run.
    assert "check it with `python -m orchestrator sweep plan sweep.yaml`" in info.value.hint
    assert "run it with `python -m orchestrator sweep run sweep.yaml`" in info.value.hint
    # A scheduled sweep runs on its cron: `sweep run` would run it once, now.
    with pytest.raises(SpecError) as info:
        spec.loads(sweep_text + 'schedule: {cron: "0 3 * * *"}\n', "nightly.yaml")
    assert "follow its schedule with `python -m orchestrator schedule run nightly.yaml`" in info.value.hint
    assert "sweep run" not in info.value.hint
    path = tmp_path / "sweep.yaml"
    path.write_text(sweep_text)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "ORCHESTRATOR_HOME": str(tmp_path / "home"),
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    for command in ("validate", "submit"):
        run = subprocess.run([sys.executable, "-m", "orchestrator", command, str(path)], env=env,
                             capture_output=True, text=True, timeout=patience(60))
        assert run.returncode == 2 and f"sweep plan {path}" in run.stderr and f"sweep run {path}" in run.stderr
        assert "unknown field" not in run.stderr and "did you mean" not in run.stderr


def test_job_and_sweep_specs_are_told_apart_by_the_sweep_models_fields():
    from orchestrator.spec import loading

    assert loading.SWEEP_FIELDS == set(spec.SweepSpec.model_fields)


def test_validating_a_job_spec_builds_only_the_job_models(tmp_path):
    # `validate` (the spec, then the doctor's rules) starts fast by building what it needs: no
    # sweep model, no cron rules, no error translation for a spec without errors, and no
    # botocore once the catalog's cache of its service model is written (the first run).
    probe = ("import json, sys; from orchestrator import doctor, spec; loaded = spec.load(sys.argv[1]); "
             "doctor.raise_for(loaded, doctor.findings(loaded)); "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('orchestrator', 'botocore')))))")
    argv = [sys.executable, "-c", probe, str(ROOT / "configs" / "vit-trn1-2xlarge.yaml")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATOR_HOME": str(tmp_path)}
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=patience(120))
    assert first.returncode == 0, first.stderr
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=patience(120))
    assert run.returncode == 0, run.stderr
    loaded = set(json.loads(run.stdout))
    assert {"orchestrator.spec.models", "orchestrator.doctor"} <= loaded
    assert not loaded & {"orchestrator.spec.sweep_spec", "orchestrator.spec.problems", "orchestrator.schedule",
                         "orchestrator.schedule.cron", "botocore", "botocore.session"}, sorted(loaded)
    assert "botocore" in json.loads(first.stdout)  # the first run reads it: the probe does see imports


def test_a_section_left_out_is_its_models_validated_defaults():
    # JobSpec's sections left out are made by `defaults()` without validation (so that validating a
    # spec builds no second validator for them): each must be exactly what validation makes of {}.
    from orchestrator.spec import models

    sections = [models.InstanceSpec, models.BatchSpec, models.ImageSpec, models.ModelSpec, models.OptimizerSpec,
                models.TrainingSpec, models.DataSpec, models.CompileCacheSpec, models.OutputSpec, models.BudgetSpec]
    for section in sections:
        made, validated = section.defaults(), section.model_validate({})
        assert made == validated and made.model_fields_set == validated.model_fields_set == set(), section
        assert made.model_dump_json() == validated.model_dump_json(), section
    loaded = spec.loads("name: x\nbackend: local\n")
    assert loaded.batch == spec.BatchSpec() and loaded.training.optimizer == spec.OptimizerSpec()
    assert spec.spec_hash(loaded) == spec.spec_hash(spec.JobSpec.model_validate(loaded.model_dump()))


def test_validate_builds_one_validator_and_only_its_backends_rules(tmp_path):
    # `validate` of a SageMaker spec that leaves sections out builds JobSpec's validator only (not one
    # per section left out), loads no batch rules, and no shlex (a hint about a file not UTF-8 needs it).
    probe = ("import json, sys; from orchestrator import doctor, spec; from orchestrator.spec import models; "
             "loaded = spec.load(sys.argv[1]); doctor.raise_for(loaded, doctor.findings(loaded)); "
             "built = sorted(n for n, c in vars(models).items() if isinstance(c, type) and "
             "issubclass(c, models.StrictModel) and c.__pydantic_complete__); "
             "print(json.dumps({'built': built, 'modules': sorted(sys.modules)}))")
    path = tmp_path / "job.yaml"
    path.write_text("name: sections-left-out\nrole_arn: arn:aws:iam::123456789012:role/r\n"
                    "compile_cache: {mode: \"off\"}\noutput: {uri: s3://my-bucket/jobs}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATOR_HOME": str(tmp_path / "home")}
    for _ in range(2):  # the first run reads botocore (which imports shlex) into the catalog's cache
        run = subprocess.run([sys.executable, "-c", probe, str(path)], env=env, capture_output=True, text=True,
                             timeout=patience(120))
        assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["built"] == ["JobSpec"]
    assert "orchestrator.doctor" in report["modules"]
    assert not {"orchestrator.backends.batch.rules", "shlex"} & set(report["modules"])


def test_a_job_spec_given_as_a_sweep_says_how_to_check_and_run_it(tmp_path):
    with pytest.raises(SpecError) as info:
        spec.loads_sweep(LOCAL, "job.yaml", base_dir=tmp_path)
    assert "this is a job spec" in info.value.problems[0].message
    assert "`python -m orchestrator validate job.yaml`" in info.value.hint
    assert "`python -m orchestrator submit job.yaml`" in info.value.hint


def test_non_string_keys_are_located_at_the_key():
    text = LOCAL + "tags:\n  team: vision\nnull: us-east-1\n"
    [problem] = problems(text)
    assert (problem.line, problem.column) == (8, 1)
    assert problem.message.startswith("key null is not a string; quote it")
    [problem] = problems(LOCAL + "environment: {1: x}\n")
    assert problem.line == 6 and problem.path == "environment" and "key 1 is not a string" in problem.message


def test_tabs_say_to_indent_with_spaces():
    [problem] = problems("name: x\ntraining:\n\tsteps: 3\n")
    assert (problem.line, problem.column) == (3, 1) and "indent with spaces, not tabs" in problem.message
    [problem] = problems("name: x\ntraining:\n  steps:\t3\n")
    assert problem.line == 3 and "spaces, not tabs" in problem.message


# --- QA fixes: URIs, all cross-field problems at once, missing files -------------------------


@pytest.mark.parametrize("field, key", [("data", "source"), ("output", "uri"), ("compile_cache", "uri")])
@pytest.mark.parametrize("uri, expected", [
    ("s3:///x", "no bucket name after s3://"),
    ("s3://b", "'b' is not a valid S3 bucket name"),
    ("s3://Bad_Bucket/x", "'Bad_Bucket' is not a valid S3 bucket name"),
    ("file://relative/out", "a file URI needs an absolute path and no host: file://relative/out reads 'relative' "
                            "as a host"),
    ("file://srv", "file://srv reads 'srv' as a host name"),
    ("s3://my..bucket/x", "'my..bucket' is not a valid S3 bucket name"),
])
def test_uris_need_a_valid_bucket_or_an_absolute_path(field, key, uri, expected):
    text = LOCAL.replace('compile_cache: {mode: "off"}\n', "") + f'{field}: {{{key}: "{uri}"}}\n'
    [problem] = problems(text)
    assert (problem.file, problem.line, problem.path) == ("job.yaml", 5, f"{field}.{key}")
    assert problem.column == text.splitlines()[4].index(f"\"{uri}") + 1  # at the quoted value
    assert expected in problem.message
    # Each says what a valid one looks like.
    examples = {"s3:///x": "e.g. s3://my-bucket/x", "s3://b": "e.g. s3://my-bucket",
                "s3://Bad_Bucket/x": "e.g. s3://bad-bucket/x",
                "file://relative/out": "e.g. file:///relative/out if you meant /relative/out",
                "file://srv": "write file:///ABSOLUTE/PATH, e.g. file:///srv if you meant /srv",
                "s3://my..bucket/x": "e.g. s3://my.bucket/x"}
    assert examples[uri] in problem.message


def test_data_can_be_a_whole_bucket_or_a_prefix_and_file_uris_an_absolute_path():
    for source in ("s3://my-bucket", "s3://my-bucket/", "s3://my.bucket-1/imagenet/train", "file:///data/train"):
        assert spec.loads(LOCAL + f"data: {{source: \"{source}\"}}\n", "job.yaml").data.source == source
    loaded = spec.loads(LOCAL.replace('compile_cache: {mode: "off"}\n', "")
                        + "output: {uri: file:///tmp/out}\ncompile_cache: {uri: file:///tmp/cc}\n", "job.yaml")
    assert loaded.output.uri == "file:///tmp/out"


def test_plan_refuses_a_data_source_without_a_bucket(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(SAGEMAKER + "data: {source: \"s3:///x\"}\n")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "ORCHESTRATOR_HOME": str(tmp_path / "home"),
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    run = subprocess.run([sys.executable, "-m", "orchestrator", "plan", str(path)], env=env,
                         capture_output=True, text=True, timeout=patience(60))
    assert run.returncode == 2, run.stderr
    assert f"{path}:17:16: data.source" in run.stderr and "S3Uri" not in run.stdout


def test_every_cross_field_problem_is_reported_in_one_round():
    text = ("name: sm\nbackend: sagemaker\ndata: {source: file:///data}\n"
            "tags: {aws:owner: me}\nenvironment: {1BAD: x}\n")
    found = {p.path: p for p in problems(text)}
    assert set(found) == {"role_arn", "output.uri", "compile_cache.uri", "data.source", "tags.aws:owner",
                          "environment.1BAD"}
    # Each at its own field (or, when absent, where it would go).
    assert found["data.source"].line == 3 and "cannot read file://" in found["data.source"].message
    assert found["tags.aws:owner"].line == 4 and "aws:owner" in found["tags.aws:owner"].message
    assert found["environment.1BAD"].line == 5 and "1BAD" in found["environment.1BAD"].message
    # In block style each tag or variable is on its own line, and so is its problem (QA: every
    # one was reported at the first key's line).
    block = problems("name: tg\nbackend: local\ntags:\n  team: vision\n  aws:x: \"1\"\n  orchestrator:z: \"2\"\n"
                     "environment:\n  GOOD: \"1\"\n  1BAD: x\n")
    assert {(p.path, p.line, p.column) for p in block} == {
        ("tags.aws:x", 5, 3), ("tags.orchestrator:z", 6, 3), ("environment.1BAD", 9, 3)}
    assert "needs role_arn" in found["role_arn"].message and "output.uri" in found["output.uri"].message
    both = problems(LOCAL.replace("runtime: native", "runtime: xla, compile: true").replace("warmup_steps: 1",
                                                                                            "warmup_steps: 6"))
    assert {p.path for p in both} == {"training.compile", "training.warmup_steps"}
    assert all(p.line == 4 for p in both)


def test_absent_sagemaker_fields_show_up_with_other_problems_in_the_same_round(tmp_path):
    # pydantic runs JobSpec's cross-field checks only when every field is valid: a bad value
    # elsewhere used to hide the missing role and URIs until it was fixed.
    found = {p.path for p in problems("name: sm\nbackend: sagemaker\ntraining: {steps: 5, warmup_steps: 10}\n")}
    assert found == {"training.warmup_steps", "role_arn", "output.uri", "compile_cache.uri"}
    # What an infra file fills in, or mode: off, is not missing.
    (tmp_path / "infra.yaml").write_text("role_arn: arn:aws:iam::123456789012:role/r\n"
                                         "output_uri: s3://my-bucket/jobs\ncompile_cache_uri: s3://my-bucket/cc\n")
    (tmp_path / "job.yaml").write_text("name: sm\nbackend: sagemaker\ninfra: infra.yaml\n"
                                       "training: {steps: 5, warmup_steps: 10}\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    assert [p.path for p in info.value.problems] == ["training.warmup_steps"]
    off = problems("name: sm\nbackend: sagemaker\ncompile_cache: {mode: \"off\"}\nrole_arn: 5\n")
    assert {p.path for p in off} == {"role_arn", "output.uri"}


def test_cross_field_problems_keep_their_own_file_when_filled_from_infra(tmp_path):
    infra = tmp_path / "infra.yaml"
    problems_ = infra_load_problems(tmp_path, "compile_cache_uri: file:///tmp/cc\noutput_uri: file:///tmp/out\n")
    found = {p.path: (p.file, p.line) for p in problems_}
    assert found == {"role_arn": (str(tmp_path / "job.yaml"), 1), "compile_cache.uri": (str(infra), 1),
                     "output.uri": (str(infra), 2)}


def test_a_missing_spec_file_suggests_a_close_name(tmp_path):
    (tmp_path / "local-smoke.yaml").write_text(LOCAL)
    (tmp_path / "other.txt").write_text("")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "local-smoke.yml")
    [problem] = info.value.problems
    assert problem.file == str(tmp_path / "local-smoke.yml") and problem.message == "does not exist"
    assert info.value.hint == f"did you mean {tmp_path / 'local-smoke.yaml'}?"
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "nothing-like-it.yaml")
    assert "check the path" in info.value.hint and "did you mean" not in info.value.hint
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "no-folder" / "local-smoke.yaml")
    assert info.value.hint == f"check the path: the folder {tmp_path / 'no-folder'} does not exist"
    # Names are compared without ".yaml": 'a' is not close to 'sw' just because both end alike.
    (tmp_path / "sw.yaml").write_text("")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "a.yaml")
    assert "did you mean" not in info.value.hint


def test_a_missing_sweep_base_or_infra_file_suggests_a_close_name(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "local-smoke.yaml").write_text(LOCAL)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("sweep: s\nbase: configs/local-smoke.yml\ngrid:\n  training.batch_size: [2]\n")
    with pytest.raises(SpecError) as info:
        spec.load_sweep(sweep)
    [problem] = info.value.problems
    assert (problem.path, problem.line) == ("base", 2) and "does not exist" in problem.message
    assert info.value.hint.startswith("did you mean base: configs/local-smoke.yaml?")
    (tmp_path / "infra-outputs.yaml").write_text("role_arn: arn:aws:iam::111122223333:role/r\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: x\ninfra: infra-output.yaml\n")
    with pytest.raises(SpecError) as info:
        spec.load(job)
    assert info.value.hint.startswith("did you mean infra: infra-outputs.yaml?")


def test_a_missing_base_or_infra_file_is_never_matched_to_the_file_naming_it(tmp_path):
    # QA: `base: base.yaml` in sweep.yaml suggested sweep.yaml itself; `infra: out.yaml` in
    # job.yaml suggested job.yaml.
    (tmp_path / "sweep.yaml").write_text("sweep: s\nbase: swee.yaml\ngrid:\n  training.batch_size: [2]\n")
    with pytest.raises(SpecError) as info:
        spec.load_sweep(tmp_path / "sweep.yaml")
    assert "did you mean" not in info.value.hint
    (tmp_path / "job.yaml").write_text("name: x\ninfra: jobs.yaml\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    assert "did you mean" not in info.value.hint


# --- messages that misled (issue 14) ---------------------------------------------------------------


def test_a_latin1_spec_gets_its_line_column_and_how_to_convert_it(tmp_path):
    # QA: a Latin-1 file got a byte offset with no line and no hint.
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: vit\nbackend: local\ntags: {team: caf\xe9}\n")
    with pytest.raises(SpecError) as info:
        spec.load(path)
    [problem] = info.value.problems
    assert (problem.file, problem.line, problem.column) == (str(path), 3, 17)
    assert problem.message == ("is not UTF-8 text (byte 41): byte 0xe9 at line 3, column 17 is not UTF-8 (a Latin-1 "
                               "or Windows-1252 file?)")
    assert info.value.hint == f"save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path} > NEW.yaml`, then use NEW.yaml"


def test_a_missing_spec_is_not_matched_to_a_name_only_loosely_alike(tmp_path):
    # QA: `local-tiny.yml` missing suggested "latin1.yaml".
    (tmp_path / "latin1.yaml").write_text("")
    (tmp_path / "local-smoke.yaml").write_text("")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "local-tiny.yml")
    assert "did you mean" not in info.value.hint
    # The same name with the other extension first, then a close name, the same extension first.
    (tmp_path / "local-tiny.yaml").write_text("")
    (tmp_path / "local-tiny2.yml").write_text("")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "local-tiny.yml")
    assert info.value.hint == f"did you mean {tmp_path / 'local-tiny.yaml'}?"
    (tmp_path / "local-smoky.yml").write_text("")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "local-smokey.yml")
    assert info.value.hint == f"did you mean {tmp_path / 'local-smoky.yml'}?"  # as close as -smoke, same extension


@pytest.mark.parametrize("content, what", [
    (b"root:x:0:0:root:/root:/bin/bash\n", "a YAML str, not a mapping of fields"),
    (b"- a\n- b\n", "a YAML list, not a mapping of fields"),
])
def test_a_base_that_is_not_a_job_spec_is_named_at_the_sweep_files_base_line(tmp_path, content, what):
    # QA: `base: /etc/passwd` reported "/etc/passwd:1:1: expected a mapping" without naming the sweep file.
    base = tmp_path / "passwd"
    base.write_bytes(content)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"sweep: s\nbase: {base}\ngrid:\n  training.steps: [1]\n")
    with pytest.raises(SpecError) as info:
        spec.load_sweep(sweep)
    [problem] = info.value.problems
    assert (problem.file, problem.line, problem.path) == (str(sweep), 2, "base")
    assert problem.message == f"base {base} is not a job spec: it is {what}"
    assert info.value.hint.startswith("base names the job spec the sweep varies")


def test_problems_inside_the_base_spec_follow_the_sweep_line_that_names_it(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("name: x\nbackend: local\ntraining: {steps: -1}\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("sweep: s\nbase: base.yaml\ngrid:\n  training.steps: [1]\n")
    with pytest.raises(SpecError) as info:
        spec.load_sweep(sweep)
    first, second = info.value.problems
    assert (first.file, first.line, first.path) == (str(sweep), 2, "base")
    assert first.message == f"the base job spec {base} named here does not load; its problems follow"
    assert (second.file, second.line, second.path) == (str(base), 3, "training.steps")
    base.write_text("")
    with pytest.raises(SpecError) as info:
        spec.load_sweep(sweep)
    assert [(p.file, p.line) for p in info.value.problems] == [(str(sweep), 2), (str(base), 1)]
    assert info.value.problems[1].message == "the file is empty; expected a mapping of fields"


def test_an_infra_region_that_is_no_region_is_reported_with_the_other_problems_of_the_file(tmp_path):
    # QA: region `mars` in the infra file with a region in the spec said "remove region: to use
    # mars" and hid the file's three other errors.
    infra = tmp_path / "infra.yaml"
    infra.write_text("role_arn: nope\ncompile_cache_uri: http://127.0.0.1:9/x\noutput_uri: s3://UP/x\nregion: mars\n")
    (tmp_path / "job.yaml").write_text("name: x\nbackend: sagemaker\nregion: us-east-1\ninfra: infra.yaml\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    found = {p.path: (p.file, p.line) for p in info.value.problems}
    assert found == {"region": (str(infra), 4), "role_arn": (str(infra), 1), "compile_cache.uri": (str(infra), 2),
                     "output.uri": (str(infra), 3)}
    assert "'mars' is not valid: expected an AWS region" in info.value.problems[0].message
    assert "remove region" not in (info.value.hint or "") and "to use mars" not in str(info.value)


def test_a_spec_region_other_than_the_stacks_is_reported_with_the_other_problems(tmp_path):
    (tmp_path / "infra.yaml").write_text("role_arn: arn:aws:iam::123456789012:role/r\ncompile_cache_uri: "
                                         "s3://bucket-a/cc\noutput_uri: s3://bucket-a/x\nregion: eu-west-1\n")
    (tmp_path / "job.yaml").write_text("name: x\nbackend: sagemaker\nregion: us-east-1\ninfra: infra.yaml\n"
                                       "training: {steps: -1}\n")
    with pytest.raises(SpecError) as info:
        spec.load(tmp_path / "job.yaml")
    assert [p.path for p in info.value.problems] == ["region", "training.steps"]
    assert info.value.hint.startswith("remove region: to use eu-west-1, or deploy the stack in us-east-1")
