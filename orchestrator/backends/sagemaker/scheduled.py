"""SageMaker's part of a cloud schedule (`backends.scheduled`): CreateTrainingJob and a
DescribeTrainingJob / Wait loop through the AWS SDK integration, its statuses, its retryable
errors, its grants and its source upload.

Contract:
- The create sends the rendered request's members as they are (SageMaker's API is PascalCase);
  it is retried on throttling and on ResourceLimitExceeded (a quota) with the runner's backoff;
  a create still refused ends its trial (NotCreated).
- Completed and Stopped end a trial; Failed is read from FailureReason.
- The role may create, describe and tag training jobs named `<sweep job prefix>*` only (SageMaker
  writes names in ARNs in lower case), and pass only the requests' execution roles, to
  SageMaker only.
"""

from __future__ import annotations

from orchestrator.backends.scheduled import Names, ScheduledJobs, arn, sdk_errors


class SageMakerJobs(ScheduledJobs):
    backend = "sagemaker"
    done = ("Completed", "Stopped")
    failed = "Failed"
    reason_paths = ("$.described.raw.FailureReason",)
    literal_members = ("RoleArn",)
    # SageMaker's modelled quota error, and its throttle (SageMaker API reference, Common Errors).
    create_retry = tuple(sdk_errors("SageMaker", ("ResourceLimitExceededException", "ThrottlingException")))
    poll_retry = tuple(sdk_errors("SageMaker", ("ThrottlingException",)))

    def states(self, group: str, request: dict, names: Names) -> dict[str, dict]:
        create, describe = names.create(group), names.describe(group)
        return {
            create: {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:sagemaker:createTrainingJob",
                     "Parameters": self.create_parameters(request),
                     "ResultPath": None, **self.create_guard(), "Next": describe},
            describe: {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob",
                       "Parameters": {"TrainingJobName.$": "$.rendered.request.TrainingJobName"},
                       "ResultSelector": {"job.$": "$.TrainingJobName", "status.$": "$.TrainingJobStatus",
                                          "raw.$": "$"},
                       "ResultPath": "$.described", **self.describe_guard(), "Next": f"{group} Check"},
            f"{group} Check": self.check(group, names),
        }

    def statements(self, requests: list[dict], job_prefix: str) -> list[dict]:
        roles = sorted({r["RoleArn"] for r in requests})
        return [
            {"Sid": "TrainingJobs", "Effect": "Allow",
             "Action": ["sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:AddTags"],
             "Resource": arn("sagemaker", f"training-job/{job_prefix.lower()}*")},
            {"Sid": "PassExecutionRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": roles,
             "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}},
        ]

    def upload(self, prepared, region: str, clients: dict) -> bool:
        from orchestrator.backends.sagemaker import SageMakerBackend

        return self._connected(SageMakerBackend, region, clients).upload_source(prepared)
