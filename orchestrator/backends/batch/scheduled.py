"""AWS Batch's part of a cloud schedule (`backends.scheduled`): SubmitJob and a DescribeJobs /
Wait loop through the AWS SDK integration, its statuses, its retryable errors, its grants and
its source upload.

Contract:
- The request travels with its members in PascalCase, as Step Functions' AWS SDK integrations
  take them even for a camelCase API ("Parameters in Step Functions are expressed in
  PascalCase, even if the native service API is in camelCase": developer guide, "Learning to
  use AWS service SDK integrations in Step Functions"); map keys (tags, environment names) are
  data and stay as they are (`sfn_cased`).
- The submit is retried on Batch's throttle (TooManyRequestsException, HTTP 429) only: SubmitJob
  is not idempotent (Batch accepts two jobs of one name), so a server error is not retried.
- SUCCEEDED ends a trial; FAILED is read from statusReason and the container's reason.
- Batch jobs are idempotent by name only in this module's contract, not in AWS's: a second run
  for the same minute submits them again.
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.scheduled import Names, ScheduledJobs, arn, sdk_errors

# Batch's throttle: "TooManyRequestsException" with HTTP 429 (assumed from the AWS Batch
# API reference's common errors: botocore's batch model names only ClientException and
# ServerException).
THROTTLE = ("TooManyRequestsException",)


def sfn_cased(value: Any, shape) -> Any:
    """`value`, a request of a botocore input `shape`, with every structure member's name in
    PascalCase (see the module docstring)."""
    kind = getattr(shape, "type_name", None)
    if kind == "structure" and isinstance(value, dict):
        return {key[:1].upper() + key[1:]: sfn_cased(item, shape.members[key]) for key, item in value.items()}
    if kind == "list" and isinstance(value, list):
        return [sfn_cased(item, shape.member) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {key: sfn_cased(item, shape.value) for key, item in value.items()}
    return value


def _submit_shape():
    import botocore.session

    return botocore.session.get_session().get_service_model("batch").operation_model("SubmitJob").input_shape


def batch_arn(kind: str, name: str) -> dict | str:
    """The ARN of a job queue or job definition a request names (a name, name:revision or ARN)."""
    return name if name.startswith("arn:") else arn("batch", f"{kind}/{name}")


class BatchJobs(ScheduledJobs):
    backend = "batch"
    done = ("SUCCEEDED",)
    failed = "FAILED"
    # What `backends.batch` joins for `sweep.failures.failure_kind`, PascalCase as the
    # integration returns them.
    reason_paths = ("$.described.raw.StatusReason", "$.described.raw.Container.Reason")
    create_retry = tuple(sdk_errors("Batch", THROTTLE))
    poll_retry = tuple(sdk_errors("Batch", THROTTLE))

    def request_for_sfn(self, request: dict) -> dict:
        return sfn_cased(request, _submit_shape())

    def states(self, group: str, request: dict, names: Names) -> dict[str, dict]:
        create, describe = names.create(group), names.describe(group)
        return {
            create: {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:batch:submitJob",
                     "Parameters": self.create_parameters(request),
                     "ResultSelector": {"id.$": "$.JobId"}, "ResultPath": "$.submitted",
                     **self.create_guard(), "Next": describe},
            # The one job described, read in a Pass of its own: ArrayGetItem yields the item
            # itself (moto's interpreter reads a path like $.Jobs[0].Status as a list).
            describe: {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:batch:describeJobs",
                       "Parameters": {"Jobs.$": "States.Array($.submitted.id)"},
                       "ResultSelector": {"raw.$": "States.ArrayGetItem($.Jobs, 0)"},
                       "ResultPath": "$.described", **self.describe_guard(), "Next": f"{group} Read"},
            f"{group} Read": {"Type": "Pass", "Parameters": {
                "job.$": "$.described.raw.JobName", "status.$": "$.described.raw.Status", "raw.$": "$.described.raw"},
                "ResultPath": "$.described", "Next": f"{group} Check"},
            f"{group} Check": self.check(group, names),
        }

    def statements(self, requests: list[dict], job_prefix: str) -> list[dict]:
        """SubmitJob's resource types are job, job-definition and job-queue; a submit with tags
        also needs batch:TagResource on the job; DescribeJobs has no resource-level permission
        (Service Authorization Reference, "Actions defined by AWS Batch"). A definition named
        without a revision runs its latest active one: both the name and name:* are granted."""
        queues, definitions = set(), set()
        for request in requests:
            queues.add(request["jobQueue"])
            name = request["jobDefinition"]
            definitions.update({name, f"{name}:*"} if ":" not in name.rsplit("/", 1)[-1] else {name})
        return [
            {"Sid": "SubmitBatchJobs", "Effect": "Allow", "Action": "batch:SubmitJob",
             "Resource": [arn("batch", "job/*"), *(batch_arn("job-queue", q) for q in sorted(queues)),
                          *(batch_arn("job-definition", d) for d in sorted(definitions))]},
            {"Sid": "TagBatchJobs", "Effect": "Allow", "Action": "batch:TagResource", "Resource": arn("batch", "job/*")},
            {"Sid": "DescribeBatchJobs", "Effect": "Allow", "Action": "batch:DescribeJobs", "Resource": "*"},
        ]

    def upload(self, prepared, region: str, clients: dict) -> bool:
        from orchestrator.backends.batch import BatchBackend

        return self._connected(BatchBackend, region, clients).upload_source(prepared)
