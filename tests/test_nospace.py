"""A full disk named by its cause in the job's failure reason (issue 33, item 5): torch.save's
`RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos ...` hides the
ENOSPC behind it; the reason the launcher writes must say "No space left on device" and where."""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest

from entrypoints.launcher import failure
from entrypoints.shared import contract, nospace

TORCH_ERROR = "[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0"


class Statvfs:
    """os.statvfs of a file system with `free` blocks of 4 KiB left (for root and others)."""

    def __init__(self, real, free: int):
        self._real, self.f_bavail, self.f_bfree, self.f_frsize = real, free, free, 4096

    def __getattr__(self, name):
        return getattr(self._real, name)


def fill_disk(monkeypatch, free_blocks: int = 0) -> None:
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda path: Statvfs(real(path), free_blocks))


def test_torchs_hidden_enospc_on_a_full_disk_names_the_disk_in_the_failure_reason(tmp_path, monkeypatch):
    """train.py as torchrun runs it, saving the model onto a full disk: torch's error carries
    no errno (context dropped), the file system has no block left while the partial file is
    there; the rank's error and the failure file say so, with the path and the free bytes."""
    from test_train import Job, tiny_spec

    from entrypoints.trainer import train

    job = Job(tmp_path, tiny_spec(steps=2, warmup_steps=1))
    for name in ("PYTHONPATH", "SM_MODEL_DIR", "SM_CHECKPOINT_DIR", "SM_OUTPUT_DATA_DIR", "SM_CHANNELS"):
        monkeypatch.setenv(name, job.env[name])
    partial: list[bool] = []

    def save_on_a_full_disk(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04")
        fill_disk(monkeypatch)  # the write filled it
        partial.append(os.path.exists(handle.name))
        raise RuntimeError(TORCH_ERROR)

    monkeypatch.setattr(train.torch, "save", save_on_a_full_disk)
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(nospace.DiskFull):
            train.main(["--job", str(job.job), "--stats-dir", str(job.stats)])
    finally:
        signal.signal(signal.SIGTERM, before)
    monkeypatch.undo()
    assert partial == [True]
    error = job.rank_stats()["error"]
    assert error.startswith("DiskFull: [Errno 28] No space left on device: writing ")
    assert str(job.model / "model.pt") in error and "0 bytes free" in error
    assert list(job.model.iterdir()) == []  # no partial model left behind
    reason = failure.failure_reason({0: job.rank_stats()}, [], 1, None)
    ctr = contract.Contract.from_env(contract.sm_environment(tmp_path / "host", ["algo-1"], "algo-1", "", {}, []))
    failure.write_failure(ctr, f"algo-1: {reason}")
    assert ctr.failure_file.read_text().startswith("algo-1: rank 0: DiskFull: [Errno 28] No space left on device")


def test_enospc_in_the_chain_is_named_with_room_to_spare_after(tmp_path):
    """An error whose context is the OSError (what torch.save into a Python file raises): named
    by errno, whatever the free space says."""
    from entrypoints.trainer import train

    target = tmp_path / "ckpt" / "ckpt-000000002.pt"

    def save(obj, handle, *args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError(TORCH_ERROR)  # noqa: B904 - as torch does: the OSError is only the context

    import unittest.mock

    with unittest.mock.patch.object(train.torch, "save", save), pytest.raises(nospace.DiskFull) as caught:
        train.atomic_save({"w": 1}, target)
    assert caught.value.errno == errno.ENOSPC and str(target) in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert not target.parent.exists() or list(target.parent.iterdir()) == []


def test_another_error_with_room_left_is_not_called_a_full_disk(tmp_path, monkeypatch):
    from entrypoints.trainer import train

    def save(obj, handle, *args, **kwargs):
        raise RuntimeError(TORCH_ERROR)

    monkeypatch.setattr(train.torch, "save", save)
    fill_disk(monkeypatch, free_blocks=1 << 20)  # 4 GiB free
    with pytest.raises(RuntimeError) as caught:
        train.atomic_save({"w": 1}, tmp_path / "model.pt")
    assert not isinstance(caught.value, OSError)
    assert nospace.describe(ValueError("bad")) == "ValueError: bad"


def test_describe_names_enospc_behind_another_error():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/opt/ml/output/data/results.json")
        except OSError as exc:
            raise RuntimeError("could not write") from exc
    except RuntimeError as exc:
        described = nospace.describe(exc)
    assert described == ("RuntimeError: could not write (No space left on device: "
                         "/opt/ml/output/data/results.json)")
    # An OSError that says so already is not told twice.
    assert nospace.describe(OSError(errno.ENOSPC, "No space left on device")).count("No space") == 1


def test_a_workers_full_disk_line_reaches_the_reason_from_its_output():
    tail = ["OSError: [Errno 28] No space left on device", "",
            "During handling of the above exception, another exception occurred:", "",
            f"RuntimeError: {TORCH_ERROR}"]
    assert failure.failure_reason({}, tail, 1, None) == (
        f"torchrun exited with code 1: RuntimeError: {TORCH_ERROR} (No space left on device)")


def test_the_file_system_and_its_free_bytes(tmp_path, monkeypatch):
    fill_disk(monkeypatch, free_blocks=3)
    full = nospace.as_disk_full(RuntimeError(TORCH_ERROR), tmp_path / "not-yet" / "model.pt")
    assert full is not None and full.errno == errno.ENOSPC
    assert f"writing {tmp_path / 'not-yet' / 'model.pt'}" in str(full) and "12,288 bytes free" in str(full)
    assert nospace.mount_point(tmp_path).is_dir()
    assert json.dumps(str(full))  # a plain message, fit for the failure file
