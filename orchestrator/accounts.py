"""Which AWS account a command's credentials belong to, asked once per command.

A job name is unique per account and region, and a job in one account is invisible to
credentials of another: SageMaker answers "not found", exactly as for a job that is gone.
The ledger records the account a job was created in (`Ledger.set_account`), so a command
under other credentials can say which account holds the job instead of reading it as lost
and creating it again (`OtherAccount`, exit 2).

The account comes from STS GetCallerIdentity, which needs no permission: "No permissions are
required to perform this operation. If an administrator attaches a policy to your identity
that explicitly denies access to the sts:GetCallerIdentity action, you can still perform this
operation." (STS API Reference, GetCallerIdentity). The answer is kept for the process, by
access key, so a command asks once however many jobs it touches.
"""

from __future__ import annotations

from orchestrator.errors import InputError

_KNOWN: dict[str, str] = {}  # access key id -> account


def caller(region: str | None) -> str | None:
    """The account of the credentials botocore finds now; None when they or STS cannot say
    (no credentials, the network): the caller then neither records nor compares."""
    from botocore.exceptions import BotoCoreError, ClientError

    from orchestrator import aws

    try:
        session = aws.aws_session(region)
        credentials = session.get_credentials()
        if credentials is None:
            return None
        access_key = credentials.get_frozen_credentials().access_key
        if access_key not in _KNOWN:
            sts = aws.client("sts", session.region_name or region or "us-east-1", session=session)
            _KNOWN[access_key] = str(sts.get_caller_identity()["Account"])
        return _KNOWN[access_key]
    except (BotoCoreError, ClientError, InputError, KeyError):
        return None


def forget() -> None:
    """Forget what was asked (tests that change credentials within one process)."""
    _KNOWN.clear()


class OtherAccount(InputError):
    """The ledger's job was created in another AWS account than the one of the credentials
    in use: it is not lost, and is neither marked so nor created again (exit 2)."""

    def __init__(self, job_name: str, recorded: str, current: str, region: str):
        super().__init__(
            f"{job_name} was created in AWS account {recorded} ({region}); the credentials in use are account "
            f"{current}, which cannot see it: it is not lost, and is neither marked failed nor submitted again",
            hint=f"run this command with credentials of account {recorded} (AWS_PROFILE, or the environment's "
                 "AWS_ACCESS_KEY_ID...); `aws sts get-caller-identity` shows the account in use")
        self.job_name = job_name
        self.recorded = recorded
        self.current = current
