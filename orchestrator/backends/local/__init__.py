"""The local backend: a job on this machine, in SageMaker's container layout (`backend`,
`layout`), run by a supervisor process (`supervisor`); a batch spec's SubmitJob request run as
an ECS task would run it (`batch_task`); simulated capacity (`capacity`)."""

from orchestrator.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
