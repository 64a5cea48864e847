"""TensorBoard: rank 0's scalars, the request's TensorBoardOutputConfig, the local backend's
upload, and `orchestrator tensorboard` collecting a sweep's runs into one folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_harness import run_cli
from job_waits import patience

from entrypoints.trainer import scalars as scalars_module
from orchestrator.results import tensorboard as boards
from orchestrator.results.rows import Row

ROOT = Path(__file__).resolve().parents[1]


def _tags(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalar tag -> [(step, value)] of the event files in `folder`, as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_rank_0_writes_loss_step_time_samples_and_learning_rate(tmp_path):
    from test_train import Job, tiny_spec

    job = Job(tmp_path, tiny_spec())
    done = job.run(extra_env={"SM_OUTPUT_DIR": str(tmp_path / "out")})
    assert done.returncode == 0, done.stderr
    tags = _tags(tmp_path / "out" / "tensorboard")
    assert set(tags) == set(scalars_module.SCALARS.values())
    assert [step for step, _ in tags["train/loss"]] == [2, 4, 6]  # the log lines' cadence
    assert tags["train/loss"][-1][1] == pytest.approx(job.rank_stats()["final_loss"], rel=1e-4)
    assert tags["train/learning_rate"][0][1] == pytest.approx(tiny_spec()["training"]["optimizer"]["lr"])
    assert all(value > 0 for _, value in tags["train/samples_per_s"] + tags["train/step_time_s"])
    assert job.rank_stats()["warnings"] == []


def test_without_the_tensorboard_package_the_job_warns_and_trains(tmp_path):
    from test_train import Job, tiny_spec

    blocker = tmp_path / "blocker"
    blocker.mkdir()
    # A `tensorboard` that cannot be imported, ahead of the real one on the path.
    (blocker / "tensorboard").mkdir()
    (blocker / "tensorboard" / "__init__.py").write_text("raise ImportError('no tensorboard here')\n")
    job = Job(tmp_path, tiny_spec())
    done = job.run(extra_env={"SM_OUTPUT_DIR": str(tmp_path / "out"),
                              "PYTHONPATH": f"{blocker}:{job.env['PYTHONPATH']}"})
    assert done.returncode == 0, done.stderr
    stats = job.rank_stats()
    assert stats["steps_done"] == 6 and len(stats["warnings"]) == 1
    assert stats["warnings"][0].startswith("TensorBoard scalars not written")
    assert "WARNING TensorBoard scalars not written" in done.stdout


def test_scalars_never_raise_when_writing_fails(tmp_path):
    class Broken:
        def add_scalar(self, *args):
            raise OSError(28, "No space left on device")

    board = scalars_module.Scalars(Broken())
    board.add(1, loss=1.0)
    board.add(2, loss=0.5)  # nothing more is tried
    assert board.writer is None and "No space left" in board.warning


def test_the_request_sets_tensorboard_output_under_the_output_prefix(orch_home):
    from orchestrator import request, spec

    loaded = spec.load(ROOT / "configs" / "vit-trn1-2xlarge.yaml")
    prepared = request.prepare(loaded)
    assert prepared.request["TensorBoardOutputConfig"] == {
        "LocalPath": "/opt/ml/output/tensorboard",
        "S3OutputPath": f"s3://orchestrator-example-bucket/jobs/tensorboard/{prepared.job_name}"}
    local = request.prepare(spec.load(ROOT / "configs" / "local-tiny.yaml"))
    assert local.request["TensorBoardOutputConfig"]["S3OutputPath"] == \
        f"file://{orch_home}/store/jobs/tensorboard/{local.job_name}"


def test_run_names_say_what_the_trial_varied():
    rows = [Row(job="s-1a2b3c4d-t1", status="completed", varied={"training.optimizer.lr": 0.001,
                                                                  "training.batch_size": 4}),
            Row(job="s-1a2b3c4d-t2", status="completed", varied={"training.optimizer.lr": 0.0001,
                                                                  "training.batch_size": 4}),
            Row(job="plain-job", status="completed")]
    assert boards.run_names(rows) == {"s-1a2b3c4d-t1": "lr=0.001,batch_size=4",
                                      "s-1a2b3c4d-t2": "lr=0.0001,batch_size=4", "plain-job": "plain-job"}
    same = [Row(job="a-1", status="completed", varied={"x": "/etc"}), Row(job="a-2", status="completed",
                                                                          varied={"x": "/etc"})]
    assert boards.run_names(same) == {"a-1": "x=_etc,a-1", "a-2": "x=_etc,a-2"}  # a retry: both kept, no path


def _stored(orch_home: Path, job: str, varied: dict, events: dict[str, bytes]) -> None:
    results = orch_home / "store" / "jobs" / "results" / job
    results.mkdir(parents=True)
    (results / "results.json").write_text(json.dumps({
        "schema": "orchestrator.results/v1", "job_name": job, "status": "completed", "backend": "local",
        "instance": {"type": "ml.trn1.2xlarge", "count": 1},
        "tags": {"orchestrator:job": job, "orchestrator:sweep": "lrs-1a2b3c4d"}, "varied": varied}))
    for name, data in events.items():
        path = orch_home / "store" / "jobs" / "tensorboard" / job / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_cli_fetches_one_run_per_job_and_prints_the_command(orch_home, tmp_path, monkeypatch, capsys):
    _stored(orch_home, "lrs-1a2b3c4d-t1", {"training.optimizer.lr": 0.001}, {"events.out.tfevents.1.a": b"one"})
    _stored(orch_home, "lrs-1a2b3c4d-t2", {"training.optimizer.lr": 0.01}, {"events.out.tfevents.2.a": b"two",
                                                                              "sub/events.out.tfevents.3": b"3"})
    folder = tmp_path / "boards"
    code, out, err = run_cli(monkeypatch, capsys, "tensorboard", "lrs-1a2b3c4d", "--dir", str(folder))
    assert code == 0, err
    assert out.strip() == f"tensorboard --logdir {folder}"
    assert (folder / "lr=0.001" / "events.out.tfevents.1.a").read_bytes() == b"one"
    assert (folder / "lr=0.01" / "sub" / "events.out.tfevents.3").read_bytes() == b"3"
    assert "lr=0.01: 2 file(s), 2 fetched" in err
    code, _, err = run_cli(monkeypatch, capsys, "tensorboard", "lrs", "--dir", str(folder))  # by name, again
    assert code == 0 and "lr=0.01: 2 file(s), 0 fetched" in err
    # One job alone: its run is named after it.
    code, out, err = run_cli(monkeypatch, capsys, "tensorboard", "lrs-1a2b3c4d-t1", "--dir", str(tmp_path / "one"))
    assert code == 0, err
    assert (tmp_path / "one" / "lr=0.001" / "events.out.tfevents.1.a").is_file()


def test_cli_unknown_sweep_is_exit_2(orch_home, monkeypatch, capsys):
    _stored(orch_home, "lrs-1a2b3c4d-t1", {}, {})
    code, _, err = run_cli(monkeypatch, capsys, "tensorboard", "nope-00000000")
    assert code == 2 and "no results for sweep nope-00000000" in err and "Traceback" not in err


@pytest.mark.slow
def test_a_local_job_writes_event_files_that_the_command_collects(orch_home, tmp_path):
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT), ORCHESTRATOR_HOME=str(orch_home))
    submit = subprocess.run([sys.executable, "-m", "orchestrator", "submit", "configs/local-tiny.yaml", "--wait"],
                            capture_output=True, text=True, timeout=patience(600), cwd=ROOT, env=env)
    assert submit.returncode == 0, submit.stdout[-2000:] + submit.stderr[-2000:]
    job = next(p.name for p in (orch_home / "store" / "jobs" / "results").iterdir())
    board = subprocess.run([sys.executable, "-m", "orchestrator", "tensorboard", job, "--dir", str(tmp_path / "tb")],
                           capture_output=True, text=True, timeout=patience(300), cwd=ROOT, env=env)
    assert board.returncode == 0, board.stderr
    assert board.stdout.strip() == f"tensorboard --logdir {tmp_path / 'tb'}"
    tags = _tags(tmp_path / "tb" / job)
    assert [step for step, _ in tags["train/loss"]] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("target", ["", "  "])
def test_an_empty_target_names_no_option_the_command_lacks(orch_home, monkeypatch, capsys, target):
    """Issue 22, smaller findings: `tensorboard ""` spoke of `--sweep`, which it has not."""
    code, out, err = run_cli(monkeypatch, capsys, "tensorboard", target, "--prefix", (orch_home / "s").as_uri())
    assert code == 2 and "empty" in err and "--sweep" not in err and out == ""
