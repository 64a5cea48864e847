"""The s3:// store: objects under an S3 prefix, through boto3 (imported when the first
client is needed).

Conditional writes are S3's own (`IfNoneMatch="*"`, `IfMatch=<etag>`). Files move through
boto3's transfer manager (s3transfer): above `multipart_threshold`, multipart uploads with
parts sent by `max_workers` threads (the upload aborted on failure) and parallel ranged GETs,
each pinned with IfMatch to the ETag its HEAD saw; downloads land in a temporary file renamed
into place. It replaced a hand-written version that was slower here (docs/BENCHMARKS.md). The
client's config (`s3_client_config`) bounds each wait for an answer, so an endpoint that
accepts a connection and never answers fails the call instead of holding it for ever.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from entrypoints.shared.storage.store import (
    SPOOL_PREFIX,
    ObjectInfo,
    PendingObject,
    PreconditionFailed,
    StorageError,
    Store,
    check_key,
    check_prefix,
)

# Objects larger than this move as multipart uploads / parallel ranged GETs.
DEFAULT_MULTIPART_THRESHOLD = 64 * 2**20
DEFAULT_PART_SIZE = 16 * 2**20
# S3 refuses parts smaller than 5 MiB (all but the last).
MIN_PART_SIZE = 5 * 2**20
DEFAULT_WORKERS = 8
# Seconds an S3 client waits for a connection, and for each piece of an answer.
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 60

_MISSING = {"NoSuchKey", "404", "NotFound"}
_CONFLICT = {"PreconditionFailed", "412", "ConditionalRequestConflict"}
_HINTS = {
    "NoSuchBucket": "create the bucket first (see infra/README.md) or fix the URI",
    "AccessDenied": "the credentials in use may not read or write this prefix",
    "InvalidAccessKeyId": "check the AWS credentials in the environment",
}


def _code(exc) -> str:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


# An object key is at most 1,024 bytes of UTF-8 (Amazon S3 User Guide, "Naming Amazon S3
# objects", https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html); the
# orchestrator's contract check (orchestrator/data/aws_limits.json) holds the same limit.
S3_MAX_KEY_BYTES = 1024


def job_region() -> str | None:
    """The job's region, for every S3 client in the container: AWS_REGION (which SageMaker
    sets, and a Batch job's request sets), else AWS_DEFAULT_REGION. botocore itself reads only
    AWS_DEFAULT_REGION, and a client without a region goes to the global endpoint, which an S3
    gateway endpoint in the job's VPC does not serve."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def s3_client_config(max_workers: int = DEFAULT_WORKERS):
    """The botocore config of an S3 client for a store: a connection pool for its parallel
    part transfers, standard retries, and connect/read timeouts, so that an endpoint that
    accepts a connection and never answers fails the call instead of holding it for ever (the
    read timeout bounds each wait for data, not a whole transfer)."""
    from botocore.config import Config

    return Config(max_pool_connections=max(10, 2 * max_workers), retries={"mode": "standard", "max_attempts": 5},
                  connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S)


class S3Store(Store):
    """A store under an S3 prefix; see the module docstring."""

    def __init__(self, bucket: str, prefix: str, client=None, *,
                 multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
                 part_size: int = DEFAULT_PART_SIZE, max_workers: int = DEFAULT_WORKERS):
        self.bucket = bucket
        self.prefix = prefix
        self.uri_root = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.max_workers = max(1, max_workers)
        self._client = client
        self._client_lock = threading.Lock()

    @property
    def client(self):
        with self._client_lock:
            if self._client is None:
                try:
                    import boto3
                except ImportError as exc:
                    raise StorageError(f"{self.uri_root}: boto3 is needed for s3:// stores") from exc
                self._client = boto3.client("s3", region_name=job_region(),
                                            config=s3_client_config(self.max_workers))
            return self._client

    def _key(self, key: str) -> str:
        check_key(key, self.uri_root)
        full = f"{self.prefix}/{key}" if self.prefix else key
        size = len(full.encode("utf-8"))
        if size > S3_MAX_KEY_BYTES:
            raise StorageError(f"{self.uri_root}/{key[:80]}...: the S3 key is {size} bytes of UTF-8; S3 allows at most "
                               f"{S3_MAX_KEY_BYTES} (Amazon S3 User Guide, 'Naming Amazon S3 objects')")
        return full

    def _error(self, op: str, key: str, exc: Exception) -> StorageError:
        code = _code(exc)
        message = f"{op} {self.uri_root}/{key}: {exc}"
        if code in _HINTS:
            message += f" (hint: {_HINTS[code]})"
        return StorageError(message)

    @contextlib.contextmanager
    def _translate(self, op: str, key: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError
        from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError, S3UploadFailedError

        try:
            yield
        except (ClientError, BotoCoreError, RetriesExceededError, S3DownloadFailedError, S3UploadFailedError) as exc:
            raise self._error(op, key, exc) from exc

    def _head(self, key: str) -> dict | None:
        from botocore.exceptions import ClientError

        with self._translate("head", key):
            try:
                return self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return None
                raise

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        with self._translate("get", key):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return None
                raise
            return response["Body"].read(), response["ETag"]

    def put_bytes(self, key: str, data: bytes, *, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        from botocore.exceptions import ClientError

        conditions: dict[str, str] = {}
        if if_none_match:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        with self._translate("put", key):
            try:
                response = self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                                  **conditions)
            except ClientError as exc:
                code = _code(exc)
                if conditions and (code in _CONFLICT or (if_match and code in _MISSING)):
                    raise PreconditionFailed(f"{self.uri(key)}: {code}") from exc
                raise
        return response["ETag"]

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        # "classic": s3transfer's own threads everywhere, never the CRT client that boto3
        # picks on some instance types when awscrt is installed (other retries, other limits).
        return TransferConfig(multipart_threshold=self.multipart_threshold, multipart_chunksize=self.part_size,
                              max_concurrency=self.max_workers, use_threads=True,
                              preferred_transfer_client="classic")

    def _transfer(self, direction: str, key: str, path: Path) -> None:
        """Upload `path` to, or download it from, `key` through boto3's transfer manager."""
        from boto3.s3.transfer import create_transfer_manager

        with create_transfer_manager(self.client, self._transfer_config()) as manager:
            if direction == "upload":
                future = manager.upload(str(path), self.bucket, self._key(key))
            else:
                future = manager.download(self.bucket, self._key(key), str(path))
            future.result()

    def put_file(self, key: str, path: str | os.PathLike) -> str:
        with self._translate("put", key):
            self._transfer("upload", key, Path(path))
            # The transfer manager does not return the ETag; the key names its content (an
            # archive) or has one writer (a job's outputs), so this is the object uploaded.
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ETag"]

    def get_file(self, key: str, path: str | os.PathLike) -> bool:
        from botocore.exceptions import ClientError

        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self._translate("get", key):
            try:
                self._transfer("download", key, dest)
            except ClientError as exc:
                if _code(exc) in _MISSING:
                    return False
                raise
        return True

    def stat(self, key: str) -> ObjectInfo | None:
        head = self._head(key)
        if head is None:
            return None
        return ObjectInfo(key, head["ContentLength"], head["ETag"], head["LastModified"].timestamp())

    def open_write(self, *, spool_dir: str | os.PathLike | None = None) -> PendingObject:
        folder = Path(spool_dir) if spool_dir is not None else Path(tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        return _S3Pending(self, folder / f"{SPOOL_PREFIX}{secrets.token_hex(8)}")

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def list(self, prefix: str = "", *, with_etags: bool = True) -> list[ObjectInfo]:
        check_prefix(prefix, self.uri_root)
        root = f"{self.prefix}/" if self.prefix else ""
        found: list[ObjectInfo] = []
        with self._translate("list", prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                         Prefix=root + prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    found.append(ObjectInfo(item["Key"][len(root):], item["Size"], item["ETag"],
                                            item["LastModified"].timestamp()))
        return sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        with self._translate("delete", key):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))


class _S3Pending(PendingObject):
    def __init__(self, store: S3Store, path: Path):
        super().__init__(path)
        self._store = store

    def commit(self, key: str) -> None:
        self._finish()
        self._store.put_file(key, self.path)
        self.committed = True
        self.discard()
