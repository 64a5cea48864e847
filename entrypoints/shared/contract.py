"""The container contract: SageMaker's SM_* variables, /opt/ml paths, and our job file.

Stdlib only. The orchestrator imports this module to build requests and to lay out local
jobs; the entrypoint reads it inside the container. Nothing here imports `orchestrator`.

Our own piece of the contract is the resolved job file, `job.json`, which travels inside
`sourcedir.tar.gz` (the job's `code` input channel) next to `launch.py` (hyperparameter values
are size-limited, so the spec does not travel as a hyperparameter). Its shape, version `JOB_FILE_SCHEMA`:

    {
      "schema": 1,
      "job_name": "vit-trn1-1a2b3c4d",
      "spec_hash": "<sha256 hex of the spec>",
      "spec": { ...the JobSpec as JSON, field names as `orchestrator schema` prints them... },
      "instance": {"type": "ml.trn1.2xlarge", "family": "trn1", "neuron_cores": 2,
                   "logical_cores": 2, "lnc": 1, "vcpus": 8},
      "workers_per_node": 2,
      "compile_cache": {"uri": "s3://bucket/compile-cache" | "file:///..." | null,
                        "mode": "tarball" | "off", "push_interval_s": 60},
      "results_uri": "s3://bucket/jobs/results/<job_name>/results.json" | "file:///..." | null,
      "tensorboard_uri": "s3://bucket/jobs/tensorboard/<job_name>",  # Batch only: launch.py uploads
      "environment": {"NEURON_RT_...": "..."},   # also in the request's Environment
      "tags": {"team": "vision", "orchestrator:spec-hash": "..."},
      "varied": {"training.optimizer.lr": 0.001},  # a sweep trial only: the sweep's values
      "preferences": [   # instance.preferences only: each type SageMaker may select, in order
        {"type": "ml.trn2.48xlarge", "count": 1, "family": "trn2", "neuron_cores": 128,
         "logical_cores": 64, "lnc": 2, "vcpus": 192, "workers_per_node": 64, "efa": false,
         "environment": {...}, "usd_per_hour": null}],  # launch.py adapts to the selected row
      "backend": "local"   # only when another backend than the spec's runs it (`submit --local`)
    }
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

JOB_FILE = "job.json"
JOB_FILE_SCHEMA = 1
PROGRAM = "launch.py"
# The job's code travels as an input channel: the source archive, unpacked by the entrypoint.
CODE_CHANNEL = "code"
SOURCE_ARCHIVE = "sourcedir.tar.gz"
# Where /opt/ml is (the training toolkit's variable; the local backend roots each host elsewhere).
BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"

OPT_ML = "/opt/ml"
# Paths relative to the /opt/ml root (the local backend roots them elsewhere).
HYPERPARAMETERS = "input/config/hyperparameters.json"
RESOURCE_CONFIG = "input/config/resourceconfig.json"
INPUT_DATA = "input/data"
MODEL_DIR = "model"
OUTPUT_DIR = "output"
OUTPUT_DATA_DIR = "output/data"
# TensorBoardOutputConfig.LocalPath's default (botocore's documentation): rank 0 writes here.
TENSORBOARD_DIR = "output/tensorboard"
FAILURE_FILE = "output/failure"
CHECKPOINT_DIR = "checkpoints"
CODE_DIR = "code"

# Hyperparameters the SageMaker training toolkit's library reads (values JSON-encoded).
HP_PROGRAM = "sagemaker_program"
HP_REGION = "sagemaker_region"
HP_JOB_NAME = "sagemaker_job_name"
HP_LOG_LEVEL = "sagemaker_container_log_level"

# Variables the toolkit's library sets (entrypoints.launcher.container), as our entrypoint reads them.
SM_VARS = (
    "SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR", "SM_OUTPUT_DIR", "SM_INPUT_DIR", "SM_CHANNELS",
    "SM_HOSTS", "SM_CURRENT_HOST", "SM_CURRENT_INSTANCE_TYPE", "SM_HPS", "SM_NUM_NEURONS",
    "SM_NUM_CPUS", "SM_NUM_GPUS", "SM_RESOURCE_CONFIG", "SM_TRAINING_ENV",
    "SM_NETWORK_INTERFACE_NAME", "SM_CHECKPOINT_DIR",
)
# Set by us on multi-node trn1n/trn2 (the toolkit sets them only for ml.trn1.32xlarge).
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}
# Port torchrun's rendezvous listens on at the first host.
MASTER_PORT = 29500
# Overrides where the entrypoint finds the master host (the local backend uses loopback).
MASTER_ADDR_ENV = "ORCHESTRATOR_MASTER_ADDR"
# Overrides the checkpoint dir (SageMaker syncs /opt/ml/checkpoints; local jobs use their tree).
CHECKPOINT_DIR_ENV = "SM_CHECKPOINT_DIR"
# Seconds between the progress reports of each host's first rank (launch.py sets it; 0 = none).
PROGRESS_REPORT_ENV = "ORCHESTRATOR_PROGRESS_REPORT_S"


def channel_env(name: str) -> str:
    return f"SM_CHANNEL_{name.upper()}"


def container_entrypoint() -> list[str]:
    """The request's AlgorithmSpecification.ContainerEntrypoint: unpack the code channel's
    archive into <base>/code and `exec` launch.py there, so that launch.py is the container's
    first process and receives SageMaker's SIGTERM (`entrypoints.launcher.container`). <base> is
    SAGEMAKER_BASE_DIR or /opt/ml. Each element stays within botocore's limit (256 characters)."""
    base = f'"${{{BASE_DIR_ENV}:-{OPT_ML}}}"'
    script = (f"b={base} && mkdir -p \"$b/{CODE_DIR}\" && "
              f"tar -xzf \"$b/{INPUT_DATA}/{CODE_CHANNEL}/{SOURCE_ARCHIVE}\" -C \"$b/{CODE_DIR}\" && "
              f"exec python3 \"$b/{CODE_DIR}/{PROGRAM}\" --container")
    return ["/bin/bash", "-c", script]


@dataclass(frozen=True)
class Contract:
    """What the container told this host, read once from the environment."""

    hosts: tuple[str, ...]
    current_host: str
    instance_type: str
    model_dir: Path
    output_dir: Path
    output_data_dir: Path
    input_dir: Path
    checkpoint_dir: Path
    channels: Mapping[str, Path] = field(default_factory=dict)
    hyperparameters: Mapping[str, object] = field(default_factory=dict)
    num_neurons: int = 0
    num_cpus: int = 0
    master_addr: str = ""

    @property
    def node_rank(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def num_nodes(self) -> int:
        return len(self.hosts)

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Contract:
        """Read the SM_* variables (defaults: a single-host container under /opt/ml, or under
        SAGEMAKER_BASE_DIR)."""
        env = os.environ if env is None else env
        root = Path(env.get(BASE_DIR_ENV) or OPT_ML)
        hosts = tuple(json.loads(env.get("SM_HOSTS", '["algo-1"]')))
        current = env.get("SM_CURRENT_HOST", hosts[0])
        if current not in hosts:
            raise ValueError(f"SM_CURRENT_HOST {current!r} is not in SM_HOSTS {list(hosts)}")
        channel_names = json.loads(env.get("SM_CHANNELS", "[]"))
        channels = {
            name: Path(env.get(channel_env(name), str(root / INPUT_DATA / name))) for name in channel_names
        }
        return cls(
            hosts=hosts,
            current_host=current,
            instance_type=env.get("SM_CURRENT_INSTANCE_TYPE", ""),
            model_dir=Path(env.get("SM_MODEL_DIR", str(root / MODEL_DIR))),
            output_dir=Path(env.get("SM_OUTPUT_DIR", str(root / OUTPUT_DIR))),
            output_data_dir=Path(env.get("SM_OUTPUT_DATA_DIR", str(root / OUTPUT_DATA_DIR))),
            input_dir=Path(env.get("SM_INPUT_DIR", str(root / "input"))),
            checkpoint_dir=Path(env.get(CHECKPOINT_DIR_ENV, str(root / CHECKPOINT_DIR))),
            channels=channels,
            hyperparameters=json.loads(env.get("SM_HPS", "{}")),
            num_neurons=int(env.get("SM_NUM_NEURONS", "0") or 0),
            num_cpus=int(env.get("SM_NUM_CPUS", str(os.cpu_count() or 1)) or 1),
            master_addr=env.get(MASTER_ADDR_ENV, hosts[0]),
        )


def sm_environment(root: Path, hosts: list[str], current_host: str, instance_type: str,
                   hyperparameters: Mapping[str, object], channels: list[str],
                   num_neurons: int = 0, num_cpus: int | None = None) -> dict[str, str]:
    """The SM_* variables a SageMaker container would set, rooted at `root` instead of /opt/ml.

    The local backend uses this to run `launch.py` as the container would.
    """
    resource = {"current_host": current_host, "hosts": hosts, "network_interface_name": "lo",
                "current_instance_type": instance_type}
    env = {
        "SM_MODEL_DIR": str(root / MODEL_DIR),
        "SM_OUTPUT_DIR": str(root / OUTPUT_DIR),
        "SM_OUTPUT_DATA_DIR": str(root / OUTPUT_DATA_DIR),
        "SM_INPUT_DIR": str(root / "input"),
        "SM_CHECKPOINT_DIR": str(root / CHECKPOINT_DIR),
        "SM_HOSTS": json.dumps(hosts),
        "SM_CURRENT_HOST": current_host,
        "SM_CURRENT_INSTANCE_TYPE": instance_type,
        "SM_HPS": json.dumps(dict(hyperparameters)),
        "SM_CHANNELS": json.dumps(sorted(channels)),
        "SM_NUM_NEURONS": str(num_neurons),
        "SM_NUM_CPUS": str(num_cpus if num_cpus is not None else (os.cpu_count() or 1)),
        "SM_NUM_GPUS": "0",
        "SM_RESOURCE_CONFIG": json.dumps(resource),
        "SM_NETWORK_INTERFACE_NAME": "lo",
    }
    for name in channels:
        env[channel_env(name)] = str(root / INPUT_DATA / name)
    for key, value in hyperparameters.items():
        env[f"SM_HP_{key.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["SM_TRAINING_ENV"] = json.dumps({"hosts": hosts, "current_host": current_host,
                                         "hyperparameters": dict(hyperparameters)})
    return env


# A schedule kept in the cloud (orchestrator.schedule.statemachine) embeds the jobs of the tick
# with this label (2000-01-01 00:00 UTC, the shape of every tick label: YYYYMMDDHHMM); each run
# creates them with its own label in that place. The archive, and its job.json, are the
# placeholder's: `for_run` makes the job file the run's.
RUN_PLACEHOLDER = "200001010000"


def for_run(job: dict, run_name: str | None) -> dict:
    """The job file as the job `run_name` (the name SageMaker runs it under, the request's
    `HP_JOB_NAME`) needs it: when job.json names the placeholder tick's job and `run_name` is
    that name with a tick label in the placeholder's place, the label replaces the placeholder
    in the job's name, its results_uri and its tags (so results.json lands under the run's
    name). Any other job file is returned as it is."""
    old = job.get("job_name") or ""
    at = old.find(RUN_PLACEHOLDER)
    if at < 0 or not run_name or run_name == old or len(run_name) != len(old):
        return job
    end = at + len(RUN_PLACEHOLDER)
    label = run_name[at:end]
    if run_name[:at] != old[:at] or run_name[end:] != old[end:] or not label.isdigit():
        return job

    def swap(value):
        return value.replace(RUN_PLACEHOLDER, label) if isinstance(value, str) else value

    return {**job, "job_name": run_name, "results_uri": swap(job.get("results_uri")),
            "tags": {key: swap(value) for key, value in (job.get("tags") or {}).items()}}


def load_job(path: Path) -> dict:
    """Read and sanity-check the resolved job file (see the module docstring)."""
    job = json.loads(path.read_text())
    if job.get("schema") != JOB_FILE_SCHEMA:
        raise ValueError(f"{path}: job file schema {job.get('schema')!r}, expected {JOB_FILE_SCHEMA}")
    for key in ("job_name", "spec_hash", "spec", "instance", "workers_per_node", "compile_cache"):
        if key not in job:
            raise ValueError(f"{path}: job file has no {key!r}")
    return job


# --- The precompile pass (`training.precompile`, entrypoints/launcher/precompile.py) ----------------
# launch.py runs `neuron_parallel_compile <the torchrun command>` with PRECOMPILE_STEPS_ENV set:
# train.py then runs that many steps from step 0 (the Neuron docs suggest 10-15 for graph
# extraction), reads and writes no checkpoint and saves no model (the tool's graph-extraction
# mode executes nothing: outputs are invalid).
PRECOMPILE_PROGRAM = "neuron_parallel_compile"
PRECOMPILE_STEPS_ENV = "ORCHESTRATOR_PRECOMPILE_STEPS"
PRECOMPILE_STEPS = 10


# --- Log lines the request's MetricDefinitions parse -------------------------------------
# train.py prints one METRICS_TAG line every `log_every` steps on rank 0 and one SUMMARY_TAG
# line at the end; request.py turns METRIC_NAMES into SageMaker MetricDefinitions regexes.
#
# A line can reach the metric parser cut in two: a relay may read the output in chunks (the
# SageMaker training toolkit, when it runs a program, reads 64 KB at a time and splits each
# chunk at newlines: sagemaker_training process.watch), and ranks writing to one pipe interleave. So every value ends with ";" and
# the regexes demand it: a line cut inside a number yields no value rather than a wrong one.
# `write_line` writes each line in one write call (short lines: below PIPE_BUF, so a pipe
# never interleaves another process's bytes into it) and flushes it.
METRICS_TAG = "orchestrator-metrics"
SUMMARY_TAG = "orchestrator-summary"
# SageMaker metric name -> (tag, key) in those lines.
METRIC_NAMES = {
    "train:loss": (METRICS_TAG, "loss"),
    "train:step_time_s": (METRICS_TAG, "step_time_s"),
    "train:samples_per_s": (METRICS_TAG, "samples_per_s"),
    "summary:step_time_p50_s": (SUMMARY_TAG, "step_time_p50_s"),
    "summary:samples_per_s": (SUMMARY_TAG, "samples_per_s"),
    "summary:time_to_first_step_s": (SUMMARY_TAG, "time_to_first_step_s"),
    "summary:compile_s": (SUMMARY_TAG, "compile_s"),
}
# launch.py prints one UTILIZATION_TAG line at each heartbeat and at the end when
# neuron-monitor runs beside training (entrypoints.launcher.utilization): the means so far.
UTILIZATION_TAG = "orchestrator-utilization"
LAUNCH_METRIC_NAMES = {
    "utilization:neuroncore_pct": (UTILIZATION_TAG, "neuroncore_util_pct"),
    "utilization:host_vcpu_pct": (UTILIZATION_TAG, "host_vcpu_pct"),
    "utilization:device_memory_gib": (UTILIZATION_TAG, "device_memory_gib"),
    "utilization:host_memory_gib": (UTILIZATION_TAG, "host_memory_gib"),
}
NUMBER_REGEX = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
VALUE_END = ";"
# A metric line stays far below PIPE_BUF (4096 bytes, the size of an atomic pipe write).
MAX_METRIC_LINE = 256


def metric_line(tag: str, **values: float | int) -> str:
    """`<tag> key=value; key=value;`, values printed so NUMBER_REGEX matches them."""
    parts = [tag]
    for key, value in values.items():
        text = f"{value:.6g}" if isinstance(value, float) else f"{value}"
        parts.append(f"{key}={text}{VALUE_END}")
    return " ".join(parts)


def metric_regex(tag: str, key: str) -> str:
    return rf"{tag} .*\b{key}={NUMBER_REGEX}{VALUE_END}"


def write_line(line: str, stream=None) -> None:
    """`line` and its newline in one write call, flushed (see above)."""
    import sys

    stream = sys.stdout if stream is None else stream
    stream.write(line + "\n")
    stream.flush()
