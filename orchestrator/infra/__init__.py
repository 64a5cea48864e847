"""The AWS set-up as code: deploy `infra/stack.yaml`, read its outputs, print the operator policy.

Contract:
- `check_stack_name(name)` applies CloudFormation's rule for stack names (a letter, then
  letters, digits and hyphens, at most 128 characters) and raises InputError naming
  `--stack-name`; `plan_change_set`, `read_outputs`, `stack_status` and `operator_policy` call it
  before any AWS call, so an empty name never reaches DescribeStacks (which would list
  every stack).
- `parse_parameters(pairs, kms)` checks `--param K=V` flags against the template's
  Parameters (name, AllowedValues, AllowedPattern, Number bounds, and whole numbers for a
  Number the template passes to an integer property such as a lifecycle rule's `...Days`)
  and raises InputError (exit 2) naming the flag.
- `plan_change_set(cfn, stack, params)` creates a change set (CREATE for a new stack, UPDATE for an
  existing one), waits until CloudFormation has computed it and returns a `ChangeSetPlan`
  with its changes, so the caller can show them before anything happens. When CloudFormation
  finds nothing to change ("No updates are to be performed", or a change set that "didn't
  contain changes"), the change set is deleted and the plan comes back with `nothing_to_do`.
  `execute(cfn, plan, on_event=..., on_wait=...)` runs it, reports each new stack event (and,
  while none comes, the stack's status every `heartbeat_s`), and returns the stack's
  outputs; a rollback or failure raises BackendError naming each failed resource with its
  ResourceStatusReason. It follows the stack by the StackId of the change set, never by
  name. When ExecuteChangeSet fails for a CREATE change set, the change set and the empty
  REVIEW_IN_PROGRESS stack are deleted, so the next deploy starts clean; a stack still in
  REVIEW_IN_PROGRESS `review_timeout_s` after the execute (the change set did not run) is
  a BackendError saying how to clean up. `discard(cfn, plan)` drops a change set the user
  declined.
- `read_outputs(cfn, stack)` maps the stack's outputs onto `StackOutputs`;
  `write_outputs_file(outputs, path)` writes the file a job spec's `infra:` key reads (keys as
  in `orchestrator.spec.INFRA_FIELDS`, plus region, bucket and stack_name), atomically.
- `operator_policy(outputs)` is the operator's managed policy document, taken from the
  template (one source of truth) with the stack's values filled in, or with <PLACEHOLDERS>
  when `outputs` is None.

CloudFormation `ValidationError`s (template or parameter problems) become InputError; every
other ClientError or botocore failure becomes BackendError with a hint. The cloudformation
client is always passed in.

Modules: `template` (the template and the deploy's parameters), `deploy` (change sets and
following the stack), `outputs` (the stack's outputs and the `infra:` file), `policy` (the
operator policy), `cloudformation` (the client and CloudFormation's errors).
"""

from __future__ import annotations

from orchestrator.infra.cloudformation import make_client
from orchestrator.infra.deploy import (
    CAPABILITIES,
    FAILURE_STATES,
    SUCCESS_STATES,
    UPDATABLE_STATES,
    Change,
    ChangeSetPlan,
    StackEvent,
    discard,
    execute,
    plan_change_set,
    stack_status,
)
from orchestrator.infra.outputs import (
    OUTPUT_KEYS,
    REQUIRED_OUTPUTS,
    StackOutputs,
    check_outputs_target,
    read_outputs,
    write_outputs_file,
)
from orchestrator.infra.policy import OPERATOR_POLICY_RESOURCE, evaluate, operator_policy
from orchestrator.infra.template import (
    DEFAULT_STACK,
    KMS_PARAMETER,
    STACK_NAME_MAX,
    TEMPLATE,
    check_stack_name,
    integer_parameters,
    load_template,
    parse_parameters,
    template_body,
)

__all__ = [
    "CAPABILITIES", "DEFAULT_STACK", "FAILURE_STATES", "KMS_PARAMETER", "OPERATOR_POLICY_RESOURCE", "OUTPUT_KEYS",
    "REQUIRED_OUTPUTS", "STACK_NAME_MAX", "SUCCESS_STATES", "TEMPLATE", "UPDATABLE_STATES", "Change", "ChangeSetPlan",
    "StackEvent", "StackOutputs", "check_outputs_target", "check_stack_name", "discard", "evaluate", "execute",
    "integer_parameters", "load_template", "make_client", "operator_policy", "parse_parameters", "plan_change_set",
    "read_outputs", "stack_status", "template_body", "write_outputs_file",
]
