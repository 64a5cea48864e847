"""entrypoints.shared.atomic: the one atomic-write helper of both sides."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from entrypoints.shared import atomic


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it after."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_gets_the_mode_open_would(tmp_path, umask, mask, mode):
    umask(mask)
    target = atomic.write_text(tmp_path / "new.yaml", "a: 1\n")
    assert target == tmp_path / "new.yaml"
    assert target.stat().st_mode & 0o777 == mode
    assert target.read_text() == "a: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["new.yaml"]  # no temp file left


def test_an_existing_file_keeps_its_mode_and_mode_can_be_forced(tmp_path, umask):
    umask(0o077)
    target = tmp_path / "kept.json"
    target.write_bytes(b"old")
    target.chmod(0o640)
    atomic.write_bytes(target, b"new")
    assert target.stat().st_mode & 0o777 == 0o640 and target.read_bytes() == b"new"
    atomic.write_bytes(tmp_path / "memo.json", b"{}", mode=0o644)  # readable by others whatever the umask
    assert (tmp_path / "memo.json").stat().st_mode & 0o777 == 0o644


def test_a_symlink_is_written_through_as_open_would(tmp_path, umask):
    umask(0o022)
    elsewhere = tmp_path / "shared" / "infra.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("old: 1\n")
    elsewhere.chmod(0o640)
    link = tmp_path / "sl" / "infra.yaml"
    link.parent.mkdir()
    link.symlink_to(Path("..") / "shared" / "infra.yaml")  # relative, as `ln -s` users make them
    assert atomic.write_text(link, "new: 2\n") == link
    assert link.is_symlink() and link.resolve() == elsewhere.resolve()
    assert elsewhere.read_text() == "new: 2\n" and elsewhere.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in elsewhere.parent.iterdir()) == ["infra.yaml"]
    assert sorted(p.name for p in link.parent.iterdir()) == ["infra.yaml"]
    # A link whose target does not exist yet: open() would create the target, so do we.
    dangling = tmp_path / "sl" / "new.yaml"
    dangling.symlink_to(elsewhere.parent / "new.yaml")
    atomic.write_bytes(dangling, b"x")
    assert dangling.is_symlink() and (elsewhere.parent / "new.yaml").read_bytes() == b"x"
    assert (elsewhere.parent / "new.yaml").stat().st_mode & 0o777 == 0o644


def test_without_following_symlinks_the_link_itself_is_replaced(tmp_path, umask):
    umask(0o022)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    link = tmp_path / "store" / "manifest.json"
    link.parent.mkdir()
    link.symlink_to(outside)
    atomic.write_bytes(link, b"{}", follow_symlinks=False)
    assert not link.is_symlink() and link.read_bytes() == b"{}"
    assert link.stat().st_mode & 0o777 == 0o644  # a new file's mode, not the link's 0777
    assert outside.read_text() == "precious"


def _special_targets(tmp_path) -> dict:
    """Things a write must not replace: name -> (path, how to tell it is intact)."""
    found = {}
    os.mkfifo(tmp_path / "fifo")
    found["fifo"] = (tmp_path / "fifo", lambda p: stat.S_ISFIFO(os.lstat(p).st_mode))
    (tmp_path / "folder").mkdir()
    found["folder"] = (tmp_path / "folder", lambda p: p.is_dir())
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    found["socket"] = (tmp_path / "sock", lambda p: stat.S_ISSOCK(os.lstat(p).st_mode))
    (tmp_path / "link").symlink_to(tmp_path / "fifo")  # followed: the FIFO would be replaced
    found["link-to-fifo"] = (tmp_path / "link", lambda p: stat.S_ISFIFO(os.stat(p).st_mode) and p.is_symlink())
    if os.geteuid() == 0:  # our own device node (never /dev/null: a failing test would replace it)
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        found["char-device"] = (tmp_path / "null", lambda p: stat.S_ISCHR(os.lstat(p).st_mode))
    return found


def test_what_is_not_a_regular_file_is_never_replaced(tmp_path):
    for name, (target, intact) in _special_targets(tmp_path).items():
        with pytest.raises(atomic.NotRegularFile) as info:
            atomic.write_text(target, "data")
        assert isinstance(info.value, OSError) and "not a regular file" in info.value.strerror, name
        assert info.value.filename == str(target), name
        assert intact(target), name
    assert _leftovers(tmp_path) == []


def test_something_made_at_the_path_while_writing_is_not_replaced(tmp_path):
    target = tmp_path / "out.png"
    with pytest.raises(atomic.NotRegularFile), atomic.replacing(target) as handle:
        handle.write(b"png")
        os.mkfifo(target)
    assert stat.S_ISFIFO(os.lstat(target).st_mode) and _leftovers(tmp_path) == []


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic.replacing(target) as handle:
        handle.write(b"half")
        raise RuntimeError("killed midway")
    assert target.read_text() == "old" and _leftovers(tmp_path) == []


def test_the_destination_never_shows_a_part_and_each_writer_has_its_own_temporary(tmp_path):
    target = tmp_path / "status.json"
    target.write_text("old")
    with atomic.replacing(target) as first, atomic.replacing(target) as second:
        first.write(b"first")
        second.write(b"second")
        assert target.read_text() == "old"  # nothing visible before the rename
        temps = _leftovers(tmp_path)
        assert len(temps) == 2 and all(name.startswith(".status.json.") for name in temps)
    assert target.read_text() == "first"  # the last to leave its block wins, whole
    assert _leftovers(tmp_path) == []


def test_concurrent_writers_each_publish_a_whole_document(tmp_path):
    target = tmp_path / "status.json"
    seen: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            with open(target) as handle:
                seen.append(handle.read())

    atomic.write_json(target, {"writer": -1, "pad": "x" * 50_000})
    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=lambda n=n: [atomic.write_json(target, {"writer": n, "pad": "x" * 50_000},
                                                                     durable=False) for _ in range(20)])
               for n in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert seen and all(json.loads(text)["pad"] == "x" * 50_000 for text in seen)
    assert _leftovers(tmp_path) == []


def test_durable_writes_fsync_the_file_and_the_folder_and_others_do_not(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def record(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    atomic.write_bytes(tmp_path / "ledger.json", b"1")
    assert synced == ["file", "folder"]
    synced.clear()
    atomic.write_bytes(tmp_path / "beat.json", b"2", durable=False)
    assert synced == []


def test_a_temporary_prefix_and_a_staging_folder_keep_the_temporary_out_of_sight(tmp_path):
    checkpoints, staging = tmp_path / "checkpoints", tmp_path / ".checkpoints.partial"
    with atomic.replacing(checkpoints / "ckpt-000000010.pt", staging=staging, temp_prefix="tmp") as handle:
        handle.write(b"weights")
        assert not checkpoints.exists() or list(checkpoints.iterdir()) == []  # only the finished file appears
        [temp] = staging.iterdir()
        assert temp.name.startswith("tmp") and temp.name.endswith(".tmp")
    assert [p.name for p in checkpoints.iterdir()] == ["ckpt-000000010.pt"]
    assert (checkpoints / "ckpt-000000010.pt").read_bytes() == b"weights" and list(staging.iterdir()) == []


def test_a_staging_folder_on_another_file_system_falls_back_to_a_temporary_beside(tmp_path, monkeypatch):
    staging, target = tmp_path / "staging", tmp_path / "dest" / "ckpt.pt"
    real_replace = os.replace

    def cross_device(src, dst):
        if Path(src).parent == staging:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", cross_device)
    atomic.write_bytes(target, b"weights", staging=staging)
    assert target.read_bytes() == b"weights"
    assert list(staging.iterdir()) == [] and _leftovers(target.parent) == []


def test_write_json_is_sorted_indented_and_ends_with_a_newline(tmp_path):
    atomic.write_json(tmp_path / "a.json", {"b": 1, "a": [1, 2]})
    assert (tmp_path / "a.json").read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    atomic.write_json(tmp_path / "b.json", {"b": 1, "a": 2}, indent=None)
    assert (tmp_path / "b.json").read_text() == '{"a": 2, "b": 1}\n'


def test_current_umask_without_proc_reads_and_restores_it(umask, monkeypatch):
    import builtins

    real_open = builtins.open

    def no_proc(file, *args, **kwargs):
        if str(file).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(file))
        return real_open(file, *args, **kwargs)

    umask(0o027)
    monkeypatch.setattr(builtins, "open", no_proc)
    assert atomic.current_umask() == 0o027
    assert os.umask(0o027) == 0o027  # unchanged by the read


def test_not_a_file_names_what_stands_there(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    (tmp_path / "plain").write_text("")
    assert atomic.not_a_file(tmp_path / "fifo") == "a FIFO (named pipe)"
    assert atomic.not_a_file(tmp_path / "link") == "a FIFO (named pipe)"
    assert atomic.not_a_file(tmp_path / "link", follow_symlinks=False) is None
    assert atomic.not_a_file(tmp_path) == "a folder"
    assert atomic.not_a_file(tmp_path / "plain") is None and atomic.not_a_file(tmp_path / "absent") is None


def test_the_handle_names_its_temporary_file(tmp_path):
    with atomic.replacing(tmp_path / "model.pt") as handle:
        assert Path(handle.name).parent == tmp_path and Path(handle.name).name.startswith(".model.pt.")
        assert Path(handle.name).exists() and not (tmp_path / "model.pt").exists()
