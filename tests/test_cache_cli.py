"""`orchestrator cache ls | show | prune` (orchestrator/cache.py + cli.py) on file:// and S3."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cli_harness import run_cli as _cli

from entrypoints.shared import compile_cache as cc
from entrypoints.shared import storage
from orchestrator import cache
from orchestrator.errors import BackendError, InputError

NEURON = cc.CacheKey("neuronx-cc", "2.22.1", "xla", "", "trn1", 2)
INDUCTOR = cc.CacheKey("inductor", "2.9.0+cpu", "native", "", "cpu", 2)
HOUR = 3600.0


@pytest.fixture(params=["file", "s3"])
def store_uri(request, tmp_path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return f"s3://{request.getfixturevalue('moto_bucket')}/compile-cache"


def neuron_entries(root: Path, *modules: str) -> None:
    for module in modules:
        folder = root / "neuronxcc-2.22.1" / f"MODULE_{module}+00"
        folder.mkdir(parents=True)
        (folder / "model.neff").write_bytes(b"n" * 1000)
        (folder / "model.done").write_text("")


def populate(uri: str, tmp_path: Path) -> None:
    """Two keys: neuron with 3 entries in 2 archives, inductor with 2 entries."""
    source = tmp_path / "neuron-src"
    neuron_entries(source, "a", "b")
    cc.push(uri, NEURON, source)
    neuron_entries(source, "c")
    cc.push(uri, NEURON, source)
    inductor = tmp_path / "inductor-src"
    (inductor / "ab").mkdir(parents=True)
    (inductor / "ab" / "cab.py").write_bytes(b"x" * 100)
    (inductor / "ab" / "cab.so").write_bytes(b"y" * 200)
    cc.push(uri, INDUCTOR, inductor)


def orphan(uri: str, key: cc.CacheKey = NEURON, data: bytes = b"orphan archive") -> str:
    """An archive no manifest names, as a push killed before publishing leaves it."""
    name = f"archives/{'0' * 64}.tar"
    storage.open_store(uri).put_bytes(f"{key.digest()}/{name}", data)
    return name


def test_ls_lists_keys_with_counts_and_sizes(store_uri, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # whole keys on one line each (80 columns: see the fit test)
    populate(store_uri, tmp_path)
    code, out, err = _cli(monkeypatch, capsys, "cache", "ls", store_uri)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["KEY", "ENTRIES", "SIZE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {NEURON.digest(), INDUCTOR.digest()}
    assert rows[NEURON.digest()][1] == "3" and rows[NEURON.digest()][4] == "2"  # entries, archives
    assert rows[INDUCTOR.digest()][1:3] == ["2", "300"]


def test_list_keys_reports_what_the_manifest_says(store_uri, tmp_path):
    populate(store_uri, tmp_path)
    root, keys = cache.list_keys(store_uri)
    assert root == store_uri
    by_key = {k.key: k for k in keys}
    assert by_key[NEURON.digest()].entries == 3
    assert by_key[NEURON.digest()].entry_bytes == 3 * 1000
    assert by_key[NEURON.digest()].archives == 2
    assert by_key[INDUCTOR.digest()].entry_bytes == 300
    assert all(k.problem is None and k.updated_at for k in keys)


def test_ls_defaults_to_the_local_store(orch_home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # whole keys on one line each (80 columns: see the fit test)
    uri = f"file://{orch_home}/store/compile-cache"
    assert cache.default_uri() == uri
    code, out, err = _cli(monkeypatch, capsys, "cache", "ls")
    assert code == 0 and "no compile caches under" in out and uri in out
    # It says what it listed, and how to list the S3 cache SageMaker jobs use.
    assert f"note: this is the local store ({uri})" in err
    assert "`python -m orchestrator cache ls s3://BUCKET/compile-cache`" in err
    populate(uri, tmp_path)
    code, out, err = _cli(monkeypatch, capsys, "cache", "ls")
    assert code == 0 and NEURON.digest() in out and "cache ls s3://" in err
    code, out, err = _cli(monkeypatch, capsys, "cache", "ls", uri)
    assert code == 0 and "note:" not in err  # a URI given: nothing to explain


def test_ls_flags_a_key_without_a_usable_manifest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # whole keys on one line each (80 columns: see the fit test)
    uri = f"file://{tmp_path}/store"
    orphan(uri)
    code, out, err = _cli(monkeypatch, capsys, "cache", "ls", uri)
    assert code == 0 and NEURON.digest() in out and "no manifest" in err


def test_show_lists_entries_and_archives(store_uri, tmp_path, monkeypatch, capsys):
    populate(store_uri, tmp_path)
    orphan(store_uri)
    code, out, err = _cli(monkeypatch, capsys, "cache", "show", store_uri, NEURON.digest())
    assert code == 0, err
    assert f"manifest: {store_uri}/{NEURON.digest()}/manifest.json" in out
    assert "  compiler_version: 2.22.1" in out and "  world_size: 2" in out
    for module in "abc":
        assert f"neuronxcc-2.22.1/MODULE_{module}+00" in out
    assert "3 entries; 3 archives" in out and "1 not referenced" in out
    detail = cache.show(store_uri, NEURON.digest())
    assert [used for _, _, used in detail.archives].count(False) == 1
    assert {archive for _, archive, _ in detail.entries} == {name for name, _, used in detail.archives if used}


def test_show_with_the_default_uri_takes_just_a_key(orch_home, tmp_path, monkeypatch, capsys):
    populate(cache.default_uri(), tmp_path)
    code, out, _ = _cli(monkeypatch, capsys, "cache", "show", INDUCTOR.digest())
    assert code == 0 and "ab/cab.so" in out


def test_show_warns_about_a_missing_archive(tmp_path, monkeypatch, capsys):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    for path in (tmp_path / "store" / INDUCTOR.digest() / "archives").iterdir():
        path.unlink()
    code, _, err = _cli(monkeypatch, capsys, "cache", "show", uri, INDUCTOR.digest())
    assert code == 0 and "named by the manifest but missing" in err


@pytest.mark.parametrize("args, message", [
    (["cache", "show", "FILE_STORE", "no-such-key"], "no manifest for cache key 'no-such-key'"),
    (["cache", "show", "FILE_STORE", "../escape"], "bad cache key"),
    (["cache", "ls", "http://127.0.0.1:9/cache"], "bad cache URI"),
    (["cache", "ls", "file://relative/path"], "bad cache URI"),
    (["cache", "prune", "FILE_STORE", "--key", "no-such-key"], "no cache key 'no-such-key'"),
    (["cache", "show", "a", "b", "c"], "takes [URI] KEY"),
])
def test_bad_input_exits_2(tmp_path, monkeypatch, capsys, args, message):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    code, _, err = _cli(monkeypatch, capsys, *[uri if a == "FILE_STORE" else a for a in args])
    assert code == 2 and message in err
    assert "\nhint: " in err  # each says what to do
    if "no manifest" in message or "no cache key" in message:
        # The keys are listed where the user looked, not in the default store.
        assert f"hint: `python -m orchestrator cache ls {uri}` lists the keys there" in err


def test_cache_show_with_three_arguments_shows_the_usage(monkeypatch, capsys):
    code, _, err = _cli(monkeypatch, capsys, "cache", "show", "a", "b", "c")
    assert code == 2 and "hint: e.g. `python -m orchestrator cache show s3://bucket/compile-cache KEY`" in err


@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "prune"], ["cache", "show"]])
@pytest.mark.parametrize("uri, message", [
    ("s3://", "bad cache URI: s3://: '' is not a valid S3 bucket name"),
    ("s3:///cache", "bad cache URI: s3:///cache: '' is not a valid S3 bucket name"),
    ("s3://UPPER/cache", "bad cache URI: s3://UPPER/cache: 'UPPER' is not a valid S3 bucket name"),
    ("s3://ab/cache", "bad cache URI: s3://ab/cache: 'ab' is not a valid S3 bucket name"),
    ("file:///etc/passwd", "bad cache URI 'file:///etc/passwd': /etc/passwd is not a folder"),
])
def test_bad_uris_exit_2_before_any_call(orch_home, monkeypatch, capsys, command, uri, message):
    import boto3

    monkeypatch.setattr(boto3.session.Session, "client", lambda *a, **k: pytest.fail("an AWS client was made"))
    code, out, err = _cli(monkeypatch, capsys, *command, uri, *(["some-key"] if command[1] == "show" else []))
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"error: {message}" in err and "'s3:'" not in err and "hint: use s3://bucket/prefix" in err


def test_store_failure_exits_1(moto_server, monkeypatch, capsys):
    code, _, err = _cli(monkeypatch, capsys, "cache", "ls", "s3://no-such-bucket/cache")
    assert code == 1 and "no-such-bucket" in err and err.count("hint:") == 1  # storage's own, once
    with pytest.raises(BackendError):
        cache.prune("s3://no-such-bucket/cache")


def test_s3_stores_are_read_in_the_commands_region(moto_bucket, tmp_path, monkeypatch, capsys):
    """botocore reads AWS_DEFAULT_REGION only: a user who set AWS_REGION (README step 0) must
    reach that region's S3 endpoint, as every other command does."""
    uri = f"s3://{moto_bucket}/compile-cache"
    populate(uri, tmp_path)
    monkeypatch.setenv("AWS_REGION", "eu-west-2")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    regions: list = []
    real = cache.open_store

    def spy(uri, **kwargs):
        store = real(uri, **kwargs)
        if isinstance(store, storage.S3Store):
            regions.append(store.client.meta.region_name)
        return store

    monkeypatch.setattr(cache, "open_store", spy)
    for args in (["ls", uri], ["show", uri, NEURON.digest()], ["prune", uri, "--dry-run"]):
        regions.clear()
        code, _, err = _cli(monkeypatch, capsys, "cache", *args)
        assert code == 0, err
        assert regions and regions[-1] == "eu-west-2", args


@pytest.mark.parametrize("config, message", [
    (None, "The config profile (nope) could not be found"),
    ("[default\nregion = eu-west-1\n", "Unable to parse config file"),
])
def test_an_unreadable_aws_config_is_exit_2_as_for_every_command(tmp_path, monkeypatch, capsys, config, message):
    if config is None:
        monkeypatch.setenv("AWS_PROFILE", "nope")
    else:
        (tmp_path / "aws-config").write_text(config)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    for args in (["ls"], ["show", "some-key"], ["prune"]):
        code, out, err = _cli(monkeypatch, capsys, "cache", args[0], "s3://test-bucket/cache", *args[1:])
        assert code == 2 and out == "" and "Traceback" not in err, (args, err)
        assert f"error: cannot read the AWS configuration: {message}" in err
        assert "hint: fix or unset AWS_PROFILE" in err


def test_prune_deletes_only_old_unreferenced_archives(store_uri, tmp_path):
    populate(store_uri, tmp_path)
    name = orphan(store_uri)
    before = {info.key for info in storage.open_store(store_uri).list()}
    young = cache.prune(store_uri)
    assert young.deleted == [] and young.kept_young == 1
    dry = cache.prune(store_uri, now=time.time() + 2 * HOUR, dry_run=True)
    assert [a.uri for a in dry.deleted] == [f"{store_uri}/{NEURON.digest()}/{name}"]
    assert {info.key for info in storage.open_store(store_uri).list()} == before
    report = cache.prune(store_uri, now=time.time() + 2 * HOUR)
    assert [a.uri for a in report.deleted] == [f"{store_uri}/{NEURON.digest()}/{name}"]
    assert report.bytes == len(b"orphan archive")
    assert {info.key for info in storage.open_store(store_uri).list()} == before - {f"{NEURON.digest()}/{name}"}
    for key in (NEURON, INDUCTOR):
        assert cc.pull(store_uri, key, tmp_path / f"pull-{key.kind}").warnings == []


def test_prune_cli_reports_and_dry_run_keeps(tmp_path, monkeypatch, capsys):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    name = orphan(uri)
    code, out, _ = _cli(monkeypatch, capsys, "cache", "prune", uri, "--dry-run", "--grace-hours", "0")
    assert code == 0 and f"would delete {uri}/{NEURON.digest()}/{name}" in out
    assert storage.open_store(uri).exists(f"{NEURON.digest()}/{name}")
    code, out, _ = _cli(monkeypatch, capsys, "cache", "prune", uri)
    assert code == 0 and "kept 1 archive(s) younger than the grace period" in out
    code, out, _ = _cli(monkeypatch, capsys, "cache", "prune", uri, "--grace-hours", "0", "--yes")
    assert code == 0 and f"will delete {uri}/{NEURON.digest()}/{name}" in out and "deleted 1 object(s)" in out
    assert not storage.open_store(uri).exists(f"{NEURON.digest()}/{name}")


def test_prune_on_s3_says_the_space_comes_back_when_noncurrent_versions_expire(moto_bucket, tmp_path, monkeypatch,
                                                                               capsys):
    uri = f"s3://{moto_bucket}/compile-cache"
    populate(uri, tmp_path)
    code, out, err = _cli(monkeypatch, capsys, "cache", "prune", uri, "--key", NEURON.digest(), "--grace-hours", "0",
                          "--yes")
    assert code == 0 and "deleted 3 object(s)" in out
    assert "on a versioned bucket (the stack's is) S3 keeps what is deleted as noncurrent versions" in err
    assert "CompileCacheNoncurrentDays" in err and "not at once" in err
    local = f"file://{tmp_path}/store"
    populate(local, tmp_path / "again")
    code, _, err = _cli(monkeypatch, capsys, "cache", "prune", local, "--key", NEURON.digest(), "--grace-hours", "0",
                        "--yes")
    assert code == 0 and "versioned" not in err


def test_prune_a_whole_key(store_uri, tmp_path, monkeypatch, capsys):
    populate(store_uri, tmp_path)
    report = cache.prune(store_uri, key=NEURON.digest())
    # The manifest is emptied at once (a later prune still knows the key for ours); archives
    # younger than the grace period stay for now.
    assert [a.uri.rsplit("/", 1)[1] for a in report.deleted] == ["manifest.json"]
    assert "key emptied" in report.deleted[0].reason
    assert report.kept_young == 2
    assert cc.pull(store_uri, NEURON, tmp_path / "cold").hit_entries == 0
    code, out, _ = _cli(monkeypatch, capsys, "cache", "prune", store_uri, "--key", NEURON.digest(),
                        "--grace-hours", "0", "--yes")
    assert code == 0 and "deleted 3 object(s)" in out
    keys = [k.key for k in cache.list_keys(store_uri)[1]]
    assert keys == [INDUCTOR.digest()]


def test_prune_keys_older_than(store_uri, tmp_path):
    populate(store_uri, tmp_path)
    assert cache.prune(store_uri, older_than_days=1).deleted == []
    report = cache.prune(store_uri, older_than_days=1, now=time.time() + 2 * 86400)
    assert len(report.deleted) == 2 + 3 and report.kept_young == 0  # two manifests, three archives
    assert cache.list_keys(store_uri)[1] == []


def test_prune_keeps_archives_a_push_publishes_while_prune_runs(tmp_path, monkeypatch):
    """Prune lists, then reads manifests: a manifest published in between protects its archive."""
    uri = f"file://{tmp_path}/store"
    source = tmp_path / "src"
    neuron_entries(source, "a")
    store = storage.open_store(uri)

    class KilledBeforeTheManifest:
        def __getattr__(self, name):
            return getattr(store, name)

        def put_bytes(self, key, data, **conditions):  # only the manifest is written so
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cc.push(uri, NEURON, source, store=KilledBeforeTheManifest())  # the archive is up, the manifest not yet
    archive = store.list(f"{NEURON.digest()}/archives/")[0]
    old = time.time() - 3 * HOUR
    os.utime(store.path(archive.key), (old, old))
    real_open = cache.open_cache

    class PublishAfterListing:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def list(self, *args, **kwargs):
            listed = self._inner.list(*args, **kwargs)
            assert cc.push(uri, NEURON, source).new_entries == 1  # the push completes now
            return listed

    monkeypatch.setattr(cache, "open_cache", lambda *a: PublishAfterListing(real_open(*a)))
    report = cache.prune(uri)
    assert report.deleted == []
    assert cc.pull(uri, NEURON, tmp_path / "after").hit_entries == 1


def test_prune_removes_old_temporaries_of_interrupted_writes(tmp_path):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    folder = tmp_path / "store"
    old_temp, young_temp = folder / ".storage-tmp.1234abcd", folder / NEURON.digest() / ".storage-tmp.5678.manifest.json"
    old_temp.write_bytes(b"x" * 10)
    young_temp.write_bytes(b"y")
    old = time.time() - 3 * HOUR
    os.utime(old_temp, (old, old))
    report = cache.prune(uri)
    assert [(a.uri, a.bytes) for a in report.deleted] == [(f"file://{old_temp}", 10)]
    assert not old_temp.exists() and young_temp.exists()
    assert all(cc.pull(uri, k, tmp_path / k.kind).warnings == [] for k in (NEURON, INDUCTOR))


def test_prune_leaves_archives_of_an_unreadable_manifest(tmp_path):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    name = orphan(uri)
    storage.open_store(uri).put_bytes(f"{NEURON.digest()}/manifest.json", b"{broken")
    report = cache.prune(uri, now=time.time() + 2 * HOUR)
    assert report.deleted == [] and "unreadable manifest" in report.skipped[0]
    assert storage.open_store(uri).exists(f"{NEURON.digest()}/{name}")


def test_prune_refuses_negative_periods(tmp_path):
    with pytest.raises(InputError) as info:
        cache.prune(f"file://{tmp_path}/s", older_than_days=-1)
    assert "--older-than 30" in info.value.hint
    with pytest.raises(InputError) as info:
        cache.prune(f"file://{tmp_path}/s", grace_s=-1)
    assert "--grace-hours 1" in info.value.hint
    assert not (tmp_path / "s").exists()


def test_show_rejects_an_unusable_manifest(tmp_path):
    uri = f"file://{tmp_path}/store"
    storage.open_store(uri).put_bytes(f"{NEURON.digest()}/manifest.json", json.dumps({"schema": 7}).encode())
    with pytest.raises(BackendError, match="schema"):
        cache.show(uri, NEURON.digest())


@pytest.mark.parametrize("key", ["../x", ".", "..", "/", "/etc", "a/b", "k" * 256])
@pytest.mark.parametrize("scheme", ["file", "s3"])
def test_prune_and_show_refuse_a_key_that_is_not_one_folder_name(tmp_path, monkeypatch, capsys, key, scheme):
    # QA: `cache prune --key` with ../x, ., .., / or /etc was a ValueError traceback (exit 1);
    # `cache show` refused them. Both refuse before any store is read (s3: no endpoint needed).
    uri = f"file://{tmp_path}/store" if scheme == "file" else "s3://orchestrator-example-bucket/cc"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    for args in (["cache", "prune", uri, "--key", key], ["cache", "show", uri, key]):
        code, out, err = _cli(monkeypatch, capsys, *args)
        assert code == 2 and out == "" and "Traceback" not in err, err
        assert "bad cache key" in err and "a key is one folder name under the store" in err
        assert f"hint: use a key as `python -m orchestrator cache ls {uri}` shows it" in err


@pytest.mark.parametrize("command", [["cache", "ls"], ["cache", "prune"], ["cache", "show"]])
def test_a_store_path_with_a_name_too_long_is_exit_2(tmp_path, monkeypatch, capsys, command):
    uri = f"file://{tmp_path}/{'a' * 256}"
    code, out, err = _cli(monkeypatch, capsys, *command, uri, *(["key"] if command[1] == "show" else []))
    assert code == 2 and "Traceback" not in err
    assert err.startswith(f"error: bad cache URI {uri!r}: {tmp_path}/{'a' * 256}: File name too long")


def test_a_manifest_that_is_a_folder_is_named_not_blamed_on_credentials(tmp_path, monkeypatch, capsys):
    # QA: `cache show` when manifest.json was a folder said "check credentials and network".
    (tmp_path / "store" / "k1" / "manifest.json").mkdir(parents=True)
    code, out, err = _cli(monkeypatch, capsys, "cache", "show", f"file://{tmp_path}/store", "k1")
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.startswith(f"error: read file://{tmp_path}/store/k1/manifest.json: Is a directory: a folder stands "
                          "where the cache keeps a file\n")
    assert "credentials" not in err and "network" not in err
    assert "hint: the cache was changed by hand: move it away" in err


@pytest.mark.timeout(60)
def test_a_manifest_that_is_a_fifo_is_not_read(tmp_path, monkeypatch, capsys):
    import os

    (tmp_path / "store" / "k1").mkdir(parents=True)
    os.mkfifo(tmp_path / "store" / "k1" / "manifest.json")  # reading it would block for ever
    code, _, err = _cli(monkeypatch, capsys, "cache", "show", f"file://{tmp_path}/store", "k1")
    assert code == 1 and "something that is not a file stands where the cache keeps a file" in err


def test_ls_reports_its_progress_through_the_keys(tmp_path):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    seen = []
    _, keys = cache.list_keys(uri, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, len(keys)) for i in range(len(keys))] and keys


# Issue 32: prune deletes only what a push wrote, in keys whose manifest it can read, and asks.

def jobs_store(root: Path, age_s: float = 90 * 86400) -> list[Path]:
    """A jobs store and a folder of the user's files: nothing a compile cache holds."""
    files = [root / "jobs" / "j-1" / "output" / "model.tar.gz", root / "results" / "j-1" / "results.json",
             root / "photos" / "cat.jpg", root / "archives" / ("a" * 64 + ".tar")]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"user data")
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    return files


@pytest.mark.parametrize("options", [[], ["--older-than", "1"], ["--older-than", "0", "--grace-hours", "0"]])
def test_prune_refuses_a_prefix_that_is_no_compile_cache(tmp_path, monkeypatch, capsys, options):
    files = jobs_store(tmp_path / "store")
    code, out, err = _cli(monkeypatch, capsys, "cache", "prune", f"file://{tmp_path}/store", *options, "--yes")
    assert code == 2, (out, err)
    assert "is not a compile cache: none of its 4 folder(s) holds a compile-cache manifest" in err
    assert "nothing was deleted" in err
    assert all(path.read_bytes() == b"user data" for path in files)


def test_prune_on_s3_refuses_a_jobs_prefix(moto_bucket, monkeypatch, capsys):
    store = storage.open_store(f"s3://{moto_bucket}/jobs")
    for key in ("j-1/output/model.tar.gz", "results/j-1/results.json", "j-1/source/sourcedir.tar.gz"):
        store.put_bytes(key, b"x")
    with pytest.raises(InputError, match="is not a compile cache"):
        cache.prune(f"s3://{moto_bucket}/jobs", older_than_days=0, grace_s=0, now=time.time() + 86400)
    assert len(store.list()) == 3


def test_prune_leaves_folders_and_files_that_are_not_ours_in_a_cache(tmp_path, monkeypatch, capsys):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    files = jobs_store(tmp_path / "store")
    stray = tmp_path / "store" / NEURON.digest() / "notes.txt"
    stray.write_text("mine")
    forged = tmp_path / "store" / "forged"
    forged.mkdir()
    (forged / cc.MANIFEST).write_bytes((tmp_path / "store" / NEURON.digest() / cc.MANIFEST).read_bytes())
    (forged / "archives").mkdir()
    (forged / "archives" / ("b" * 64 + ".tar")).write_bytes(b"x")
    report = cache.prune(uri, older_than_days=0, grace_s=0, now=time.time() + 86400)
    deleted = {a.uri.removeprefix(uri + "/").split("/")[0] for a in report.deleted}
    assert deleted == {NEURON.digest(), INDUCTOR.digest()}
    assert all(path.exists() for path in files) and stray.read_text() == "mine"
    assert (forged / "archives" / ("b" * 64 + ".tar")).exists()  # its manifest names another key
    assert any("forged/: not a compile-cache key (its manifest names another cache key)" in n for n in report.skipped)
    with pytest.raises(InputError, match="is not a compile-cache key"):
        cache.prune(uri, key="photos")


def test_prune_asks_and_off_a_terminal_needs_yes(tmp_path, monkeypatch, capsys):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    name = orphan(uri)
    code, out, err = _cli(monkeypatch, capsys, "cache", "prune", uri, "--grace-hours", "0")
    assert code == 2 and f"will delete {uri}/{NEURON.digest()}/{name}" in out
    assert "nothing was deleted: confirm with --yes" in err
    assert storage.open_store(uri).exists(f"{NEURON.digest()}/{name}")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("typer.confirm", lambda *a, **k: False)
    code, out, err = _cli(monkeypatch, capsys, "cache", "prune", uri, "--grace-hours", "0")
    assert code == 1 and "nothing deleted" in err
    assert storage.open_store(uri).exists(f"{NEURON.digest()}/{name}")
    monkeypatch.setattr("typer.confirm", lambda *a, **k: True)
    code, out, err = _cli(monkeypatch, capsys, "cache", "prune", uri, "--grace-hours", "0")
    assert code == 0 and "deleted 1 object(s)" in out
    assert not storage.open_store(uri).exists(f"{NEURON.digest()}/{name}")


def test_prune_deletes_only_what_the_user_confirmed(tmp_path):
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    name = orphan(uri)
    other = orphan(uri, INDUCTOR)
    report = cache.prune(uri, grace_s=0, only={f"{uri}/{NEURON.digest()}/{name}"})
    assert [a.uri for a in report.deleted] == [f"{uri}/{NEURON.digest()}/{name}"]
    assert storage.open_store(uri).exists(f"{INDUCTOR.digest()}/{other}")


def test_ls_and_show_fit_the_columns_asked(tmp_path, monkeypatch, capsys):
    # Issue 32: `cache ls` and `cache show` drew 120 columns whatever COLUMNS said.
    uri = f"file://{tmp_path}/store"
    populate(uri, tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    for args in (["ls", uri], ["show", uri, NEURON.digest()]):
        code, out, err = _cli(monkeypatch, capsys, "cache", *args)
        assert code == 0, err
        table = [line for line in out.splitlines() if not line.startswith(("key:", "manifest:", "  ", "updated:"))]
        assert max(len(line) for line in table) <= 80, out
    code, out, _ = _cli(monkeypatch, capsys, "cache", "ls", uri)
    # A key too long for its column breaks after a separator: its hex part stays whole.
    assert NEURON.digest().rsplit("-", 1)[1] in out and NEURON.digest().rsplit("-", 1)[0] in out
