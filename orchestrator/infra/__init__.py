"""The AWS set-up as code: deploy `infra/stack.yaml`, read its outputs, print the operator policy.

Modules: `template` (the template and the deploy's parameters, `parse_parameters`), `deploy`
(`plan_change_set`, `execute`, `discard`: change sets and following the stack by its StackId),
`outputs` (`read_outputs`, `write_outputs_file`: the stack's outputs and the `infra:` file),
`policy` (`operator_policy`, from the template), `cloudformation` (the client and
CloudFormation's errors: a ValidationError is an InputError, the rest a BackendError with a
hint). Every call checks the stack name first (`check_stack_name`). The contract of each is
its function's docstring; docs/USAGE.md says how to deploy.
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
from orchestrator.infra.policy import OPERATOR_POLICY_RESOURCE, evaluate, mlflow_policy, operator_policy
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
    "integer_parameters", "load_template", "make_client", "mlflow_policy", "operator_policy", "parse_parameters", "plan_change_set",
    "read_outputs", "stack_status", "template_body", "write_outputs_file",
]
