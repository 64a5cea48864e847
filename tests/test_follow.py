"""Following a job: outages are waited through (and said), a heartbeat off a terminal, and
`logs -f` ends with the job's final status. Time is a fake clock: nothing here waits."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from cli_harness import run_cli
from sweep_fakes import Clock

from orchestrator import follow as following
from orchestrator.backends import JobStatus
from orchestrator.backends.sagemaker.backend import SageMakerBackend, translate
from orchestrator.errors import BackendError, JobFailed


def translated(exc: Exception) -> BackendError:
    """Our error for a botocore one, as the backend raises it (`raise ... from exc`)."""
    try:
        raise translate(exc, operation="DescribeTrainingJob", job_name="j", region="us-east-1") from exc
    except BackendError as error:
        return error


def connection_error() -> BackendError:
    return translated(EndpointConnectionError(endpoint_url="http://127.0.0.1:9/"))


def client_error(code: str, status: int) -> BackendError:
    return translated(ClientError({"Error": {"Code": code, "Message": code},
                                   "ResponseMetadata": {"HTTPStatusCode": status}}, "DescribeTrainingJob"))


def statuses(*items):
    """A read_status that answers `items` in turn (an exception is raised)."""
    queue = list(items)

    def read():
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return read


RUNNING = JobStatus("j", "running", secondary="Training")
DONE = JobStatus("j", "completed", secondary="Completed")


def test_an_outage_is_waited_through_with_backoff_and_said():
    clock = Clock()
    seen, outages = [], []
    timeout = translated(ReadTimeoutError(endpoint_url="http://127.0.0.1:9/"))
    final = following.follow(statuses(RUNNING, connection_error(), client_error("ThrottlingException", 400), timeout,
                                    client_error("InternalFailure", 503), RUNNING, DONE),
                           interval=15, on_status=lambda st, elapsed, why: seen.append((st.status, why)),
                           on_transient=lambda message, elapsed, retry_in: outages.append((message, retry_in)),
                           sleep=clock.sleep, clock=clock)
    assert final == DONE
    assert [retry for _, retry in outages] == [30, 60, 120, 240]  # interval x 2^n
    assert "cannot reach the AWS endpoint" in outages[0][0] and "throttled" in outages[1][0]
    # The first status read after the outage is shown again, then the end.
    assert seen == [("running", "change"), ("running", "change"), ("completed", "change")]
    assert clock.sleeps == [15, 30, 60, 120, 240, 15]


def test_the_backoff_is_capped():
    clock = Clock()
    outages = []
    following.follow(statuses(*[connection_error()] * 8, DONE), interval=15, on_status=lambda *a: None,
                   on_transient=lambda m, e, retry: outages.append(retry), sleep=clock.sleep, clock=clock)
    assert max(outages) == following.MAX_BACKOFF_S and outages[-1] == 300


@pytest.mark.parametrize("error", [client_error("AccessDeniedException", 400), client_error("ValidationException", 400)])
def test_an_answer_about_the_request_is_not_an_outage(error):
    with pytest.raises(BackendError) as info:
        following.follow(statuses(error), interval=1, on_status=lambda *a: None, on_transient=lambda *a: None,
                       sleep=lambda s: None, clock=lambda: 0.0)
    assert info.value is error


def test_a_heartbeat_off_a_terminal_every_interval_while_nothing_changes():
    clock = Clock()
    lines = []
    following.follow(statuses(*[RUNNING] * 30, DONE), interval=10, heartbeat_s=60,
                   on_status=lambda st, elapsed, why: lines.append((elapsed, why)), on_transient=lambda *a: None,
                   sleep=clock.sleep, clock=clock)
    assert lines == [(0, "change"), (60, "heartbeat"), (120, "heartbeat"), (180, "heartbeat"), (240, "heartbeat"),
                     (300, "change")]
    quiet = []
    following.follow(statuses(*[RUNNING] * 30, DONE), interval=10, on_status=lambda st, e, why: quiet.append(why),
                   on_transient=lambda *a: None, sleep=Clock().sleep, clock=clock)
    assert quiet == ["change", "change"]  # on a terminal: only changes (the spinner shows the rest)


def test_heartbeat_interval_defaults_to_a_minute_and_is_overridable(monkeypatch):
    monkeypatch.delenv(following.HEARTBEAT_VARIABLE, raising=False)
    assert following.heartbeat_seconds() == 60
    monkeypatch.setenv(following.HEARTBEAT_VARIABLE, "5")
    assert following.heartbeat_seconds() == 5
    from orchestrator.errors import InputError

    for bad in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv(following.HEARTBEAT_VARIABLE, bad)
        with pytest.raises(InputError, match=following.HEARTBEAT_VARIABLE):
            following.heartbeat_seconds()


class ScriptedBackend:
    """A backend whose statuses are scripted, saying what backend `name`'s class says of itself
    (`runs_in`, `cloud`: `wait` asks the backend it is given)."""

    def __init__(self, *items, name: str = "sagemaker"):
        from orchestrator import backends

        self.read = statuses(*items)
        self.name = name
        self.runs_in, self.cloud = backends.backend_class(name).runs_in, backends.backend_class(name).cloud

    def status(self, job_name):
        return self.read()


def test_submit_wait_off_a_terminal_says_the_job_keeps_running_and_how_to_follow_it_again(capsys):
    from orchestrator.cli import job_view

    clock = Clock()
    backend = ScriptedBackend(RUNNING, connection_error(), *[RUNNING] * 20, DONE)
    st = job_view.wait(backend, "j", 15, reattach="python -m orchestrator submit job.yaml --wait", sleep=clock.sleep,
                   clock=clock, interactive=False)
    assert st == DONE
    err = capsys.readouterr().err
    assert ("j: status unknown: DescribeTrainingJob: cannot reach the AWS endpoint" in err
            and "The job keeps running in SageMaker; still waiting, next try in 30 s" in err
            and "`python -m orchestrator submit job.yaml --wait` follows it again" in err)
    assert "[0m45s] j: running (Training)\n[1m45s] j: running (Training); still waiting" in err  # a minute later
    assert err.count("still waiting") >= 4


def test_submit_wait_says_where_a_job_it_cannot_read_keeps_running(capsys):
    """A Batch job keeps running in AWS Batch, not "in SageMaker" (issue 22: every state shown is true)."""
    from orchestrator.cli import job_view

    clock = Clock()
    backend = ScriptedBackend(connection_error(), DONE, name="batch")
    job_view.wait(backend, "j", 15, sleep=clock.sleep, clock=clock, interactive=False)
    err = capsys.readouterr().err
    assert "The job keeps running in AWS Batch; still waiting" in err and "in SageMaker" not in err


def test_submit_wait_exits_1_only_for_a_job_that_failed(capsys):
    from orchestrator.cli import job_view

    clock = Clock()
    failed = JobStatus("j", "failed", failure_reason="AlgorithmError: boom")
    with pytest.raises(JobFailed, match="job j failed: AlgorithmError: boom"):
        job_view.wait(ScriptedBackend(connection_error(), failed), "j", 15, sleep=clock.sleep, clock=clock,
                  interactive=False)
    assert job_view.wait(ScriptedBackend(connection_error(), connection_error(), DONE), "j", 15, sleep=clock.sleep,
                     clock=clock, interactive=False) == DONE


def test_submit_wait_through_a_blip_against_moto(moto_server, orch_home, monkeypatch, capsys):
    """The whole command: a DescribeTrainingJob that cannot connect does not end `submit --wait`."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="orchestrator-example-bucket")
    real = SageMakerBackend.status
    calls = {"n": 0}

    def flaky(self, job_name):
        calls["n"] += 1
        if calls["n"] == 1:
            raise connection_error()
        return real(self, job_name)

    monkeypatch.setattr(SageMakerBackend, "status", flaky)
    code, out, err = run_cli(monkeypatch, capsys, "submit", str(root / "configs" / "vit-trn1-2xlarge.yaml"),
                             "--wait", "--interval", "0.05")
    assert code == 0, err
    assert "status unknown" in err and "keeps running in SageMaker" in err
    assert "status    completed" in out


def test_logs_follow_ends_with_the_final_status_and_reason(orch_home, monkeypatch, capsys):
    from orchestrator.cli.job_view import print_logs

    class Ended:
        """A backend whose job ended, and which cannot tell whether logs exist before reading."""

        def has_logs(self, job):
            return True

        def no_logs(self, job):
            return f"no log lines for {job}"

        def status(self, job):
            return JobStatus(job, "failed", failure_reason="CapacityError: no ml.trn1.2xlarge")

        def logs(self, job, follow=False):
            yield "[algo-1] step 1"

    print_logs(Ended(), "j", follow=True)
    captured = capsys.readouterr()
    assert captured.out == "[algo-1] step 1\n"
    assert "j ended: failed: CapacityError: no ml.trn1.2xlarge" in captured.err
    print_logs(Ended(), "j", follow=False)  # without -f: no status line
    assert "ended" not in capsys.readouterr().err

    class Silent(Ended):
        def logs(self, job, follow=False):
            return iter(())

    print_logs(Silent(), "j", follow=True)  # no log at all (a capacity error): the note has the reason
    assert capsys.readouterr().err.strip() == ("note: no log lines for j (the job is failed: CapacityError: no "
                                               "ml.trn1.2xlarge)")


def test_sweep_run_off_a_terminal_prints_a_heartbeat_when_nothing_happens(capsys):
    from orchestrator.cli.sweep import SweepDisplay
    from orchestrator.sweep import SweepProgress

    clock = Clock()
    display = SweepDisplay(runner=None, clock=clock, heartbeat_s=60)
    assert not display.interactive

    def progress(events: tuple[str, ...], count: int, new: tuple[str, ...] = ()) -> SweepProgress:
        return SweepProgress("demo-1a2b3c4d", 2, {"running": 2}, 2, 0, None, None, events, False, event_count=count,
                             new_events=new)

    submitted = ("10:00:00 demo-1a2b3c4d-t1: submitted",)
    display(progress(submitted, 1, submitted))
    for _ in range(8):  # a runner's polls, 30 s apart, with nothing new
        clock.sleep(30)
        display(progress(submitted, 1))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "10:00:00 demo-1a2b3c4d-t1: submitted"
    assert out[1:] == ["sweep demo-1a2b3c4d: 2 running; 2 in flight; still running"] * 4  # at 60, 120, 180, 240 s


def test_sweep_resume_off_a_terminal_says_where_it_stands_at_once(capsys):
    """Issue 22 (smaller findings): a runner that found nothing new printed nothing for 60 s."""
    from orchestrator.cli.sweep import SweepDisplay
    from orchestrator.sweep import SweepProgress as Progress

    clock = Clock()
    display = SweepDisplay(runner=None, clock=clock, heartbeat_s=60)
    quiet = Progress("demo-1a2b3c4d", 2, {"running": 2}, 2, 0, None, None, (), False, event_count=0)
    display(quiet)
    assert capsys.readouterr().out == "sweep demo-1a2b3c4d: 2 running; 2 in flight; following them\n"
    clock.sleep(30)
    display(quiet)
    assert capsys.readouterr().out == ""  # then a line a heartbeat apart, as before


def test_the_wait_line_clock_moves_while_the_status_stays_the_same():
    """QA: the elapsed time showed 0:00:00 until the status changed, so a long job looked stuck."""
    from rich.console import Console

    from orchestrator.cli import job_view

    clock = Clock()
    ticking = job_view._Ticking("j: running (Training)", clock)
    console = Console(width=80, record=True)

    def shown() -> str:
        console.print(ticking)
        return console.export_text().strip()

    assert shown() == "j: running (Training)  0:00:00"
    clock.sleep(65)
    assert shown() == "j: running (Training)  0:01:05"
    clock.sleep(3600)
    assert shown() == "j: running (Training)  1:01:05"


def test_a_poll_of_zero_is_refused_it_would_spin_a_core(monkeypatch, capsys):
    from pathlib import Path

    sweep = Path(__file__).resolve().parents[1] / "configs" / "sweep-local.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(sweep), "--poll", "0")
    assert code == 2 and "--poll" in err and "0.1" in err
