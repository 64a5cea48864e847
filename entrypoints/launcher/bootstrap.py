"""The AWS Batch bootstrap: what SageMaker does before the container starts, done by the job's
command, so that the same `launch.py` runs on Batch as on SageMaker.

On SageMaker the platform writes /opt/ml/input/config/*.json and downloads the `code` channel
(the source archive) before the container starts. A Batch job gets none of that: its command
(SubmitJob's containerOverrides.command, `command()`) does it, in a shell line:

1. Lay out the /opt/ml tree (SAGEMAKER_BASE_DIR moves it, as for the training toolkit):
   input/config, input/data/code, model, output/data, checkpoints, code.
2. Write resourceconfig.json (one host, algo-1), hyperparameters.json and inputdataconfig.json
   from the variables the request sets (`CONFIG_VARS`): the training toolkit in the image reads
   these files to compute the SM_* variables, as on SageMaker; the request also sets the SM_*
   variables themselves (`contract.sm_environment`), which win.
3. Fetch the source archive named by `CODE_URI_ENV` (s3:// with boto3, which the image has; or
   file://, for the local backend's emulation) to input/data/code/sourcedir.tar.gz.
4. Unpack it into code/ and `exec python3 code/launch.py --container`, which from then on is
   the job's first process: the cache pull and push, torchrun, results.json and the failure
   reason run as on SageMaker, and the job exits with launch.py's code.

Why `exec` twice. The PyTorch Neuron training image's ENTRYPOINT is `bash -m
start_with_right_hostname.sh`, which Batch keeps (a Batch job definition cannot replace the
entrypoint; ContainerProperties has no entryPoint), and for anything but `train` that script
runs `eval "$@"` (aws-neuron/deep-learning-containers common/start_with_right_hostname.sh). So
the command's words are joined by spaces and parsed once more by that bash: the script is
passed shell-quoted, and the command begins with `exec`, so that the eval replaces the image's
bash (which ignores SIGTERM as PID 1) with ours, which then becomes launch.py. Batch's
TerminateJob and the attempt timeout stop the container with SIGTERM, then SIGKILL after the
ECS stop timeout (30 s by default): launch.py receives the SIGTERM, and learns the 30 s from
the request's environment (`environment()` sets torchrun.STOP_GRACE_ENV).

Stdlib only; nothing here imports `orchestrator`. The orchestrator builds the request from
`command()` and `environment()`; the local backend runs the same command.
"""

from __future__ import annotations

import json
import shlex

from entrypoints.shared import contract

# Variables the command reads (set in SubmitJob's containerOverrides.environment).
CODE_URI_ENV = "ORCHESTRATOR_CODE_URI"
# ECS stops a task (TerminateJob, an attempt's timeout) with SIGTERM, then SIGKILL 30 s later
# unless the agent's ECS_CONTAINER_STOP_TIMEOUT says otherwise; a Batch job definition cannot
# change it (Amazon ECS API Reference, StopTask; ContainerDefinition stopTimeout).
ECS_STOP_TIMEOUT_S = 30.0
HYPERPARAMETERS_ENV = "ORCHESTRATOR_HYPERPARAMETERS"
INPUT_DATA_CONFIG_ENV = "ORCHESTRATOR_INPUT_DATA_CONFIG"
CONFIG_VARS = (CODE_URI_ENV, HYPERPARAMETERS_ENV, INPUT_DATA_CONFIG_ENV, "SM_RESOURCE_CONFIG")
HOST = "algo-1"

# Fetches argv[1] to argv[2]: file:///PATH (no host) is copied; s3://BUCKET/KEY is downloaded
# with boto3's client for the URI's scheme, "s3", in the region argv[3] names (the job's: see
# `REGION_ARG`; botocore reads AWS_DEFAULT_REGION only), honouring AWS_ENDPOINT_URL and taking
# the job role's credentials from the ECS task metadata endpoint. No quote characters: the
# script is quoted twice over (see `command`).
_FETCH = ("import shutil,sys,urllib.parse as p\n"
          "u,d,r=p.urlparse(sys.argv[1]),sys.argv[2],sys.argv[3]\n"
          "if not u.netloc:\n"
          " shutil.copyfile(u.path,d)\n"
          "else:\n"
          " import boto3\n"
          " boto3.client(u.scheme,region_name=r or None).download_file(u.netloc,u.path[1:],d)\n")
# The job's region as every S3 client in the container takes it (storage.s3_store.job_region).
REGION_ARG = '"${AWS_REGION:-${AWS_DEFAULT_REGION:-}}"'


def script() -> str:
    """The bootstrap as one bash script (steps 1 to 4 of the module docstring)."""
    base = f'"${{{contract.BASE_DIR_ENV}:-{contract.OPT_ML}}}"'
    config = f'"$b/{contract.RESOURCE_CONFIG.rsplit("/", 1)[0]}"'
    archive = f'"$b/{contract.INPUT_DATA}/{contract.CODE_CHANNEL}/{contract.SOURCE_ARCHIVE}"'
    dirs = " ".join(f'"$b/{d}"' for d in (contract.RESOURCE_CONFIG.rsplit("/", 1)[0],
                                          f"{contract.INPUT_DATA}/{contract.CODE_CHANNEL}", contract.MODEL_DIR,
                                          contract.OUTPUT_DATA_DIR, contract.CHECKPOINT_DIR, contract.CODE_DIR))
    return (f"set -eu; b={base}; mkdir -p {dirs}; "
            f'printf %s "$SM_RESOURCE_CONFIG" > {config}/resourceconfig.json; '
            f'printf %s "${HYPERPARAMETERS_ENV}" > {config}/hyperparameters.json; '
            f'printf %s "${INPUT_DATA_CONFIG_ENV}" > {config}/inputdataconfig.json; '
            f'python3 -c {shlex.quote(_FETCH)} "${CODE_URI_ENV}" {archive} {REGION_ARG}; '
            f'tar -xzf {archive} -C "$b/{contract.CODE_DIR}"; '
            f'exec python3 "$b/{contract.CODE_DIR}/{contract.PROGRAM}" --container')


def command() -> list[str]:
    """SubmitJob's containerOverrides.command: `exec /bin/bash -c '<script>'`, words that the
    image's `eval "$@"` turns back into the same three arguments (see the module docstring)."""
    return ["exec", "/bin/bash", "-c", shlex.quote(script())]


def environment(*, instance_type: str, neuron_cores: int, vcpus: int, hyperparameters: dict[str, str],
                code_uri: str, region: str) -> dict[str, str]:
    """The variables the command and launch.py read: the SM_* variables of one host under
    /opt/ml (`contract.sm_environment`), the hyperparameters as SageMaker writes them, where
    the source archive is, and the rendezvous address (loopback: one instance)."""
    from pathlib import PurePosixPath

    hps = {key: json.loads(value) for key, value in hyperparameters.items() if not key.startswith("sagemaker_")}
    env = contract.sm_environment(PurePosixPath(contract.OPT_ML), [HOST], HOST, instance_type, hps,
                                  [contract.CODE_CHANNEL], num_neurons=neuron_cores, num_cpus=vcpus)
    # The network interface of an ECS task in the default bridge mode (the toolkit reads it).
    resource = {"current_host": HOST, "hosts": [HOST], "network_interface_name": "eth0",
                "current_instance_type": instance_type}
    env["SM_RESOURCE_CONFIG"] = json.dumps(resource)
    env["SM_NETWORK_INTERFACE_NAME"] = "eth0"
    # One instance: torchrun's rendezvous on loopback. The SageMaker host name algo-1 resolves
    # on SageMaker's network only; in an ECS task it resolves nowhere and torchrun would hang.
    env[contract.MASTER_ADDR_ENV] = "127.0.0.1"
    env[HYPERPARAMETERS_ENV] = json.dumps(dict(sorted(hyperparameters.items())))
    env[INPUT_DATA_CONFIG_ENV] = json.dumps({contract.CODE_CHANNEL: {
        "TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}})
    env[CODE_URI_ENV] = code_uri
    # The job's region, as SageMaker sets it in its containers: the S3 clients take it.
    env["AWS_REGION"] = region
    # The platform's stop timeout, told to launch.py by the request itself (it would assume
    # SageMaker's 120 s): ECS sends SIGKILL ECS_STOP_TIMEOUT_S after its SIGTERM.
    from entrypoints.launcher.torchrun import STOP_GRACE_ENV

    env[STOP_GRACE_ENV] = f"{ECS_STOP_TIMEOUT_S:g}"
    return env
