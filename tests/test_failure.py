"""entrypoints.launcher.failure: the reason a job failed, and the failure file SageMaker shows."""

from __future__ import annotations

from entrypoints.launcher import failure
from entrypoints.shared import contract

TORCHRUN_REPORT = """\
E1129 22:21:34.382000 16272 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 1
Traceback (most recent call last):
  File "torch/distributed/run.py", line 940, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
entrypoints.trainer.train FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_22:21:34
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 16439)
============================================================""".splitlines()


def test_failure_reason_prefers_the_first_failing_rank():
    stats = {0: {"rank": 0}, 3: {"error": "ValueError: bad"}, 2: {"error": "RuntimeError: first"}}
    assert failure.failure_reason(stats, [], 1, None) == "rank 2: RuntimeError: first (and 1 more ranks)"
    assert failure.failure_reason({}, [], 1, 15) == "stopped: the launcher received SIGTERM"


def test_failure_reason_from_output_skips_torchruns_own_report():
    worker = ["step 3 loss=1.0", "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "noise after"]
    assert failure.failure_reason({}, worker + TORCHRUN_REPORT, 1, None) == (
        "rank 3 (torchrun exited with code 1): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert failure.failure_reason({}, ["just output"], -9, None) == "torchrun exited with code -9"
    assert failure.failure_reason({}, ["RuntimeError: rendezvous timed out"], 1, None) == (
        "torchrun exited with code 1: RuntimeError: rendezvous timed out")


def test_failure_file_is_capped_at_sagemakers_limit(tmp_path):
    ctr = contract.Contract.from_env(contract.sm_environment(tmp_path, ["algo-1"], "algo-1", "", {}, []))
    failure.write_failure(ctr, "x" * 5000)
    text = ctr.failure_file.read_text()
    assert len(text) == failure.MAX_REASON and text.endswith("...")
