"""paths.home(): ORCHESTRATOR_HOME is a folder we can create, or a clear input error."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import catalog, paths
from orchestrator.errors import InputError
from tests.cli_harness import run_cli

SPEC = Path(__file__).resolve().parents[1] / "configs" / "vit-trn1-2xlarge.yaml"


def test_home_is_created_when_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "a" / "b"))
    assert paths.home() == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()


def test_home_that_is_a_file_is_an_input_error_and_the_file_is_kept(tmp_path, monkeypatch):
    target = tmp_path / "not-a-folder"
    target.write_text("mine")
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(target))
    with pytest.raises(InputError) as info:
        paths.home()
    assert info.value.exit_code == 2
    assert info.value.message == f"ORCHESTRATOR_HOME={target} is a file, not a folder"
    assert info.value.hint == "point ORCHESTRATOR_HOME at a folder (it is created if missing)"
    assert target.read_text() == "mine"


def test_home_below_a_file_names_the_file(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(blocker / "home"))
    with pytest.raises(InputError) as info:
        paths.home()
    assert info.value.exit_code == 2
    assert f"ORCHESTRATOR_HOME={blocker / 'home'} cannot be created: {blocker} is a file" in info.value.message


def test_home_that_cannot_be_created_is_an_input_error(tmp_path, monkeypatch):
    # Root ignores permission bits, so the refusal is the file system's answer, faked.
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "locked"))
    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(InputError) as info:
        paths.home()
    assert info.value.exit_code == 2
    assert info.value.message == f"ORCHESTRATOR_HOME={tmp_path / 'locked'} cannot be created: permission denied"
    assert "folder you can write to" in info.value.hint


@pytest.mark.parametrize("args", [("validate", str(SPEC)), ("status", "foo"), ("sweep", "status", "x")])
def test_cli_with_home_a_file_exits_2_without_a_traceback(tmp_path, monkeypatch, capsys, args):
    target = tmp_path / "home-file"
    target.write_text("")
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(target))
    catalog.training_instance_types.cache_clear()  # so that validate reaches home() for the cache
    try:
        code, out, err = run_cli(monkeypatch, capsys, *args)
    finally:
        catalog.training_instance_types.cache_clear()
    assert code == 2
    assert f"error: ORCHESTRATOR_HOME={target} is a file, not a folder" in err
    assert "hint: point ORCHESTRATOR_HOME at a folder" in err
    assert "Traceback" not in err
    assert target.read_text() == ""


# --- write targets that are not regular files are never replaced ---------------------------


def _special_targets(tmp_path) -> dict:
    """Things a write must not replace, each made in tmp_path: name -> (path, how to tell it is intact)."""
    import os
    import socket
    import stat

    found = {}
    os.mkfifo(tmp_path / "fifo")
    found["fifo"] = (tmp_path / "fifo", lambda p: stat.S_ISFIFO(os.lstat(p).st_mode))
    (tmp_path / "folder").mkdir()
    found["folder"] = (tmp_path / "folder", lambda p: p.is_dir())
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    found["socket"] = (tmp_path / "sock", lambda p: stat.S_ISSOCK(os.lstat(p).st_mode))
    # A link to a FIFO: the write follows links, so it is the FIFO that would be replaced.
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    found["link-to-fifo"] = (tmp_path / "link", lambda p: stat.S_ISFIFO(os.stat(p).st_mode) and p.is_symlink())
    if os.geteuid() == 0:  # our own device node (never /dev/null: a failing test would replace it)
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        found["char-device"] = (tmp_path / "null", lambda p: stat.S_ISCHR(os.lstat(p).st_mode))
    return found


@pytest.mark.timeout(60)
def test_results_plot_onto_a_fifo_device_socket_or_folder_is_exit_2_and_leaves_it(tmp_path, monkeypatch, capsys,
                                                                                  orch_home):
    # QA: `results --plot FIFO` replaced the FIFO with a PNG and said "wrote"; as root
    # `--plot /dev/full` replaced the device node.
    for name, (target, intact) in _special_targets(tmp_path).items():
        code, out, err = run_cli(monkeypatch, capsys, "results", "--plot", str(target))
        assert code == 2 and "Traceback" not in err, (name, err)
        if target.is_symlink():  # issue 32: never written through a link, whatever it leads to
            assert err.startswith(f"error: --plot {target}: is a symbolic link") and "hint: give --plot the file" in err
        else:
            assert err.startswith(f"error: --plot {target}: is a") and "not a regular file; nothing was written" in err
            assert "hint: give --plot a new or regular file" in err
        assert intact(target), name


@pytest.mark.parametrize("code, start", [
    (28, "the disk is full: free some space there, or write elsewhere"),
    (30, "that file system is read-only: write elsewhere"),
    (13, "you may not write there: make it writable for you, or write elsewhere"),
    (5, "the disk reported an I/O error: check it, or write elsewhere"),
    (20, "check the path, or write elsewhere"),
    (99, "Write elsewhere"),
])
def test_write_hint_says_what_to_do_about_each_cause(code, start):
    assert paths.write_hint(OSError(code, "x"), "write elsewhere") == start


def test_a_file_where_the_sweeps_folder_goes_is_an_input_error_not_a_bug(orch_home, monkeypatch, capsys):
    """QA: `$ORCHESTRATOR_HOME/sweeps` being a file gave `internal error: FileExistsError`."""
    (orch_home / "sweeps").write_text("mine")
    (orch_home / "dangling").symlink_to(orch_home / "nowhere")
    sweep = Path(__file__).resolve().parents[1] / "configs" / "sweep-local.yaml"
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "run", str(sweep), "--detach")
    assert code == 2, err
    assert f"error: {orch_home / 'sweeps'} is a file, not a folder: the orchestrator keeps its sweeps there" in err
    assert "internal error" not in err and (orch_home / "sweeps").read_text() == "mine"
    with pytest.raises(InputError) as info:
        paths.home_folder("dangling")
    assert info.value.message.startswith(f"{orch_home / 'dangling'} is a link that leads to no folder")
    assert paths.home_folder("fresh") == orch_home / "fresh" and (orch_home / "fresh").is_dir()
    # The crontab's log folder is one too.
    from orchestrator.schedule import crontab

    (orch_home / "schedules").write_text("")
    with pytest.raises(InputError, match="schedules is a file, not a folder: the orchestrator keeps its schedules"):
        crontab.ensure_log_dir()


def _store_folder_cases(tmp_path):
    """(a file:// store root, the problem `folder_problem` names), each unusable as a folder."""
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    too_long = tmp_path / ("x" * 300)
    return [(a_file, f"{a_file} is not a folder"),
            (a_file / "below", None),  # below a file: does not exist yet, as the store sees it
            (too_long, f"{too_long}: File name too long"),
            (tmp_path / "new", None), (tmp_path, None)]


def test_a_file_store_is_checked_as_a_folder_by_cache_and_results_alike(tmp_path):
    """cache's store and results' prefix refuse the same roots in the same words: one check
    (`paths.folder_problem`) behind both, each naming its own argument before it."""
    from orchestrator import cache
    from orchestrator.results.read import check_prefix

    for root, problem in _store_folder_cases(tmp_path):
        assert paths.folder_problem(root) == problem
        uri = f"file://{root}"
        if problem is None:
            assert check_prefix(uri, "--prefix") == uri
            continue
        with pytest.raises(InputError) as by_cache:
            cache.open_cache(uri)
        with pytest.raises(InputError) as by_results:
            check_prefix(uri, "--prefix")
        assert by_cache.value.message == f"bad cache URI {uri!r}: {problem}"
        assert by_results.value.message == f"--prefix {uri!r}: {problem}"
        assert "(a folder)" in by_cache.value.hint and "(a folder)" in by_results.value.hint
        assert by_cache.value.exit_code == by_results.value.exit_code == 2
