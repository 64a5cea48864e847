"""Doctor rules about the container environment every backend's job gets: the LNC it sets
(N006), a value that looks like a secret (N076). SageMaker's limits on it (N023) and on tags (N029) are the sagemaker backend's rules,
what a local process can receive (N031) the local backend's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator import catalog
from orchestrator.doctor.finding import Finding

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec


def lnc_env(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N006: NEURON_LOGICAL_NC_CONFIG or a compiler -lnc in `environment` that disagrees with
    the job's LNC (runtime and compiler must match)."""
    out = []
    lnc = target.lnc
    runtime_value = spec.environment.get("NEURON_LOGICAL_NC_CONFIG")
    if runtime_value is not None and runtime_value.strip() != str(lnc):
        out.append(Finding(
            "N006-lnc-env-mismatch", "error",
            f"environment sets NEURON_LOGICAL_NC_CONFIG={runtime_value} but the job's LNC is {lnc}; "
            "the runtime and the compiler's -lnc must match",
            "remove NEURON_LOGICAL_NC_CONFIG from environment and set instance.lnc (the orchestrator "
            "sets both the runtime variable and the compiler flag from it)",
            "environment.NEURON_LOGICAL_NC_CONFIG"))
    found = catalog.LNC_FLAG.search(spec.environment.get("NEURON_CC_FLAGS", ""))
    if found and found.group(1) != str(lnc):
        out.append(Finding(
            "N006-lnc-env-mismatch", "error",
            f"NEURON_CC_FLAGS compiles for LNC={found.group(1)} but the job's LNC is {lnc}; "
            "the runtime and the compiler must match",
            "remove the -lnc flag from NEURON_CC_FLAGS and set instance.lnc", "environment.NEURON_CC_FLAGS"))
    return out




# A name part that says the value is a credential (MY_API_TOKEN, DB_PASSWORD, HF_KEY...).
_SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|KEY|APIKEY|CREDENTIALS?)S?(_|$)|SECRET|PASSWORD|TOKEN",
                          re.IGNORECASE)


def secret_env(spec: JobSpec) -> list[Finding]:
    """N076 (warning): an `environment:` name that looks like a secret. The value travels in
    the request: SageMaker returns a job's Environment to anyone allowed DescribeTrainingJob
    (botocore's DescribeTrainingJobResponse has the member `Environment`), and the
    orchestrator keeps the request in the ledger and the job's files (the home is private,
    0700, but a copy is a copy)."""
    out = []
    for name in sorted(spec.environment):
        if _SECRET_NAME.search(name):
            out.append(Finding(
                "N076-secret-in-environment", "warning",
                f"environment.{name} looks like a secret: its value is sent in the job's request, shown by "
                "DescribeTrainingJob (and the console) to anyone who may describe the job, and kept in this "
                "machine's ledger and job files",
                "keep the secret in AWS Secrets Manager and have the training code read it at run time "
                "(GetSecretValue, with secretsmanager:GetSecretValue on the job's role); pass only its name or "
                "ARN in environment", f"environment.{name}"))
    return out
