"""Rank 0's TensorBoard scalars: loss, step time, samples/s and learning rate per logged step.

Contract:
- `Scalars.open(logdir, log)` writes TensorBoard event files into `logdir`, the folder the
  request's `TensorBoardOutputConfig.LocalPath` names (`contract.TENSORBOARD_DIR` under the
  /opt/ml root, SageMaker's default `/opt/ml/output/tensorboard`): SageMaker uploads what
  appears there to `TensorBoardOutputConfig.S3OutputPath` while the job runs; the local
  backend copies it to the same place in its store when the job ends.
- The writer is PyTorch's `torch.utils.tensorboard.SummaryWriter`, which needs the
  `tensorboard` package. Where it is missing (or the folder cannot be written) the job trains
  on: `Scalars.warning` says why (the launcher puts it in results.json's warnings) and every
  call does nothing. Nothing here may fail a job.
- `add(step, loss=..., step_time_s=..., samples_per_s=..., lr=...)` writes one point of each
  scalar, under the tags `SCALARS` names; `close()` flushes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# Metric name -> TensorBoard tag.
SCALARS = {"loss": "train/loss", "step_time_s": "train/step_time_s", "samples_per_s": "train/samples_per_s",
           "lr": "train/learning_rate"}


class Scalars:
    """TensorBoard scalars of one rank (see the module docstring)."""

    def __init__(self, writer, warning: str | None = None) -> None:
        self.writer = writer
        self.warning = warning

    @classmethod
    def open(cls, logdir: Path, log: Callable[[str], None]) -> Scalars:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            return cls._off(f"TensorBoard scalars not written: {exc} (install the tensorboard package)", log)
        try:
            logdir.mkdir(parents=True, exist_ok=True)
            return cls(SummaryWriter(log_dir=str(logdir), flush_secs=30))
        except Exception as exc:  # noqa: BLE001 - scalars are never worth a job
            return cls._off(f"TensorBoard scalars not written: {type(exc).__name__}: {exc}", log)

    @classmethod
    def _off(cls, warning: str, log: Callable[[str], None]) -> Scalars:
        log(f"WARNING {warning}")
        return cls(None, warning)

    def add(self, step: int, **values: float | None) -> None:
        if self.writer is None:
            return
        try:
            for name, value in values.items():
                if value is not None:
                    self.writer.add_scalar(SCALARS[name], float(value), step)
        except Exception as exc:  # noqa: BLE001 - a full disk stops the scalars, not the job
            self.warning = f"TensorBoard scalars stopped: {type(exc).__name__}: {exc}"
            self.writer = None

    def close(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception as exc:  # noqa: BLE001
                self.warning = f"TensorBoard scalars not flushed: {type(exc).__name__}: {exc}"
