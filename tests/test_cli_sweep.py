"""The `sweep` commands (`cli/sweep.py`): status, resume and stop of a saved sweep, SIGTERM to a runner,
the tables."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_harness import run_cli
from job_waits import patience
from sweep_fakes import (
    LOCAL_BASE,
    ROOT,
    cli_run,
    invoke,
    load,
    local_sweep,
    problems_of,
    sweep_stop,
    write,
)

from orchestrator import spec
from orchestrator import sweep as sweeps
from orchestrator.errors import BackendError, InputError, SpecError
from orchestrator.ledger import Ledger
from orchestrator.sweep.router import Router

# --- the command line: status, resume and stop of a saved sweep ----------------------------------


def test_a_sweep_file_names_its_saved_sweep_or_its_scheduled_ticks(tmp_path, orch_home):
    from datetime import datetime, timezone


    path = write(tmp_path, "sweep: nightly\nbase: base.yaml\n")
    ledger = Ledger()
    with pytest.raises(InputError) as info:
        sweeps.find_sweep(ledger, str(path))  # never run
    assert info.value.message.startswith(f"{path}: no saved sweep nightly-")
    assert "edited since it ran" in info.value.message and f"sweep run {path}" in info.value.hint
    tick = sweeps.save(sweeps.plan(spec.load_sweep(path), tick=datetime(2026, 11, 30, 2, 39, tzinfo=timezone.utc)),
                       ledger)
    assert tick.sweep_id.endswith("-202611300239")
    assert sweeps.find_sweep(ledger, str(path)) == tick.sweep_id  # what `sweep status nightly.yaml` shows
    later = sweeps.save(sweeps.plan(spec.load_sweep(path), tick=datetime(2026, 12, 1, 2, 39, tzinfo=timezone.utc)),
                        ledger)
    with pytest.raises(InputError) as info:
        sweeps.find_sweep(ledger, str(path))
    assert info.value.exit_code == 2 and info.value.message.startswith(f"{path}: ")
    assert tick.sweep_id in info.value.message and later.sweep_id in info.value.message
    path.write_text("sweep: nightly\nbase: base.yaml\ngrid: {training.batch_size: [8]}\n")  # edited since
    with pytest.raises(InputError) as info:
        sweeps.find_sweep(ledger, str(path))
    assert "no saved sweep" in info.value.message and "edited since it ran" in info.value.message
    assert tick.sweep_id in info.value.hint and later.sweep_id in info.value.hint


def test_a_missing_sweep_file_says_what_to_give_instead(orch_home):

    with pytest.raises(SpecError) as info:
        sweeps.find_sweep(Ledger(), "nope.yaml")
    assert info.value.message == "nope.yaml: does not exist" and info.value.exit_code == 2
    assert info.value.hint.endswith("give a sweep id or name instead (`python -m orchestrator sweep status` lists the sweeps)")


@pytest.mark.parametrize("stopped", [True, False])
def test_sigterm_ends_a_runner_like_a_stop_it_noticed(rig, monkeypatch, capsys, stopped):
    """`sweep stop` from another terminal sets the stop flag, then SIGTERMs this machine's
    runner: it ends cleanly (counts, "stopped", exit 0); a SIGTERM alone exits 143."""
    import os
    import signal

    import typer

    from orchestrator.cli import sweep as cli

    make, cloud, _ = rig
    runner = make()
    monkeypatch.setattr("orchestrator.actions.sweeps.sweep_backend", lambda definition, ledger: Router.of(cloud, definition.backends))
    real_status = cloud.status

    def status(name):  # the runner polls its jobs in flight: the signal comes now
        if stopped:
            sweeps.request_stop(runner.ledger, runner.d.sweep_id)
        os.kill(os.getpid(), signal.SIGTERM)
        return real_status(name)

    cloud.status = status

    def fallback(signum, frame):  # without the runner's own handler, SIGTERM would end pytest
        raise AssertionError("SIGTERM reached the default handler")

    previous = signal.signal(signal.SIGTERM, fallback)
    try:
        if stopped:
            cli.drive(runner.d, runner.ledger, poll=5)
        else:
            with pytest.raises(typer.Exit) as info:
                cli.drive(runner.d, runner.ledger, poll=5)
            assert info.value.exit_code == 143
        assert signal.getsignal(signal.SIGTERM) is fallback  # put back as it was
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = capsys.readouterr()
    assert f"sweep {runner.d.sweep_id}: 2 planned, 2 submitted" in out.out
    if stopped:
        assert "stopped (sweep stop)" in out.out and out.err == ""
    else:
        assert "stopped (sweep stop)" not in out.out
        assert f"terminated (SIGTERM); continue with `python -m orchestrator sweep resume {runner.d.sweep_id}`" in out.err


def test_cli_sweep_stop_from_another_terminal_ends_a_foreground_run_cleanly(
        tmp_path, orch_home, fake_train, monkeypatch):
    """The QA case: `sweep run` in a terminal (rich's live table), `sweep stop` from another
    one: the run ends with exit 0, says it was stopped, and shows the cursor again."""
    import os
    import pty
    import threading
    import time

    from orchestrator.backends.local import LocalBackend

    monkeypatch.setenv("FAKE_TRAIN_SLEEP", "60")
    path, definition = local_sweep(tmp_path, "[4, 8, 16]")
    env = dict(os.environ, ORCHESTRATOR_HOME=str(orch_home), TERM="xterm-256color")
    master, slave = pty.openpty()
    run = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "run", str(path), "--poll", "0.2"],
                           stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    chunks: list[bytes] = []

    def drain():  # a terminal that is not read from would block the live display
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    ledger = Ledger()
    try:
        deadline = time.monotonic() + patience(90)
        while sum(e.status in ("submitted", "running") for e in ledger.entries(sweep_id=definition.sweep_id)) < 2:
            assert run.poll() is None and time.monotonic() < deadline, b"".join(chunks).decode(errors="replace")
            time.sleep(0.2)
        stopped = cli_run("sweep", "stop", definition.sweep_id, env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert "2 job(s) stopping, 1 trial(s) cancelled" in stopped.stdout
        assert run.wait(timeout=patience(30)) == 0, b"".join(chunks).decode(errors="replace")
    finally:
        run.kill()
        reader.join(timeout=patience(5))
        os.close(master)
    output = b"".join(chunks).decode(errors="replace")
    assert "stopped (sweep stop)" in output
    assert output.rfind("\x1b[?25h") > output.rfind("\x1b[?25l") >= 0  # the cursor is shown again
    backend = LocalBackend(ledger=ledger)
    deadline = time.monotonic() + patience(60)
    for entry in ledger.entries(sweep_id=definition.sweep_id, statuses=("stopped",)):
        if (backend.job_dir(entry.job_name) / "status.json").exists():
            while backend.status(entry.job_name).status != "stopped":
                assert time.monotonic() < deadline, f"{entry.job_name} did not stop"
                time.sleep(0.5)


HOLD_RUNNER_LOCK = """
import os, signal, sys, time
from orchestrator import sweep as sweeps
from orchestrator.ledger import Ledger
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with sweeps.runner_lock(sys.argv[1]):
    sweeps.record_runner(Ledger(), sys.argv[1], os.getpid())
    print("holding", flush=True)
    time.sleep(120)
"""


def _runner_stand_in(sweep_id: str, on_sigterm: str) -> subprocess.Popen:
    """A process holding the sweep's runner lock, recorded as its runner, as `sweep run` is."""
    import os

    holder = subprocess.Popen([sys.executable, "-c", HOLD_RUNNER_LOCK, sweep_id, on_sigterm], stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_cli_stop_with_no_wait_still_waits_briefly_for_the_runner_it_signalled(tmp_path, orch_home, monkeypatch):

    _, definition = local_sweep(tmp_path)
    holder = _runner_stand_in(definition.sweep_id, "exit")
    try:
        done = invoke("sweep", "stop", definition.sweep_id, "--wait", "0")
        assert done.exit_code == 0, (done.output, done.exception)
        assert "0 job(s) stopping, 2 trial(s) cancelled" in done.output
        assert holder.wait(timeout=patience(10)) == -15
    finally:
        holder.kill()
    # A runner that does not exit in time: exit 1, saying so, and what running it again does.
    monkeypatch.setattr(sweeps.process, "RUNNER_EXIT_SECONDS", 0.5)
    holder = _runner_stand_in(definition.sweep_id, "ignore")
    try:
        done = invoke("sweep", "stop", definition.sweep_id, "--wait", "0")
    finally:
        holder.kill()
    assert isinstance(done.exception, BackendError) and done.exception.exit_code == 1
    assert f"runner (pid {holder.pid}) was sent SIGTERM but has not exited after 0.5s" in done.exception.message
    assert "the stop flag is set" in done.exception.hint and "once it has exited" in done.exception.hint


def test_cli_stop_of_a_sweep_with_nothing_in_flight_gives_no_resume_advice(tmp_path, orch_home):
    _, definition = local_sweep(tmp_path)
    ledger = Ledger()
    for entry in ledger.entries(sweep_id=definition.sweep_id):
        ledger.transition(entry.job_name, "completed")
    done = invoke("sweep", "stop", definition.sweep_id)
    assert done.exit_code == 0, (done.output, done.exception)
    assert f"sweep {definition.sweep_id}: nothing in flight, nothing stopped: every trial has ended" in done.output
    assert "resume" not in done.output and "job(s) stopping" not in done.output


def test_cli_stop_says_when_a_resume_would_run_nothing(rig, monkeypatch):
    # The budget leaves no room to resubmit the stopped job: no "continue it with resume".

    make, cloud, _ = rig
    runner = make("sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 2}\n")
    runner.step()
    monkeypatch.setattr("orchestrator.actions.sweeps.sweep_backend", lambda definition, ledger: Router.of(cloud, definition.backends))
    done = invoke("sweep", "stop", runner.d.sweep_id)
    assert done.exit_code == 0, (done.output, done.exception)
    assert "1 job(s) stopping" in done.output and "a resume would run nothing (budget or retries used up" in done.output
    assert "continue it with" not in done.output
    roomy = make("sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 100}\n"
                 "grid:\n  training.batch_size: [16, 32]\n")
    roomy.step()
    done = invoke("sweep", "stop", roomy.d.sweep_id)
    assert f"continue it with `python -m orchestrator sweep resume {roomy.d.sweep_id}`" in done.output


def test_the_runner_says_whether_a_step_would_act(rig):
    make, cloud, _ = rig
    # One trn1.2xlarge hour is bounded at about 2.02 USD: the stopped job's bound is spent, no room for another.
    text = "sweep: demo\nbase: base.yaml\nbudget: {max_total_cost_usd: 2}\n"
    runner = make(text)
    assert runner.has_work()  # planned
    runner.step()
    assert runner.has_work()  # in flight
    [job] = cloud.jobs
    sweep_stop(runner)
    sweeps.clear_stop(runner.ledger, runner.d.sweep_id)
    assert not runner.has_work()  # its resubmission is above the budget...
    assert runner.step().done and list(cloud.jobs) == [job]  # ...and the runner indeed does nothing
    roomy = make(text.replace(": 2}", ": 10}"))  # the same sweep with a raised budget
    assert roomy.d.sweep_id == runner.d.sweep_id and roomy.has_work()
    roomy.step()
    assert sorted(cloud.jobs) == [job, job + "-r1"]
    cloud.stop(job + "-r1")  # `orchestrator stop JOB`: not the sweep's stop
    roomy.step()
    [view] = roomy.views()
    assert view.status == "stopped" and not roomy.has_work()
    assert roomy.step().done and len(cloud.jobs) == 2


def test_cli_detach_with_nothing_the_runner_would_do_starts_no_background_runner(tmp_path, orch_home):
    import os

    path, definition = local_sweep(tmp_path)
    ledger = Ledger()
    first, second = (e.job_name for e in ledger.entries(sweep_id=definition.sweep_id))
    ledger.transition(first, "completed")
    ledger.transition(second, "stopped", detail="stopped by the user")  # `orchestrator stop JOB`
    done = cli_run("sweep", "run", str(path), "--detach", env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert "running in the background" not in done.stdout
    assert f"sweep {definition.sweep_id}: 1 completed, 1 stopped" in done.stdout
    assert not (orch_home / "sweeps" / f"{definition.sweep_id}.log").exists()


def test_resume_help_says_in_plain_words_what_it_submits_again():
    from orchestrator.cli import sweep as cli
    from orchestrator.cli.output import reflowed

    text = reflowed(cli.sweep_resume.__doc__)
    assert "stop cancelled are" not in text
    assert "Trials that `sweep stop` cancelled before submission are submitted under their own names" in text


def _column(table: str, index: int) -> str:
    """The text of a rendered table's body column `index`, its lines joined (the tables have
    rules between columns, none at the edges)."""
    lines = table.splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("─")) + 1:]
    cells = [line.split("│")[index].strip() for line in body if line.count("│") >= max(index, 1)]
    return "".join(cells)


def test_sweep_tables_fold_long_job_names_and_overrides_instead_of_cutting_them(tmp_path, orch_home, monkeypatch):
    from orchestrator.cli import sweep as cli

    monkeypatch.setenv("COLUMNS", "60")
    lr = "training.optimizer.lr"
    text = ("sweep: a-rather-long-sweep-name-for-the-nightly-comparison\nbase: base.yaml\n"
            f"grid:\n  training.batch_size: [16, 32]\n  {lr}: [0.000123456, 0.000654321]\n"
            "  training.warmup_steps: [5, 7]\n")
    planned = sweeps.plan(load(tmp_path, text))
    table = cli.plan_table(planned)
    assert "…" not in table
    assert _column(table, 1) == "".join(t.job_name for t in planned.trials)
    # One override per line: the column's lines joined are the overrides run together.
    overrides = "".join("".join(f"{k}={v}" for k, v in t.trial.overrides.items()) for t in planned.trials)
    assert _column(table, 2) == overrides.replace(" ", "")
    sweeps.save(planned, Ledger())
    shown = invoke("sweep", "status", planned.sweep_id, "--no-refresh")
    assert shown.exit_code == 0, (shown.output, shown.exception)
    assert "…" not in shown.output
    assert max(len(line) for line in [*table.splitlines(), *shown.output.splitlines()]) <= 60  # fits $COLUMNS
    assert _column(shown.output, 2) == "".join(t.job_name for t in planned.trials)
    assert _column(shown.output, 6) == overrides.replace(" ", "")


@pytest.mark.parametrize("command", ["status", "resume", "stop"])
@pytest.mark.parametrize("name", ["a" * 256, "a" * 300 + ".yaml", "x/" + "b" * 256])
def test_a_sweep_name_too_long_for_the_file_system_is_exit_2(orch_home, monkeypatch, capsys, command, name):
    # QA: any name of 256 or more characters reaching the file system was an ENAMETOOLONG traceback.

    code, out, err = run_cli(monkeypatch, capsys, "sweep", command, name)
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert err.startswith("error: ") and "\nhint: " in err


def test_a_huge_grid_value_is_shortened_in_messages(tmp_path):
    # A 200 KB value was repeated whole in the error that refused it.
    text = f"sweep: demo\nbase: base.yaml\ngrid:\n  training.optimizer.lr: [\"{'9' * 5000}x\"]\n"
    [problem] = problems_of(tmp_path, text)
    assert f"training.optimizer.lr={'9' * 57}... (5001 characters)" in problem.message
    assert len(problem.message) < 300


@pytest.mark.timeout(60)
def test_detach_refuses_a_sweep_log_that_is_a_fifo_instead_of_blocking(tmp_path, orch_home, monkeypatch, capsys):
    import os


    path = write(tmp_path, "sweep: piped\nbase: base.yaml\ngrid:\n  training.batch_size: [4]\n", LOCAL_BASE)
    definition = sweeps.save(sweeps.plan(spec.load_sweep(path)), Ledger())
    os.mkfifo(sweeps.log_path(definition.sweep_id))
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--detach")
    assert code == 2 and "the sweep's log" in err and "is a FIFO (named pipe), not a regular file" in err


def test_a_sweep_that_varies_nothing_is_planned_as_one_trial_and_says_so(orch_home, tmp_path, monkeypatch, capsys):
    """Issue 22 (smaller findings): accepted as one trial without a word. It stays accepted (one job
    with the sweep's retries, failover, budget or schedule is a use), and says what it is."""
    from cli_harness import run_cli
    from sweep_fakes import LOCAL_BASE, write

    path = write(tmp_path, "sweep: single\nbase: base.yaml\nmax_retries: 1\n", LOCAL_BASE)
    code, out, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path))
    assert code == 0, err
    assert ("note: sweep single varies nothing (no grid:, random: or variants:): it is one trial, its base base.yaml "
            "as it is, run with the sweep's retries, failover, budget and schedule") in err
    path = write(tmp_path, "sweep: two\nbase: base.yaml\ngrid: {training.batch_size: [4, 8]}\n", LOCAL_BASE)
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "plan", str(path))
    assert code == 0 and "varies nothing" not in err


def test_the_status_table_is_riches_layout_written_directly(monkeypatch):
    """`sweep status` writes its table itself (rich took most of a 1,000-trial status's time):
    the same text rich writes for the same columns, widths and cell lines, or None (rich then)
    when rich would lay it out otherwise."""
    import random

    from orchestrator.cli.output import grid_text, plain, table_text
    from orchestrator.cli.sweep import fitted_table

    monkeypatch.setenv("COLUMNS", "100")
    draw = random.Random(7)
    written = 0
    for n in range(200):
        columns = [f"c{i}" for i in range(draw.randint(1, 6))]
        widths = {c: draw.randint(2, 15) for c in columns}
        rows = [[["".join(draw.choice("ab-=. x") for _ in range(draw.randint(0, widths[c]))).strip()
                  for _ in range(draw.randint(0, 3))] for c in columns] for _ in range(draw.randint(0, 5))]
        table = fitted_table(plain(f"sweep s{n}"))
        for c in columns:
            table.add_column(c, overflow="fold", width=widths[c])
        for row in rows:
            table.add_row(*(plain("\n".join(lines)) for lines in row))
        mine = grid_text(f"sweep s{n}", columns, widths, rows)
        if mine is not None:
            assert mine == table_text(table), n
            written += 1
    assert written > 150
    assert grid_text("t", ["a", "b"], {"a": 3, "b": 3}, [[["abcd"], ["x"]]]) is None  # wider than its column
    assert grid_text("t", ["a"], {"a": 120}, []) is None  # wider than the screen
    assert grid_text("t", ["a"], {"a": 3}, [[["a\tb"]]]) is None


def test_ctrl_c_while_a_sweep_runs_says_how_to_resume_and_exits_130(rig, monkeypatch, capsys):  # noqa: F811
    """Ctrl-C in the runner: the lock is let go, the resume hint said, exit 130; the jobs
    already submitted keep running (nothing is stopped)."""
    import typer

    from orchestrator.cli import sweep as cli

    make, cloud, _ = rig
    runner = make()
    monkeypatch.setattr("orchestrator.actions.sweeps.sweep_backend",
                        lambda definition, ledger: Router.of(cloud, definition.backends))
    real_status = cloud.status

    def status(name):  # the runner polls its jobs in flight: the user presses Ctrl-C now
        real_status(name)
        raise KeyboardInterrupt

    cloud.status = status
    with pytest.raises(typer.Exit) as info:
        cli.drive(runner.d, runner.ledger, poll=5)
    assert info.value.exit_code == 130
    assert f"interrupted; continue with `python -m orchestrator sweep resume {runner.d.sweep_id}`" in capsys.readouterr().err
    assert cloud.jobs and not cloud.stopped
    with sweeps.runner_lock(runner.d.sweep_id):  # let go: a resume may take the sweep
        pass
