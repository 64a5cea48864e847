"""MLflow on the laptop side: what a job with `mlflow:` carries to its container and its request.

Contract (all pure):
- `job_section(spec, job_name, tags)`: the job file's "mlflow" object (tracking URI, experiment,
  run name, sweep and trial, whether the URI is a SageMaker ARN), None without `mlflow:`. The
  experiment defaults to the sweep's name (from the job's `orchestrator:sweep` tag) for a
  sweep's trials, else to the job's spec name; the run name is the job name.
- `environment(section)`: the variables the container gets (MLFLOW_TRACKING_URI,
  MLFLOW_EXPERIMENT_NAME, MLFLOW_RUN_NAME), for every backend.
- `mlflow_config(section)`: CreateTrainingJob's MlflowConfig for an ARN, None for a URL.
- `requirements(section)`: the pinned client lines the source archive's requirements.txt adds.
The container side (logging itself) is `entrypoints.launcher.mlflow_run`.
"""

from __future__ import annotations

import math

from orchestrator import cost, names, peak_flops
from orchestrator.spec.models import mlflow_arn_region

# The client the container installs, at the version uv.lock pins (tests/test_mlflow_spec.py
# holds the two equal): the light, tracking-only distribution of MLflow.
MLFLOW_SKINNY_VERSION = "3.17.2"
# An ARN as the tracking URI needs the sagemaker-mlflow plugin (SigV4-signed requests).
SAGEMAKER_MLFLOW_VERSION = "0.5.0"

ENV_URI = "MLFLOW_TRACKING_URI"
ENV_EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
ENV_RUN_NAME = "MLFLOW_RUN_NAME"


def experiment_name(spec, tags: dict) -> str:
    """The experiment a job logs to: `mlflow.experiment`, else its sweep's name, else the spec's name."""
    if spec.mlflow is not None and spec.mlflow.experiment:
        return spec.mlflow.experiment
    sweep = tags.get(names.TAG_SWEEP)
    parsed = names.SWEEP_ID.fullmatch(sweep) if sweep else None
    return parsed["name"] if parsed else spec.name


def job_section(spec, job_name: str, tags: dict, target=None) -> dict | None:
    """The job file's "mlflow" object (see the module docstring); None without `mlflow:`. With
    the resolved `target`, also what the container cannot know but its end's metrics need: the
    job's price per hour (all instances), its peak FLOP/s at its precision and its cost bound."""
    if spec.mlflow is None:
        return None
    uri = spec.mlflow.tracking_uri
    section = {"tracking_uri": uri, "experiment": experiment_name(spec, tags), "run_name": job_name,
               "arn": mlflow_arn_region(uri) is not None}
    if target is not None:
        estimate = cost.estimate(spec, target)
        price = cost.price_of(spec, target)
        section["price_per_hour"] = cost.rate(price).usd_per_hour * spec.instance.count if price else None
        top = peak_flops.peak(spec.instance.type, spec.training.precision)
        section["peak_flops_per_s"] = top.per_instance * spec.instance.count if top else None
        section["cost_bound_usd"] = estimate.usd_max if math.isfinite(estimate.usd_max) and estimate.usd_max else None
    if tags.get(names.TAG_SWEEP):
        section["sweep"] = tags[names.TAG_SWEEP]
        section["trial"] = tags.get(names.TAG_TRIAL)
        section["attempt"] = int(tags.get(names.TAG_ATTEMPT) or 0)
    return section


def environment(section: dict | None) -> dict[str, str]:
    """The MLflow variables the container gets (MLflow's own names; our logger reads the job
    file, a user's own code in the container reads these)."""
    if section is None:
        return {}
    return {ENV_URI: section["tracking_uri"], ENV_EXPERIMENT: section["experiment"], ENV_RUN_NAME: section["run_name"]}


def mlflow_config(section: dict | None) -> dict | None:
    """CreateTrainingJob's MlflowConfig (botocore: MlflowResourceArn required, MlflowExperimentName
    and MlflowRunName 1-256 characters) for a SageMaker MLflow ARN; None for a URL or no MLflow."""
    if section is None or not section["arn"]:
        return None
    return {"MlflowResourceArn": section["tracking_uri"], "MlflowExperimentName": section["experiment"],
            "MlflowRunName": section["run_name"]}


def requirements(section: dict | None) -> str:
    """The requirements.txt lines the container needs for MLflow: none without it."""
    if section is None:
        return ""
    lines = f"mlflow-skinny=={MLFLOW_SKINNY_VERSION}\n"
    if section["arn"]:
        lines += f"sagemaker-mlflow=={SAGEMAKER_MLFLOW_VERSION}\n"
    return lines
