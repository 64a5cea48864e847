"""The sagemaker backend: Trainium training jobs through Amazon SageMaker (`backend`), the
CreateTrainingJob request (`request`) and the rules only its jobs need (`rules`)."""

from orchestrator.backends.sagemaker.backend import SageMakerBackend

__all__ = ["SageMakerBackend"]
