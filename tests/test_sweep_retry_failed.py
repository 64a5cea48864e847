"""`sweep resume --retry-failed` (issue 33, item 7): trials that failed for a reason outside
the job (a bucket that was gone, capacity after the retries, a lost job) run again as -rN,
within the budget; a job's own error does not."""

from __future__ import annotations

import pytest
from sweep_fakes import rig  # noqa: F401 - the fixture

from orchestrator.sweep.failures import outside_the_job

TWO = """\
sweep: again
base: base.yaml
grid:
  training.batch_size: [16, 32, 64]
concurrency: 3
max_retries: 0
"""


@pytest.mark.parametrize("detail, outside", [
    ("[user] HeadObject: the bucket does not exist in us-east-1: NoSuchBucket", True),
    ("[lost] no SageMaker training job named x", True),
    ("CapacityError: Unable to provision requested ML compute capacity", True),
    ("ClientError: An error occurred (NoSuchBucket) when calling the PutObject operation", True),
    ("RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos; No space left on device", True),
    ("AlgorithmError: ExecuteUserScriptError: loss is nan", False),
    ("[stopped] by sweep stop while in flight", False),
])
def test_what_counts_as_outside_the_job(detail, outside):
    assert outside_the_job(detail) is outside


def test_retry_failed_reruns_the_environments_failures_and_not_the_jobs_own(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(TWO)
    runner.step()
    names = sorted(cloud.jobs)
    assert len(names) == 3
    store, own, fine = names
    cloud.finish(store, "failed", "ClientError: An error occurred (NoSuchBucket) when calling the PutObject operation")
    cloud.finish(own, "failed", "AlgorithmError: ExecuteUserScriptError: loss is nan")
    cloud.finish(fine)
    assert runner.run(max_steps=3).done and not runner.has_work()  # max_retries 0: nothing retried by itself
    again = runner.rerun_failed()
    assert again == [store + "-r1"]
    assert any("--retry-failed" in line for line in runner.step().new_events)
    assert store + "-r1" in cloud.jobs and own + "-r1" not in cloud.jobs
    cloud.finish(store + "-r1")
    final = runner.run(max_steps=3)
    assert final.counts == {"completed": 2, "failed": 1}
    assert runner.rerun_failed() == []  # the job's own error is never rerun


def test_retry_failed_stays_within_the_budget(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(TWO + "budget: {max_total_cost_usd: 0.0001}\n")
    runner.step()
    for name in list(cloud.jobs):
        cloud.finish(name, "failed", "[lost] gone")
    runner.run(max_steps=2)
    assert runner.rerun_failed() == []
