"""What the cloud backends (SageMaker and AWS Batch) share, done once: their boto3 clients, the
ledger, the error translation around each call, the head of the intent-first submit, the
content-addressed upload of the source archive, and reading the job's results.json.

Contract for a subclass: it names its service (`service`, the boto3 client name, also the
constructor's first argument) and where its jobs live (`service_title`), and implements the
protocol's job methods plus the hook `_results_uri(job_name)` (where the job writes
results.json; raise anything when it cannot be known). Errors raised inside `with self._aws(...)`
become our errors (`cloud_errors.translate`, which covers any AWS service's codes).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, ClassVar

from orchestrator import aws, aws_errors
from orchestrator.backends.cloud_errors import translate
from orchestrator.backends.job import JobProgress, Submitted, UnknownJob, progress_of
from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.ledger import Ledger


def make_clients(service: str, region: str | None, pool: int | None = None, session=None) -> dict:
    """`service`, s3 and logs clients for `region`, keyed "<name>_client" (`aws.client`:
    timeouts, botocore's retries, a checked endpoint; `pool` connections each, for callers that
    run threads). The endpoint follows botocore's own settings (AWS_ENDPOINT_URL in tests).
    `session`, a boto3 Session for `region` (default: a new one), lets a caller that builds
    several backends load each service's model once (a session caches what it loaded)."""
    session = session or aws.aws_session(region)
    if not session.region_name:
        raise InputError("no AWS region given", hint="set region: in the spec, --region, or AWS_DEFAULT_REGION")
    config = aws.client_config(pool=pool)
    return {name + "_client": aws.client(name, session.region_name, config=config, session=session)
            for name in (service, "s3", "logs")}


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key) of s3://bucket/key; InputError for anything else."""
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise InputError(f"not an s3://bucket/key URI: {uri!r}",
                         hint="a cloud backend uploads the source under the spec's output.uri: make that an "
                              "S3 prefix, e.g. `output: {uri: s3://my-bucket/jobs}`")
    bucket, key = uri[5:].split("/", 1)
    return bucket, key


class CloudBackend:
    """The common part of a boto3 backend. See the module docstring for the contract."""

    name: ClassVar[str]
    service: ClassVar[str]
    service_title: ClassVar[str]
    cloud: ClassVar[bool] = True
    shared: ClassVar[bool] = True

    def __init__(self, service_client, s3_client, logs_client, ledger: Ledger | None = None,
                 sleep: Callable[[float], None] = time.sleep, poll_seconds: float = 5.0):
        self.client = service_client
        self.s3 = s3_client
        self.logs_client = logs_client
        self._ledger = ledger
        self.sleep = sleep
        self.poll_seconds = poll_seconds
        self.region = service_client.meta.region_name

    # The spec side (`backends.Backend`): what every cloud backend asks of a spec.
    section: ClassVar[str | None] = None
    preferences: ClassVar[str | None] = None
    local_run: ClassVar[bool] = False

    @classmethod
    def spec_problems(cls, spec) -> list[tuple[str, str]]:
        """The cloud's stores: an s3:// output.uri and compile_cache.uri (mode tarball), no
        file:// data (a cloud job cannot read this machine's files)."""
        from orchestrator.spec.models import NEEDS_CACHE, NEEDS_OUTPUT

        found = []
        if spec.output.uri is None or not spec.output.uri.startswith("s3://"):
            found.append(("output.uri", NEEDS_OUTPUT.replace("sagemaker", cls.name)))
        if spec.compile_cache.mode == "tarball" and (
            spec.compile_cache.uri is None or not spec.compile_cache.uri.startswith("s3://")
        ):
            found.append(("compile_cache.uri", NEEDS_CACHE.replace("sagemaker", cls.name)))
        if spec.data.source.startswith("file://"):
            found.append(("data.source", f"a {cls.name} job cannot read file:// data; use s3://"))
        return found

    @classmethod
    def missing(cls, data) -> list[tuple[tuple[str, ...], str]]:
        """output.uri, and compile_cache.uri for mode tarball (the default), left out of `data`."""
        from collections.abc import Mapping

        from orchestrator.spec.models import NEEDS_CACHE, NEEDS_OUTPUT

        found = []
        output = data.get("output", {})
        if isinstance(output, Mapping) and output.get("uri") is None:
            found.append((("output", "uri"), NEEDS_OUTPUT.replace("sagemaker", cls.name)))
        cache = data.get("compile_cache", {})
        if isinstance(cache, Mapping) and cache.get("mode", "tarball") == "tarball" and cache.get("uri") is None:
            found.append((("compile_cache", "uri"), NEEDS_CACHE.replace("sagemaker", cls.name)))
        return found

    @classmethod
    def infra_fields(cls, fields: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return dict(fields)

    @classmethod
    def locations(cls, spec, job_name: str):
        """Under the spec's own prefixes: output.uri and compile_cache.uri."""
        from orchestrator.locations import Locations

        return Locations.under(spec.output.uri or "", job_name, spec.compile_cache.uri)

    @classmethod
    def job_file(cls, spec, job: dict, where) -> None:
        """Nothing to add: the service uploads what the job writes."""

    def quota_clients(self, attempts: int | None = None):
        """(Service Quotas client, SageMaker client) in this backend's region, for the quota
        check before a submit (`Backend.quota_clients`): Batch's too, whose EC2 needs leave the
        SageMaker client uncalled; only a cloud backend has quotas."""
        from orchestrator import quotas

        return quotas.clients(self.region, attempts=attempts)

    @classmethod
    def create(cls, region: str | None = None, **options):
        return cls.connect(region, **options)

    @classmethod
    def connect(cls, region: str | None = None, *, ledger: Ledger | None = None, pool: int | None = None,
                session=None, **clients):
        """A backend on clients built by `make_clients` (in `session`, when given), except those
        passed in; other keyword arguments go to the constructor (sleep, poll_seconds)."""
        needed = (cls.service + "_client", "s3_client", "logs_client")
        if not all(name in clients for name in needed):
            clients = {**make_clients(cls.service, region, pool, session), **clients}
        return cls(*(clients[name] for name in needed), ledger=ledger,
                   **{k: v for k, v in clients.items() if k not in needed})

    @classmethod
    def holds(cls, job_name: str) -> bool:
        return False  # only the service can tell

    def describe_all(self, containing: str):
        """No bulk read unless the service has one (`Backend.describe_all`)."""
        return None

    @property
    def place(self) -> str:
        return f"{self.service_title} in {self.region}"

    @property
    def label(self) -> str:
        return f"{self.name} in {self.region}"

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            from orchestrator.ledger import Ledger  # here: asking the class about a spec opens no ledger

            self._ledger = Ledger()
        return self._ledger

    @contextmanager
    def _aws(self, operation: str, *, job_name: str | None = None, instance_type: str | None = None):
        """Raise our error (`translate`) for any botocore error raised inside."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            error = translate(exc, operation=operation, job_name=job_name, region=self.region,
                              instance_type=instance_type)
            if isinstance(error, UnknownJob) and job_name:
                self.check_account(job_name)  # not found because it is in another account?
            raise error from exc

    @property
    def account(self) -> str | None:
        """The AWS account of the credentials in use (`accounts.caller`, asked once)."""
        if not hasattr(self, "_account"):
            from orchestrator import accounts

            self._account = accounts.caller(self.region)
        return self._account

    def check_account(self, job_name: str) -> None:
        """OtherAccount (exit 2) when the ledger records `job_name` in another AWS account
        than the credentials in use; nothing when either is unknown."""
        from orchestrator.accounts import OtherAccount

        entry = self.ledger.get(job_name)
        if entry is None or not entry.account or entry.backend != self.name:
            return
        if self.account is not None and self.account != entry.account:
            raise OtherAccount(job_name, entry.account, self.account, entry.region)

    # --- submit -------------------------------------------------------------------------------

    def _begin_submit(self, prepared) -> Submitted | None:
        """The ledger's intent, written before anything in AWS changes. Returns the answer when
        there is nothing to do (the row is submitted or later); else the row is `submitting`
        and the caller goes on. InputError when the name is the ledger's for another spec."""
        name = prepared.job_name
        entry = self.ledger.record_intent(name, backend=self.name, region=self.region,
                                          spec_hash=prepared.spec_hash, request=prepared.request,
                                          locations=prepared.locations.to_json())
        if entry.spec_hash != prepared.spec_hash or entry.backend != self.name:
            raise InputError(f"the job name {name} is already in the ledger for another spec "
                             f"({entry.backend}, spec {entry.spec_hash[:8]}, {entry.status})",
                             hint="change the spec's name so the job name differs")
        if entry.status not in ("planned", "submitting"):
            return Submitted(name, created=False)
        # A row left in `submitting` under another account's credentials may name a job that
        # exists there: never create it here (OtherAccount). The account is recorded before
        # the create, so a crash between the two still knows where the job may be.
        if entry.status == "submitting":
            self.check_account(name)
        if entry.status == "planned":  # recorded ahead (a sweep), or refused earlier
            self.ledger.transition(name, "submitting", expect=("planned",))
        if self.account is not None:
            self.ledger.set_account(name, self.account)
        return None

    def _not_submitted(self, name: str, detail: str) -> None:
        """The service never created the job: back to planned, so a later submit tries again."""
        self.ledger.transition(name, "planned", detail=detail, expect=("submitting",))

    def upload_source(self, prepared) -> bool:
        """Put the source archive at its content-addressed URI unless it is there already;
        returns whether this call uploaded it. The conditional put makes a concurrent upload
        of the same bytes harmless."""
        from botocore.exceptions import ClientError

        bucket, key = split_s3(prepared.source_uri)
        with self._aws("HeadObject"):
            try:
                self.s3.head_object(Bucket=bucket, Key=key)
                return False
            except ClientError as exc:
                # S3 answers a missing key with 403, not 404, to a caller without s3:ListBucket
                # on the bucket (HeadObject API reference, "Permissions"): a bucket other than
                # the stack's may grant only object access. The put below is conditional
                # (IfNoneMatch), so "maybe absent" is safe: it writes only if the key is not there,
                # and a caller really denied is told so by the put's own AccessDenied.
                if not aws_errors.is_not_found(exc) and aws_errors.kind_of(exc) != "denied":
                    raise
        digest = bytes.fromhex(prepared.archive_sha256)
        with self._aws("PutObject"):
            try:
                self.s3.put_object(Bucket=bucket, Key=key, Body=prepared.archive, IfNoneMatch="*",
                                   ContentType="application/gzip",
                                   ChecksumSHA256=base64.b64encode(digest).decode(),
                                   Metadata={"sha256": prepared.archive_sha256})
            except ClientError as exc:
                if aws_errors.code_of(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return False  # someone uploaded the same content-addressed object meanwhile
                raise
        return True

    # --- progress -----------------------------------------------------------------------------

    def _results_uri(self, job_name: str) -> str:
        """Where the job writes results.json: its locations in the ledger, as it was prepared;
        for a job submitted elsewhere, what the service's record says (`_recorded_results_uri`)."""
        entry = self.ledger.get(job_name)
        if entry is not None and entry.locations:
            return entry.locations["results"]
        return self._recorded_results_uri(job_name)

    def _recorded_results_uri(self, job_name: str) -> str:
        raise NotImplementedError

    def progress(self, job_name: str) -> JobProgress | None:
        """The job's results.json (launch.py's heartbeat while it runs, its final record after);
        None when absent or unreadable."""
        try:
            uri = self._results_uri(job_name)
            bucket, key = split_s3(uri)
            data = self.s3.get_object(Bucket=bucket, Key=key)["Body"].read(4 * 2**20)
        except Exception:  # noqa: BLE001 - progress is an extra: no object yet, no access, ...
            return None
        return progress_of(data, uri)
