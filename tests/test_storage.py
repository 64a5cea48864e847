"""entrypoints/shared/storage/: the same semantics on file:// and on S3 (a loopback moto server)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import boto3
import pytest
from job_waits import patience

from entrypoints.shared import storage
from entrypoints.shared.storage import PreconditionFailed, StorageError, open_store

MiB = 2**20


@pytest.fixture(params=["file", "s3"])
def store_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store/root"
    bucket = request.getfixturevalue("moto_bucket")
    return f"s3://{bucket}/some/prefix"


def _internal_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.startswith(".storage-tmp")]


def test_bytes_round_trip_and_absent_objects(store_uri):
    store = open_store(store_uri)
    assert store.get_bytes("a/b.json") is None
    assert store.get_with_etag("a/b.json") is None
    assert not store.exists("a/b.json")
    etag = store.put_bytes("a/b.json", b'{"x": 1}')
    assert store.get_bytes("a/b.json") == b'{"x": 1}'
    assert store.get_with_etag("a/b.json") == (b'{"x": 1}', etag)
    assert store.exists("a/b.json")
    assert store.uri("a/b.json") == f"{store_uri}/a/b.json"
    info = store.stat("a/b.json")
    assert (info.key, info.size) == ("a/b.json", 8)
    store.delete("a/b.json")
    store.delete("a/b.json")  # deleting what is gone is fine
    assert store.get_bytes("a/b.json") is None
    assert store.stat("a/b.json") is None


def test_etags_name_content(store_uri):
    store = open_store(store_uri)
    first = store.put_bytes("k", b"one")
    second = store.put_bytes("k", b"two")
    third = store.put_bytes("k", b"one")
    assert first != second
    assert first == third


def test_if_none_match_creates_only_once(store_uri):
    store = open_store(store_uri)
    store.put_bytes("manifest.json", b"first", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put_bytes("manifest.json", b"second", if_none_match=True)
    assert store.get_bytes("manifest.json") == b"first"


def test_if_match_replaces_only_the_version_read(store_uri):
    store = open_store(store_uri)
    store.put_bytes("manifest.json", b"v1")
    _, etag = store.get_with_etag("manifest.json")
    store.put_bytes("manifest.json", b"v2 by someone else")
    with pytest.raises(PreconditionFailed):
        store.put_bytes("manifest.json", b"v2 by us", if_match=etag)
    assert store.get_bytes("manifest.json") == b"v2 by someone else"
    _, current = store.get_with_etag("manifest.json")
    new_etag = store.put_bytes("manifest.json", b"v3", if_match=current)
    assert store.get_with_etag("manifest.json") == (b"v3", new_etag)


def test_if_match_on_a_deleted_object_fails(store_uri):
    store = open_store(store_uri)
    etag = store.put_bytes("manifest.json", b"v1")
    store.delete("manifest.json")
    with pytest.raises(PreconditionFailed):
        store.put_bytes("manifest.json", b"v2", if_match=etag)
    assert store.get_bytes("manifest.json") is None


def test_concurrent_conditional_writers_lose_no_update(store_uri):
    """Eight threads each append their name by read / conditional write / retry."""
    store = open_store(store_uri)
    store.put_bytes("counter", b"")

    def append(name: str) -> None:
        while True:
            data, etag = store.get_with_etag("counter")
            try:
                store.put_bytes("counter", data + name.encode() + b",", if_match=etag)
                return
            except PreconditionFailed:
                continue

    threads = [threading.Thread(target=append, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=patience(60))
    names = store.get_bytes("counter").decode().strip(",").split(",")
    assert sorted(names) == sorted(f"t{i}" for i in range(8))


def test_list_is_a_string_prefix_sorted_with_sizes(store_uri):
    store = open_store(store_uri)
    for key, size in {"k1/manifest.json": 3, "k1/archives/a.tar": 10, "k2/manifest.json": 4, "k10/x": 1}.items():
        store.put_bytes(key, b"x" * size)
    listed = store.list()
    assert [info.key for info in listed] == ["k1/archives/a.tar", "k1/manifest.json", "k10/x", "k2/manifest.json"]
    assert {info.key: info.size for info in listed}["k1/archives/a.tar"] == 10
    assert [info.key for info in store.list("k1/")] == ["k1/archives/a.tar", "k1/manifest.json"]
    assert [info.key for info in store.list("k1")] == ["k1/archives/a.tar", "k1/manifest.json", "k10/x"]
    assert store.list("nothing/") == []
    with_etags = {info.key: info.etag for info in store.list("k2/")}
    assert with_etags == {"k2/manifest.json": store.get_with_etag("k2/manifest.json")[1]}


def test_list_pages_through_more_than_a_thousand_objects(store_uri):
    store = open_store(store_uri)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: store.put_bytes(f"many/{i:05d}", b"."), range(1005)))
    keys = [info.key for info in store.list("many/", with_etags=False)]
    assert keys == [f"many/{i:05d}" for i in range(1005)]


def test_file_store_hides_its_own_files(tmp_path):
    store = open_store(f"file://{tmp_path}/s")
    store.put_bytes("a/manifest.json", b"{}", if_none_match=True)
    assert (tmp_path / "s" / "a" / ".storage-lock.manifest.json").exists()
    assert [info.key for info in store.list()] == ["a/manifest.json"]
    with pytest.raises(ValueError):
        store.put_bytes("a/.storage-lock.manifest.json", b"no")


@pytest.mark.parametrize("uri", ["http://127.0.0.1:9/x", "file://relative/path", "s3://", "s3://Bad_Bucket/x",
                                 "file:///a/../b", "s3://bucket/a/../b", "gs://bucket/x", "s3://a..b/x"])
def test_malformed_uris_are_refused(uri):
    with pytest.raises(ValueError):
        open_store(uri)


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "./a", "a/", "a/./b"])
def test_malformed_keys_are_refused(tmp_path, key):
    store = open_store(f"file://{tmp_path}")
    with pytest.raises(ValueError):
        store.put_bytes(key, b"x")


def test_file_uri_forms(tmp_path):
    assert open_store(f"file://{tmp_path}/x/").uri("k") == f"file://{tmp_path}/x/k"
    assert open_store(f"file://localhost{tmp_path}/x").uri("k") == f"file://{tmp_path}/x/k"


def _payload(size: int) -> bytes:
    return os.urandom(size)


@pytest.mark.parametrize("size", [0, 1000, 3 * MiB + 17])
def test_put_file_and_get_file_round_trip(store_uri, tmp_path, size):
    store = open_store(store_uri)
    source = tmp_path / "source.bin"
    source.write_bytes(_payload(size))
    store.put_file("big/object.bin", source)
    dest = tmp_path / "out" / "object.bin"
    assert store.get_file("big/object.bin", dest)
    assert dest.read_bytes() == source.read_bytes()
    assert store.stat("big/object.bin").size == size


def test_get_file_of_an_absent_object_leaves_nothing(store_uri, tmp_path):
    store = open_store(store_uri)
    out = tmp_path / "out"
    out.mkdir()
    assert store.get_file("missing.bin", out / "missing.bin") is False
    assert list(out.iterdir()) == []


def test_open_write_publishes_at_commit_only(store_uri, tmp_path):
    store = open_store(store_uri)
    with store.open_write(spool_dir=tmp_path / "spool") as pending:
        pending.write(b"hello ")
        os.write(pending.fileno(), b"world")
        assert store.get_bytes("named/after.bin") is None
        pending.commit("named/after.bin")
    assert store.get_bytes("named/after.bin") == b"hello world"
    with store.open_write(spool_dir=tmp_path / "spool") as pending:
        pending.write(b"discarded")
    assert [info.key for info in store.list()] == ["named/after.bin"]
    spool = tmp_path / "spool"
    assert not spool.exists() or list(spool.iterdir()) == []
    if store_uri.startswith("file://"):
        assert _internal_files(store.root) == []


def test_s3_multipart_upload_with_parallel_parts_and_ranged_download(moto_bucket, tmp_path):
    client = boto3.client("s3")
    store = open_store(f"s3://{moto_bucket}/mp", s3_client=client, multipart_threshold=MiB,
                       part_size=storage.MIN_PART_SIZE, max_workers=4)
    source = tmp_path / "large.bin"
    source.write_bytes(_payload(2 * storage.MIN_PART_SIZE + 123))
    etag = store.put_file("large.bin", source)
    # A multipart object's etag ends with its part count.
    assert etag.strip('"').endswith("-3")
    assert client.head_object(Bucket=moto_bucket, Key="mp/large.bin")["ETag"] == etag
    gets = []
    client.meta.events.register("before-parameter-build.s3.GetObject",
                                lambda params, **_: gets.append((params.get("Range"), params.get("IfMatch"))))
    dest = tmp_path / "down.bin"
    assert store.get_file("large.bin", dest)
    assert dest.read_bytes() == source.read_bytes()
    # Parallel ranged GETs (boto3's transfer manager: the last range is open-ended), every one
    # pinned to the ETag seen first, so a part of another version can never be mixed in.
    assert sorted(gets) == sorted([
        (f"bytes=0-{storage.MIN_PART_SIZE - 1}", etag),
        (f"bytes={storage.MIN_PART_SIZE}-{2 * storage.MIN_PART_SIZE - 1}", etag),
        (f"bytes={2 * storage.MIN_PART_SIZE}-", etag),
    ])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["down.bin", "large.bin"]  # no temporary left


def test_s3_download_of_an_object_replaced_midway_fails_and_leaves_nothing(moto_bucket, tmp_path):
    client = boto3.client("s3")
    store = open_store(f"s3://{moto_bucket}/mp", s3_client=client, multipart_threshold=MiB,
                       part_size=storage.MIN_PART_SIZE, max_workers=1)
    source = tmp_path / "large.bin"
    source.write_bytes(_payload(2 * storage.MIN_PART_SIZE + 1))
    store.put_file("large.bin", source)
    replaced = []

    def replace_after_the_first_part(http_response, **_):
        if not replaced and http_response.status_code == 206:
            replaced.append(True)
            boto3.client("s3").put_object(Bucket=moto_bucket, Key="mp/large.bin", Body=b"another version")

    client.meta.events.register("after-call.s3.GetObject", replace_after_the_first_part)
    out = tmp_path / "out"
    with pytest.raises(StorageError, match=f"s3://{moto_bucket}/mp/large.bin: .*did not match expected ETag"):
        store.get_file("large.bin", out / "down.bin")
    assert replaced and list(out.iterdir()) == []


def test_s3_failed_multipart_upload_is_aborted(moto_bucket, tmp_path):
    client = boto3.client("s3")
    real_upload_part = client.upload_part
    calls = []

    def flaky_upload_part(**kwargs):
        calls.append(kwargs["PartNumber"])
        if kwargs["PartNumber"] == 2:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "UploadPart")
        return real_upload_part(**kwargs)

    client.upload_part = flaky_upload_part
    store = open_store(f"s3://{moto_bucket}/mp", s3_client=client, multipart_threshold=MiB,
                       part_size=storage.MIN_PART_SIZE, max_workers=2)
    source = tmp_path / "large.bin"
    source.write_bytes(_payload(2 * storage.MIN_PART_SIZE + 1))
    with pytest.raises(StorageError, match=f"s3://{moto_bucket}/mp/large.bin"):
        store.put_file("large.bin", source)
    assert 2 in calls
    assert client.list_multipart_uploads(Bucket=moto_bucket).get("Uploads", []) == []
    assert not store.exists("large.bin")


def test_s3_missing_bucket_is_a_storage_error_naming_the_uri(moto_server):
    store = open_store("s3://no-such-bucket/cache")
    with pytest.raises(StorageError, match="s3://no-such-bucket/cache/k.*NoSuchBucket.*hint"):
        store.put_bytes("k", b"x")
    with pytest.raises(StorageError, match="no-such-bucket"):
        store.list()


def test_s3_client_is_created_lazily_from_the_environment(moto_bucket):
    store = open_store(f"s3://{moto_bucket}")
    assert store._client is None
    store.put_bytes("k", b"v")
    assert boto3.client("s3").get_object(Bucket=moto_bucket, Key="k")["Body"].read() == b"v"


@pytest.mark.parametrize(("variables", "region"), [
    ({"AWS_REGION": "eu-west-3"}, "eu-west-3"),  # SageMaker's, and what a Batch job's request sets
    ({"AWS_DEFAULT_REGION": "ap-south-1"}, "ap-south-1"),
    ({"AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "ap-south-1"}, "eu-west-3"),
])
def test_the_s3_client_takes_the_jobs_region(monkeypatch, variables, region):
    """botocore reads AWS_DEFAULT_REGION only; a client without a region goes to the global
    endpoint, which an S3 gateway endpoint in the job's VPC does not serve."""
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert open_store("s3://bucket/x").client.meta.region_name == region


def test_a_key_past_s3s_limit_is_refused_before_any_call(monkeypatch):
    """1,024 bytes of UTF-8 in all, the store's prefix included (the contract's table says the same)."""
    from entrypoints.shared.storage.s3_store import S3_MAX_KEY_BYTES
    from orchestrator import aws_contract

    assert S3_MAX_KEY_BYTES == aws_contract.limit("s3-object-key")["max_bytes"]
    calls = []
    monkeypatch.setattr("botocore.client.BaseClient._make_api_call", lambda self, op, params: calls.append(op))
    store = open_store("s3://bucket/" + "p" * 900)
    store._key("k" * 123)  # 900 + 1 + 123 = 1024: allowed
    with pytest.raises(StorageError, match="1025 bytes of UTF-8; S3 allows at most 1024"):
        store.put_bytes("é" * 62, b"v")  # 900 + 1 + 124 bytes
    assert calls == []


def test_part_size_below_the_s3_minimum_is_refused():
    with pytest.raises(ValueError, match="minimum"):
        open_store("s3://bucket/x", part_size=MiB)


@pytest.mark.timeout(60)
def test_the_file_store_never_reads_a_fifo_or_a_device(tmp_path):
    import os

    store = storage.open_store(f"file://{tmp_path}")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    for key in ("fifo", "zero"):
        with pytest.raises(storage.StorageError, match="not a regular file"):
            store.get_bytes(key)
        with pytest.raises(storage.StorageError, match="not a regular file"):
            store.get_file(key, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


# --- a sparse file's holes (issue 32, finding 14) ---------------------------------------------


def _sparse(path: Path, size: int = 32 * 2**20) -> bytes:
    with open(path, "wb") as out:
        out.write(b"head")
        out.seek(size // 3)
        out.write(os.urandom(10_000))
        out.truncate(size)  # a trailing hole: no extent writes it
    if path.stat().st_blocks * 512 >= size:
        pytest.skip(f"the file system of {path} keeps no holes")
    return path.read_bytes()


def test_get_file_keeps_a_sparse_files_holes(tmp_path):
    from entrypoints.shared.storage.file_store import FileStore

    (tmp_path / "store").mkdir()
    content = _sparse(tmp_path / "store" / "big.bin")
    assert FileStore(tmp_path / "store").get_file("big.bin", tmp_path / "copy.bin")
    copy = tmp_path / "copy.bin"
    assert copy.read_bytes() == content
    assert copy.stat().st_blocks * 512 < 2**20  # the data's blocks, not 32 MiB of zeros


@pytest.mark.parametrize("refused", ["seek_data", "copy_file_range", "copies_nothing"])
def test_a_system_that_cannot_say_or_copy_ranges_still_copies_every_byte(tmp_path, monkeypatch, refused):
    import errno

    from entrypoints.shared import holes

    content = _sparse(tmp_path / "big.bin")
    if refused == "seek_data":  # a file system without SEEK_DATA: the whole file is data
        real_lseek = os.lseek

        def lseek(fd, position, how):
            if how == os.SEEK_DATA:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_lseek(fd, position, how)

        monkeypatch.setattr(os, "lseek", lseek)
        assert holes.extents(os.open(tmp_path / "big.bin", os.O_RDONLY), len(content)) == [(0, len(content))]
    else:  # another file system on an older kernel (EXDEV), or one whose copy_file_range copies
        # nothing (returns 0 before the end): reads and writes

        def copy_file_range(*args):
            if refused == "copies_nothing":
                return 0
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", copy_file_range, raising=False)
    holes.copy_file(tmp_path / "big.bin", tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == content
    assert os.stat(tmp_path / "copy.bin").st_mode == os.stat(tmp_path / "big.bin").st_mode
