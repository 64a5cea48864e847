"""What every benchmark that talks to moto sets first: fake credentials and no real profile,
so nothing can reach AWS; each benchmark then points AWS_ENDPOINT_URL at its own moto server
on 127.0.0.1."""

from __future__ import annotations

import os

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
}


def use_fake_credentials() -> None:
    """Put the fake credentials in this process's environment (children inherit them)."""
    os.environ.pop("AWS_PROFILE", None)
    os.environ.update(FAKE_AWS)
