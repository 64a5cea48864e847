"""Where a job's objects go: its output prefix (`output_uri`), results.json, the source archive,
the TensorBoard files and checkpoints under it, the compile cache; and every S3 location a job
of a spec reads or writes (`object_uris`), which `validate`, `plan` and `submit` hold to S3's
key limit (`aws_contract.check_uris`). Pure string work: light enough for `validate`'s fast
path, which does not import `request` (tarfile, the source archive).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import names
from orchestrator.paths import home

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

# The source archive's name, in the store and in the code channel.
ARCHIVE_NAME = "sourcedir.tar.gz"
TENSORBOARD_DIR = "tensorboard"


def output_uri(spec: JobSpec) -> str:
    """The job's output prefix: output.uri, or the local store for a local spec without one."""
    if spec.output.uri:
        return spec.output.uri.rstrip("/")
    return f"file://{home()}/store/jobs"


def compile_cache_uri(spec: JobSpec) -> str | None:
    """compile_cache.uri, or the local store's cache for a local spec without one."""
    if spec.compile_cache.uri:
        return spec.compile_cache.uri.rstrip("/")
    from orchestrator import backends

    if not backends.backend_class(spec.backend).cloud:
        return f"file://{home()}/store/compile-cache"
    return None


def results_uri(output: str, name: str) -> str:
    return f"{output}/results/{name}/results.json"


def tensorboard_uri(output: str, name: str) -> str:
    """Where a job's TensorBoard event files go: `<output>/tensorboard/<job>`."""
    return f"{output}/{TENSORBOARD_DIR}/{name}"


def object_uris(spec: JobSpec, job_name: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Every S3 location a job of `spec` reads or writes, by the spec field it derives from:
    {field: [(what, uri), ...]}, for `aws_contract.check_uris`. Without `job_name`, the longest
    name a job may have (names.MAX_JOB_NAME characters: reruns and sweep trials included), so
    `validate`, `plan` and a sweep's trials agree on which prefixes are too long."""
    name = job_name or "n" * names.MAX_JOB_NAME
    out = output_uri(spec)
    uris = {"output.uri": [
        ("results.json", results_uri(out, name)),
        ("source archive", source_uri(out, "0" * 64)),
        # SageMaker's model artifact: <S3OutputPath>/<TrainingJobName>/output/model.tar.gz
        # (CreateTrainingJob API reference, OutputDataConfig.S3OutputPath).
        ("SageMaker model artifact", f"{out}/{name}/output/model.tar.gz"),
        ("TensorBoard prefix", f"{tensorboard_uri(out, name)}/"),
        ("checkpoint prefix", f"{out}/checkpoints/{name}/"),
    ]}
    cache = compile_cache_uri(spec)
    if cache:
        uris["compile_cache.uri"] = [("compile cache prefix", f"{cache}/")]
    if spec.data.source != "synthetic":
        uris["data.source"] = [("data.source", spec.data.source)]
    return uris


def source_uri(output: str, archive_sha: str) -> str:
    """Where the archive is stored: content-addressed, so an upload can be skipped when present."""
    return f"{output}/source/{archive_sha[:16]}/{ARCHIVE_NAME}"
