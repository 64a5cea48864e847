"""Reading jobs' MLflow runs back (`results --mlflow URI`): the runs our jobs logged in one
experiment, each with its params, metrics and tags, as plain dicts.

Contract: `read_runs(uri, experiment, sweep=None)` -> the jobs' runs (a sweep's parent run
left out), newest first, only those of `sweep` when given (an id, or a sweep name: its every
run). InputError (exit 2) when the client is not installed, the URI is an ARN without the
sagemaker-mlflow plugin, or the experiment does not exist; BackendError (exit 1) when the server
cannot be asked. Reads only.
"""

from __future__ import annotations

from orchestrator import names
from orchestrator.errors import BackendError, InputError
from orchestrator.spec.models import mlflow_arn_region

ROLE_TAG = "orchestrator.role"
SWEEP_TAG = "orchestrator.sweep"
MAX_RUNS = 10_000


def _client(uri: str):
    try:
        from mlflow import MlflowClient
    except ImportError:
        raise InputError("--mlflow needs the MLflow client, which is not installed",
                         hint="pip install 'trainium-vit-orchestrator[tracking]' (mlflow-skinny)") from None
    if mlflow_arn_region(uri) is not None:
        try:
            import sagemaker_mlflow  # noqa: F401 - the plugin registers the arn: tracking store
        except ImportError:
            raise InputError(f"--mlflow {uri}: an ARN needs the sagemaker-mlflow plugin (SigV4-signed requests)",
                             hint="pip install 'trainium-vit-orchestrator[tracking]', with AWS credentials for "
                                  "the MLflow App's account; or give the tracking server's https:// URL") from None
    import mlflow

    # The sagemaker-mlflow plugin signs and routes by the global tracking URI.
    mlflow.set_tracking_uri(uri)
    if mlflow_arn_region(uri) is None:
        # Where the plugin is installed, its header provider fails on a URL at every request.
        import logging

        logging.getLogger("mlflow.tracking.request_header.registry").setLevel(logging.ERROR)
    return MlflowClient(tracking_uri=uri)


def read_runs(uri: str, experiment: str, sweep: str | None = None) -> list[dict]:
    """The jobs' runs in `experiment` at `uri` (see the module docstring)."""
    client = _client(uri)
    try:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise InputError(f"--mlflow {uri}: no experiment {experiment!r}",
                             hint="--experiment names the spec's mlflow.experiment (default: the sweep's name, "
                                  "else the job's)")
        runs = client.search_runs([found.experiment_id], max_results=MAX_RUNS, order_by=["attributes.start_time DESC"])
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow's own errors: the server's answer in our words
        raise BackendError(f"--mlflow {uri}: could not read the runs: {type(exc).__name__}: {str(exc)[:500]}",
                           hint="check that the tracking server is up and reachable from here") from None
    out = []
    for run in runs:
        tags = dict(run.data.tags)
        if tags.get(ROLE_TAG) == "sweep":
            continue
        if sweep is not None and not names.tagged_in_sweep(tags.get(SWEEP_TAG, ""), sweep):
            continue
        out.append({"run_id": run.info.run_id, "run_name": run.info.run_name, "status": run.info.status,
                    "job_name": tags.get("orchestrator.job"), "sweep": tags.get(SWEEP_TAG),
                    "trial": tags.get("orchestrator.trial"), "parent_run_id": tags.get("mlflow.parentRunId"),
                    "params": dict(run.data.params), "metrics": dict(run.data.metrics)})
    return out
