"""entrypoints.shared.results_schema: results.json defined once, for the writer, a reader and the doc."""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from entrypoints.shared import results_schema as schema

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RESULTS.md"
BEGIN = "<!-- generated from entrypoints/shared/results_schema.py"
END = "<!-- end of the generated part -->"

READER = TypeAdapter(schema.Results)


def written() -> dict:
    """A document as the launcher writes it at the end of a completed job."""
    record = schema.Results(
        schema=schema.SCHEMA, job_name="vit-1", spec_hash="ab" * 32, status="completed", failure_reason=None,
        backend="sagemaker", region="us-east-1",
        instance=schema.Instance(type="ml.trn1.2xlarge", count=1, neuron_cores=2, logical_cores=2,
                                 workers_per_node=2),
        world_size=2, runtime="xla", compile=False, precision="bf16", batch_size=32, global_batch=64, steps=500,
        warmup_steps=10, steps_done=500,
        model=schema.Model(arch="vit_base_patch16_224", image_size=224, patch_embed="linear"),
        step_time_s=schema.StepTime(p50=0.5, p90=0.6, mean=0.52, n=490), samples_per_s=123.1,
        time_to_first_step_s=30.0, compile_s=28.0, compiler_cache={}, ddp_split_graphs=None,
        cache=schema.CacheStats(mode="tarball", uri="s3://b/c", key="k", hit_entries=1, new_entries=3, pull_bytes=5,
                                pull_s=0.1, push_bytes=7, push_s=0.2, pushes=2, warnings=[], persistent_dir=None,
                                local_entries=0),
        container=schema.Container(entrypoint=True, sm_environment="sagemaker-training 5.1.4", hostname=None,
                                   requirements="installed"),
        final_loss=6.9, versions=schema.Versions(python="3.12.3", torch="2.9.0", torch_xla="2.9.0", timm="1.0.31",
                                                 neuronx_cc=None),
        started_at="2026-11-29T22:00:00Z", ended_at="2026-11-29T22:05:00Z", heartbeat_at="2026-11-29T22:05:00Z",
        duration_s=300.0, tags={"team": "vision"}, warnings=[])
    return schema.as_document(record)


def _generated_part(text: str) -> str:
    start = text.index(BEGIN)
    return text[text.index("\n", start) + 1: text.index(END)]


def test_the_doc_tables_are_the_schema():
    """docs/RESULTS.md documents exactly the schema's fields, types and meanings (its
    generated part); UPDATE_GOLDEN=1 rewrites that part from the schema."""
    text = DOC.read_text()
    expected = schema.markdown()
    if os.environ.get("UPDATE_GOLDEN"):
        start = text.index("\n", text.index(BEGIN)) + 1
        DOC.write_text(text[:start] + expected + text[text.index(END):])
        text = DOC.read_text()
    assert _generated_part(text) == expected
    # No other field table anywhere else in the doc.
    outside = text.replace(_generated_part(text), "")
    assert "| field | type |" not in outside


def test_the_doc_names_every_field_of_every_object():
    text = _generated_part(DOC.read_text())
    for heading, cls in schema.SECTIONS:
        section = text.split(heading + "\n", 1)[1].split("\n#", 1)[0]
        named = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
        assert named == {f.name for f in dataclasses.fields(cls)}, heading


def test_the_example_in_the_doc_is_a_valid_document():
    text = DOC.read_text()
    example = text.split("## Example", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    import json

    parsed = READER.validate_python(json.loads(example))
    assert parsed.status == "completed" and parsed.cache.hit_entries == 0 and parsed.container.entrypoint is True


def test_type_text_writes_types_as_the_doc_does():
    import typing

    resolved = typing.get_type_hints(schema.Results, include_extras=True)
    assert schema.type_text(resolved["job_name"]) == "string"
    assert schema.type_text(resolved["failure_reason"]) == "string \\| null"
    assert schema.type_text(resolved["status"]) == '`"running"` \\| `"completed"` \\| `"stopped"` \\| `"failed"`'
    assert schema.type_text(resolved["world_size"]) == "int"
    assert schema.type_text(resolved["warnings"]) == "list of strings"
    assert schema.type_text(resolved["cache"]) == "object" and schema.type_text(resolved["tags"]) == "object"


def test_a_reader_takes_what_the_writer_writes_and_ignores_unknown_fields():
    doc = written()
    assert set(doc) == {f.name for f in dataclasses.fields(schema.Results)}
    parsed = READER.validate_python({**doc, "added_in_a_later_v1": 1})
    assert parsed == schema.Results(**{**doc, "instance": schema.Instance(**doc["instance"]),
                                       "model": schema.Model(**doc["model"]),
                                       "step_time_s": schema.StepTime(**doc["step_time_s"]),
                                       "cache": schema.CacheStats(**doc["cache"]),
                                       "container": schema.Container(**doc["container"]),
                                       "versions": schema.Versions(**doc["versions"])})
    assert parsed.instance.count == 1 and parsed.step_time_s.p50 == 0.5 and parsed.tags == {"team": "vision"}


def test_only_the_identity_fields_are_required_and_the_rest_read_as_null_or_empty():
    assert schema.required_fields() == ["schema", "job_name", "status", "instance", "instance.type",
                                        "instance.count"]
    parsed = READER.validate_python({"schema": schema.SCHEMA, "job_name": "old-1", "status": "failed",
                                     "instance": {"type": "ml.trn1.2xlarge", "count": 2}})
    assert parsed.region is None and parsed.cache is None and parsed.instance.neuron_cores is None
    assert parsed.tags == {} and parsed.warnings == [] and parsed.compiler_cache == {}
    for missing in ("schema", "job_name", "status", "instance"):
        doc = {k: v for k, v in written().items() if k != missing}
        with pytest.raises(ValidationError) as info:
            READER.validate_python(doc)
        assert info.value.errors()[0]["loc"] == (missing,) and info.value.errors()[0]["type"] == "missing"
    doc = written()
    del doc["instance"]["count"]
    with pytest.raises(ValidationError) as info:
        READER.validate_python(doc)
    assert info.value.errors()[0]["loc"] == ("instance", "count")


@pytest.mark.parametrize("path, value, message", [
    (("instance", "count"), 0, "Input should be greater than or equal to 1"),
    (("instance", "neuron_cores"), -1, "Input should be greater than or equal to 0"),
    (("cache", "hit_entries"), -2, "Input should be greater than or equal to 0"),
    (("steps_done",), -1, "Input should be greater than or equal to 0"),
    (("status",), "exploded", "Input should be 'running', 'completed', 'stopped' or 'failed'"),
    (("schema",), "orchestrator.results/v2", "Input should be 'orchestrator.results/v1'"),
    (("world_size",), None, "Input should be a valid integer"),
    (("tags",), {"team": 3}, "Input should be a valid string"),
])
def test_a_reader_refuses_values_outside_the_schema_naming_the_field(path, value, message):
    doc = written()
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(ValidationError) as info:
        READER.validate_python(doc)
    error = info.value.errors()[0]
    assert error["loc"][: len(path)] == path and error["msg"] == message


def test_the_writer_can_neither_misname_nor_forget_a_field():
    values = written()["cache"]
    assert schema.from_values(schema.CacheStats, values) == schema.CacheStats(**values)
    with pytest.raises(TypeError):
        schema.from_values(schema.CacheStats, {**values, "hits": 3})  # a name the schema does not have
    with pytest.raises(TypeError, match="CacheStats: no value for pushes"):
        schema.from_values(schema.CacheStats, {k: v for k, v in values.items() if k != "pushes"})


def test_the_schema_module_is_stdlib_only_and_loads_without_pydantic():
    """The container imports it (launch.py): no pydantic, nothing from orchestrator."""
    tree = ast.parse((ROOT / "entrypoints" / "shared" / "results_schema.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    code = ("import sys; sys.modules['pydantic'] = None; from entrypoints.shared import results_schema as s; "
            "print(s.Results(schema=s.SCHEMA, job_name='x', status='running', "
            "instance=s.Instance(type='t', count=1)).status)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0 and done.stdout == "running\n", done.stderr
