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
- A run's jobs are listed by ListJobs in each queue its requests name (`listing_places`, kept in
  the stack's outputs), with a JOB_NAME filter of the run's prefix and a trailing `*`, every
  page; a failed job's reason is in its summary (no call per job).
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.scheduled import Names, ScheduledJobs, Seen, arn, sdk_errors

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

    def listing_places(self, requests: list[dict]) -> list[str]:
        """The queues the requests submit to: a run's jobs are listed queue by queue."""
        return sorted({request["jobQueue"] for request in requests})

    def listed(self, client, prefix: str, since, places: list[str]) -> list[Seen]:
        """The jobs of each queue in `places` whose name starts with `prefix`, created after
        `since`: ListJobs with the JOB_NAME filter ("If the value ends with an asterisk (*), the
        filter matches any job name that begins with the string before the '*'." and "When the
        filter is used, jobStatus is ignored": AWS Batch API Reference, ListJobs, filters; the
        jobStatus member: "If the filters parameter is specified, the jobStatus parameter is
        ignored and jobs with any status are returned"), every page. The match is
        case-insensitive: the prefix is checked again as written. A failed job's reason is its
        summary's statusReason and container reason and exit code (JobSummary,
        ContainerSummary), joined as `backends.batch` joins DescribeJobs' for the runner."""
        from orchestrator import aws

        batch = client("batch")
        after_ms = since.timestamp() * 1000
        found = []
        for queue in places:
            pages = batch.get_paginator("list_jobs").paginate(
                jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [f"{prefix}*"]}])
            for page in aws.bounded_pages(pages, f"ListJobs ({queue})"):
                for summary in page.get("jobSummaryList", []):
                    name, created = summary["jobName"], summary.get("createdAt") or 0
                    if not name.startswith(prefix) or created < after_ms:
                        continue
                    found.append(Seen(name, summary["status"], created / 1000,
                                      _reason(summary) if summary["status"] == self.failed else None))
        return found


def _reason(summary: dict) -> str:
    """A failed JobSummary's reason, as the runner words DescribeJobs' (`failure_text`)."""
    from orchestrator.backends.batch.backend import failure_text

    return failure_text(summary.get("statusReason"), summary.get("container") or {})
