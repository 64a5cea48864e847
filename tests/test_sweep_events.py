"""Every event is told once (issue 33, item 3): a round with more events than the live view
keeps (20) still gives each to the log, once; the live view may summarise, the log may not."""

from __future__ import annotations

from sweep_fakes import rig  # noqa: F401 - the fixture

SWEEP_30 = """\
sweep: busy
base: base.yaml
grid:
  training.batch_size: [8, 16, 32]
random:
  trials: 10
  seed: 0
  params:
    training.optimizer.lr: {loguniform: [1.0e-5, 1.0e-3]}
concurrency: 30
"""


def test_a_busy_round_gives_every_event_to_the_log_once(rig, capsys):  # noqa: F811
    from orchestrator.cli.sweep import SweepDisplay

    make, cloud, clock = rig
    runner = make(SWEEP_30)
    display = SweepDisplay(runner, clock=clock, heartbeat_s=3600)
    display.interactive, display.live = False, None  # a log (a CI job, --detach's file)
    runner.on_progress = display
    runner.run(max_steps=1)
    submitted = [line for line in capsys.readouterr().out.splitlines() if line.endswith(": submitted")]
    assert len(submitted) == 30 and len(set(submitted)) == 30
    cloud.finish_all()
    runner.run(max_steps=1)
    lines = capsys.readouterr().out.splitlines()
    completed = [line for line in lines if line.endswith(": completed")]
    assert len(completed) == 30 and len(set(completed)) == 30
    assert not any(line.endswith(": submitted") for line in lines)  # told once, not again


def test_new_events_hold_each_event_of_the_step_and_only_those(rig):  # noqa: F811
    make, cloud, _ = rig
    runner = make(SWEEP_30)
    first = runner.step()
    assert len(first.new_events) == 30 and len(first.events) == 20
    assert runner.step().new_events == ()
    cloud.finish_all()
    assert len(runner.step().new_events) == 30
