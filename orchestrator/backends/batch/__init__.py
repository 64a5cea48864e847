"""The batch backend: Inferentia2 jobs through AWS Batch (`backend`), the SubmitJob request
(`request`) and the doctor's rules N040-N049 (`rules`)."""

from orchestrator.backends.batch.backend import BatchBackend

__all__ = ["BatchBackend"]
