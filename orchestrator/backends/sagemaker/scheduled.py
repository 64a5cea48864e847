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
- A run's jobs are listed by ListTrainingJobs (NameContains the run's prefix, CreationTimeAfter
  the run's start, every page); its summaries carry no FailureReason, so a failed job's reason is
  read by DescribeTrainingJob (`reasons`, for the names the caller picks).
"""

from __future__ import annotations

from orchestrator.backends.scheduled import Names, ScheduledJobs, Seen, arn, sdk_errors

# ListTrainingJobs's largest page ("MaxResults ... Valid Range: Minimum value of 1. Maximum value
# of 100.", SageMaker API Reference, ListTrainingJobs).
PAGE = 100


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

    def listed(self, client, prefix: str, since, places: list[str]) -> list[Seen]:
        """The training jobs whose name starts with `prefix`, created after `since`: ListTrainingJobs
        with NameContains ("A string in the training job name. This filter returns only training
        jobs whose name contains the specified string.") and CreationTimeAfter ("A filter that
        returns only training jobs created after the specified time (timestamp).": SageMaker API
        Reference, ListTrainingJobs), every page. That these filters apply before a page is cut
        (so pages grow with the run's jobs, not the account's) is assumed: the page says so of
        neither, and says the opposite of StatusEquals ("the MaxResults number of training jobs
        are first retrieved ignoring the StatusEquals parameter"). The summaries hold
        TrainingJobStatus and no FailureReason (API Reference, TrainingJobSummary): `reasons`."""
        from orchestrator import aws

        pages = client("sagemaker").get_paginator("list_training_jobs").paginate(
            NameContains=prefix, CreationTimeAfter=since, PaginationConfig={"PageSize": PAGE})
        found = []
        for page in aws.bounded_pages(pages, "ListTrainingJobs"):
            for summary in page.get("TrainingJobSummaries", []):
                name = summary["TrainingJobName"]
                if name.startswith(prefix):  # NameContains matches anywhere in the name
                    created = summary.get("CreationTime")
                    found.append(Seen(name, summary["TrainingJobStatus"],
                                      created.timestamp() if hasattr(created, "timestamp") else 0.0))
        return found

    def reasons(self, client, names: list[str]) -> dict[str, str]:
        """Each failed job's FailureReason (DescribeTrainingJob, one call per name, as many at once
        as the backend's `statuses` makes: `backend.DESCRIBE_THREADS`, an assumed limit; boto3's
        clients are thread-safe; the first error is raised)."""
        from concurrent.futures import ThreadPoolExecutor

        from orchestrator.backends.sagemaker.backend import DESCRIBE_THREADS

        sm = client("sagemaker")

        def reason(name: str) -> str:
            return sm.describe_training_job(TrainingJobName=name).get("FailureReason") or ""

        with ThreadPoolExecutor(max_workers=max(1, min(DESCRIBE_THREADS, len(names)))) as pool:
            return dict(zip(names, pool.map(reason, names), strict=True))
