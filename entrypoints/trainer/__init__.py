"""The per-rank trainer: what torchrun starts on every core (`python -m entrypoints.trainer.train`).

The training loop, the model, the data, the XLA or native runtime, rank 0's TensorBoard
scalars, the FLOP count, and `smoke` (the recompilation check `orchestrator smoke` runs). It
reads the job file and writes its rank's stats file (`entrypoints.shared.contract`); it never
imports `entrypoints.launcher`. docs/ARCHITECTURE.md.
"""
