"""`infra`: deploy and read the AWS set-up (infra/stack.yaml): bucket, execution role,
operator policy."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.cli.options import REGION_OPTION
from orchestrator.cli.output import err, out

app = typer.Typer(name="infra", no_args_is_help=True, help="Deploy and read the AWS set-up: bucket, execution role, "
                  "operator policy and, with EnableBatch=true, the inf2 AWS Batch queues (infra/stack.yaml).")

STACK_OPTION = typer.Option("orchestrator", "--stack-name", help="CloudFormation stack name.")


@app.command("deploy")
def infra_deploy(
    stack_name: str = STACK_OPTION,
    region: str | None = REGION_OPTION,
    kms: bool | None = typer.Option(None, "--kms/--no-kms", help="Encrypt the bucket with a KMS key the stack "
                                    "creates (SSE-KMS) instead of SSE-S3. Unset: keep the deployed choice."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Execute the change set without asking."),
    param: list[str] = typer.Option([], "--param", help="Template parameter NAME=VALUE (repeatable), e.g. "
                                    "CompileCacheNoncurrentDays=14, BucketName=my-bucket."),
) -> None:
    """Create or update the stack through a change set, shown before it runs."""
    from orchestrator import infra
    from orchestrator.errors import InputError

    params = infra.parse_parameters(param, kms=kms)
    cfn = infra.make_client("cloudformation", region)
    plan = infra.plan_change_set(cfn, stack_name, params)
    if plan.nothing_to_do:
        out(f"stack {stack_name}: nothing to do (the deployed stack already matches the template and parameters)")
        return
    out(f"change set {plan.change_set_name} ({plan.kind} stack {stack_name}"
         f"{' in ' + plan.region if plan.region else ''}):")
    for change in plan.changes:
        replace = f"  replacement: {change.replacement}" if change.replacement else ""
        out(f"  {change.action:<8} {change.logical_id:<24} {change.resource_type}{replace}")
    if not plan.changes:
        out("  no resource changes (parameters or outputs only)")
    for key, value in sorted(plan.parameters.items()):
        out(f"  parameter {key}={value}")
    if not yes:
        try:
            go = typer.confirm("Execute this change set?", default=False)
        except typer.Abort:
            # No terminal to answer (CI) or Ctrl-C: leave nothing half-made behind.
            infra.discard(cfn, plan)
            raise InputError("no answer to the confirmation; the change set was deleted, nothing changed",
                             hint="pass --yes to deploy without asking") from None
        if not go:
            infra.discard(cfn, plan)
            out("not executed; the change set was deleted")
            return

    def progress(event) -> None:
        when = event.timestamp.strftime("%H:%M:%S") if event.timestamp else "--:--:--"
        reason = f"  {event.reason}" if event.reason else ""
        out(f"  {when} {event.status:<28} {event.logical_id} ({event.resource_type}){reason}")

    def waiting(status: str, elapsed_s: float) -> None:
        out(f"  ... stack {stack_name} is {status}, {elapsed_s:.0f} s since the change set was executed")

    out(f"executing change set {plan.change_set_name}; waiting for stack {stack_name}")
    try:
        outputs = infra.execute(cfn, plan, on_event=progress, on_wait=waiting)
    except KeyboardInterrupt:
        # Ctrl-C ends the waiting, not the deployment: CloudFormation goes on with the change set.
        err(f"interrupted (Ctrl-C) while waiting for stack {stack_name}; CloudFormation goes on executing change set "
             f"{plan.change_set_name}. `python -m orchestrator infra outputs --stack-name {stack_name}` shows the "
             "outputs once it is done (or says it is not done yet)")
        raise typer.Exit(code=130) from None
    out(f"stack {stack_name}: deployed")
    _print_infra_outputs(outputs)
    out("next: python -m orchestrator infra outputs --write configs/infra.yaml  (then `infra: infra.yaml` in a "
         "job spec)")
    out(f"next: attach the operator policy to whoever submits jobs: aws iam attach-user-policy --user-name YOUR_USER "
         f"--policy-arn {outputs.operator_policy_arn}  (a CI role: aws iam attach-role-policy --role-name ROLE ...)")


def _print_infra_outputs(outputs) -> None:
    rows = [("role_arn", outputs.role_arn), ("bucket", outputs.bucket),
            ("compile_cache_uri", outputs.compile_cache_uri), ("output_uri", outputs.output_uri),
            ("data_uri", outputs.data_uri), ("operator_policy_arn", outputs.operator_policy_arn),
            ("kms_key_arn", outputs.kms_key_arn), ("region", outputs.region)]
    for key, value in rows:
        if value:
            out(f"  {key:<20} {value}")


@app.command("outputs")
def infra_outputs(
    stack_name: str = STACK_OPTION,
    region: str | None = REGION_OPTION,
    write: Path | None = typer.Option(None, "--write", help="Also write them as YAML for a job spec's `infra:` key "
                                      "(a new file, or one an earlier --write made)."),
    force: bool = typer.Option(False, "--force", help="With --write: replace an existing file that is not an "
                               "outputs file."),
) -> None:
    """Print the stack's outputs (role ARN, bucket, suggested URIs)."""
    from orchestrator import infra

    if write is not None:
        infra.check_outputs_target(write, force)  # before any call: a refused target changes nothing
    outputs = infra.read_outputs(infra.make_client("cloudformation", region), stack_name)
    out(f"stack {stack_name}:")
    _print_infra_outputs(outputs)
    if write is not None:
        infra.write_outputs_file(outputs, write)
        out(f"wrote {write}; a job spec takes role_arn and the URIs from it with `infra: <path relative to the spec>`")


@app.command("policy")
def infra_policy(stack_name: str = STACK_OPTION, region: str | None = REGION_OPTION,
                 mlflow: str | None = typer.Option(
                     None, "--mlflow", help="Print instead the execution role's grant to log to this SageMaker "
                     "MLflow App or tracking server ARN (what the stack adds with MlflowResourceArn), for a "
                     "role of your own.")) -> None:
    """Print the operator (laptop/CI) IAM policy JSON, filled in from the deployed stack."""
    from orchestrator import infra
    from orchestrator.errors import InputError

    if mlflow is not None:
        out(json.dumps(infra.mlflow_policy(mlflow), indent=2))
        err("note: attach it to the execution role (a spec's role_arn); the stack's own role gets it with "
            f"`infra deploy --param MlflowResourceArn={mlflow}`")
        return

    infra.check_stack_name(stack_name)  # before the fallback below turns a bad name into placeholders
    cfn = infra.make_client("cloudformation", region)
    try:
        outputs = infra.read_outputs(cfn, stack_name)
    except InputError as exc:
        outputs = None
        err(f"note: {exc.message}; printing the policy with <PLACEHOLDERS> to fill in")
    out(json.dumps(infra.operator_policy(outputs, stack_name=stack_name, region=cfn.meta.region_name), indent=2))
    if outputs is not None:
        err(f"note: the stack already created this policy as {outputs.operator_policy_arn}; attach that to the "
             "user or CI role instead of copying it")
