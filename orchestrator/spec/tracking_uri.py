"""An MLflow tracking URI as a spec gives it (`mlflow.tracking_uri`): a tracking server's URL or a
SageMaker MLflow App or tracking-server ARN, and what a job spec may do with each.

Contract: `checked(value)` returns a usable URI or raises pydantic's custom error (the spec's
located problem); `mlflow_arn_region(uri)` is an ARN's region, None for a URL; `problems(spec)`
lists the cross-field problems (field, message): an ARN is only for a backend whose request is
CreateTrainingJob (its MlflowConfig), in the job's own region.
"""

from __future__ import annotations

import re

from pydantic_core import PydanticCustomError

# botocore's CreateTrainingJob MlflowConfig.MlflowResourceArn pattern (sagemaker 2017-07-24 model;
# tests/test_mlflow_spec.py holds them equal): a SageMaker MLflow App or tracking server.
MLFLOW_ARN_PATTERN = r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:mlflow-[a-zA-Z-]*/.*"
# An MLflow tracking server's REST endpoint: http(s)://host[:port][/path], no user:password@.
MLFLOW_URL_PATTERN = r"https?://[A-Za-z0-9.\-\[\]:]+(/[^\s@]*)?"
# The one request that carries an MLflow ARN.
MLFLOW_OPERATION = ("sagemaker", "CreateTrainingJob")


def checked(value: str) -> str:
    if re.fullmatch(MLFLOW_ARN_PATTERN, value) or re.fullmatch(MLFLOW_URL_PATTERN, value):
        return value
    why = ("a URL with user:password@ would be stored in the job file and the request; give the server's URL "
           "and set MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD in environment:" if "@" in value else
           "expected an MLflow tracking server's http(s):// URL (e.g. http://mlflow.internal:5000) or a SageMaker "
           "MLflow App or tracking server ARN (arn:aws:sagemaker:REGION:ACCOUNT:mlflow-app/NAME)")
    raise PydanticCustomError("mlflow_uri", "{message}", {"message": f"{value!r} is not usable: {why}"})


def mlflow_arn_region(uri: str) -> str | None:
    """The region of a SageMaker MLflow ARN; None for a URL."""
    return uri.split(":")[3] if re.fullmatch(MLFLOW_ARN_PATTERN, uri) else None


def problems(spec) -> list[tuple[str, str]]:
    """(field, message) for an ARN the job cannot use (see the module docstring)."""
    region = mlflow_arn_region(spec.mlflow.tracking_uri) if spec.mlflow is not None else None
    if region is None:
        return []
    if spec.backend_type.operation != MLFLOW_OPERATION:
        return [("mlflow.tracking_uri", f"an MLflow ARN is for backend: sagemaker (CreateTrainingJob's MlflowConfig); "
                 f"a {spec.backend} job's container would need the sagemaker-mlflow plugin's SigV4 signing and "
                 "AWS credentials: give the tracking server's http(s):// URL instead")]
    if region != spec.region:
        return [("mlflow.tracking_uri", f"the MLflow ARN is in region {region!r}, the job in {spec.region!r}: "
                 "SageMaker logs to an MLflow App of the job's own region")]
    return []
