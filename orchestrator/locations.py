"""Where a job's objects go, built in this one place: its output prefix, results.json, the source
archive, the TensorBoard files and checkpoints under it, the compile cache. `Locations` is the
value a backend makes when the job is prepared (`Backend.locations`); `Prepared` carries it, the
ledger records it, and the job file, the request, forecasts, results and the backends read it.
`object_uris` lists every S3 location a job of a spec may read or write, which `validate`,
`plan` and `submit` hold to S3's key limit (`aws_contract.check_uris`). Pure string work: light
enough for `validate`'s fast path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator import names
from orchestrator.paths import home

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

# The source archive's name, in the store and in the code channel.
ARCHIVE_NAME = "sourcedir.tar.gz"
TENSORBOARD_DIR = "tensorboard"
RESULTS_DIR = "results"  # <output>/results/<job>/results.json (docs/RESULTS.md)
# The container writes it under this name (`entrypoints.shared.results_schema.RESULTS_FILE`,
# which tests/test_locations.py holds equal): spelled here too so that `validate` does not load
# the results schema.
RESULTS_FILE = "results.json"
SOURCE_DIR = "source"
CHECKPOINTS_DIR = "checkpoints"


@dataclass(frozen=True)
class Locations:
    """Where one job's objects are (URIs, no trailing slash). `source` is known once the
    archive is built (`with_source`)."""

    output: str
    results: str
    tensorboard: str
    checkpoints: str
    compile_cache: str | None
    source: str | None = None

    @classmethod
    def under(cls, output: str, job_name: str, compile_cache: str | None) -> Locations:
        """A job's locations under its `output` prefix, with its `compile_cache` prefix."""
        output = output.rstrip("/")
        return cls(output=output, results=results_uri(output, job_name),
                   tensorboard=tensorboard_uri(output, job_name),
                   checkpoints=f"{output}/{CHECKPOINTS_DIR}/{job_name}",
                   compile_cache=compile_cache.rstrip("/") if compile_cache else None)

    def with_source(self, archive_sha: str) -> Locations:
        return dataclasses.replace(self, source=source_uri(self.output, archive_sha))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Locations:
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


def of(spec: JobSpec, job_name: str) -> Locations:
    """The locations of job `job_name` of `spec`, as its backend puts them (`Backend.locations`)."""
    return spec.backend_type.locations(spec, job_name)


def output_uri(spec: JobSpec) -> str:
    """The output prefix of the spec's jobs (`of`)."""
    return of(spec, "-").output


def compile_cache_uri(spec: JobSpec) -> str | None:
    """The compile cache prefix of the spec's jobs (`of`); None without one."""
    return of(spec, "-").compile_cache


def store(job_name: str) -> Locations:
    """A job's locations in this machine's store (`$ORCHESTRATOR_HOME/store`)."""
    root = f"file://{home()}/store"
    return Locations.under(f"{root}/jobs", job_name, f"{root}/compile-cache")


def results_uri(output: str, name: str) -> str:
    """Where a job's results.json is: `<output>/results/<job>/results.json`."""
    return f"{output.rstrip('/')}/{RESULTS_DIR}/{name}/{RESULTS_FILE}"


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
        ("checkpoint prefix", f"{out}/{CHECKPOINTS_DIR}/{name}/"),
    ]}
    cache = compile_cache_uri(spec)
    if cache:
        uris["compile_cache.uri"] = [("compile cache prefix", f"{cache}/")]
    if spec.data.source != "synthetic":
        uris["data.source"] = [("data.source", spec.data.source)]
    return uris


def source_uri(output: str, archive_sha: str) -> str:
    """Where the archive is stored: content-addressed, so an upload can be skipped when present."""
    return f"{output}/{SOURCE_DIR}/{archive_sha[:16]}/{ARCHIVE_NAME}"


def output_of_source(uri: str) -> str:
    """The output prefix of a source archive's URI (`source_uri`'s inverse): for a job submitted
    from another machine, whose request names no other location (an AWS Batch job's)."""
    return uri.rsplit(f"/{SOURCE_DIR}/", 1)[0]
