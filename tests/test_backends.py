"""backends: the protocol every backend implements, the registry, and finding a job's backend."""

from __future__ import annotations

import inspect
import json
import os

import pytest

from orchestrator import backends
from orchestrator.backends import Backend
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger


def _members(cls) -> set[str]:
    """The protocol's members, its bases' (Backend's `Planning`) included."""
    found = set()
    for part in cls.__mro__:
        if part is not object and part.__module__.startswith("orchestrator."):
            found |= {name for name in vars(part) if not name.startswith("_")}
            found |= set(vars(part).get("__annotations__", {}))
    return found


def test_the_interface_is_what_planning_asks_of_the_class_and_what_running_asks_of_the_instance():
    """Issue 34: the spec side (`planning.Planning`) and the job side (`running.Backend`) apart."""
    from orchestrator.backends.planning import Planning

    planning = _members(Planning)
    assert {"spec_problems", "rules", "estimate", "locations", "build_request", "operation", "quota_needs",
            "preferences", "scheduled"} <= planning
    assert not planning & {"submit", "status", "describe", "stop", "logs"}
    assert {"submit", "status", "describe", "stop", "logs"} <= _members(Backend) - planning


@pytest.mark.parametrize("name", backends.names())
def test_every_backend_implements_the_whole_protocol(name):
    cls = backends.backend_class(name)
    assert cls.name == name
    for member in _members(Backend):
        assert hasattr(cls, member) or member in ("region", "ledger"), f"{name} lacks {member}"
        wanted = inspect.getattr_static(Backend, member, None)
        if inspect.isfunction(wanted):
            got = inspect.signature(getattr(cls, member))
            assert list(got.parameters) == list(inspect.signature(wanted).parameters), (name, member)
    for flag in ("cloud", "shared"):
        assert isinstance(getattr(cls, flag), bool)
    assert cls.wait_interval_s > 0 and cls.sweep_poll_s > 0


def test_an_unknown_backend_is_an_input_error():
    with pytest.raises(InputError, match="unknown backend 'slurm'") as info:
        backends.create("slurm")
    assert "sagemaker or batch or local" in info.value.hint


def test_locate_asks_the_ledger_then_this_machine_then_the_default_backend(orch_home, monkeypatch):
    ledger = Ledger()
    ledger.record_intent("in-ledger-1", backend="local", region="us-east-1", spec_hash="0" * 64, request={})
    found = backends.locate("in-ledger-1", region="eu-west-1", ledger=ledger)
    assert found.backend.name == "local" and found.entry.job_name == "in-ledger-1" and not found.guessed
    # A local job whose ledger row is gone: its folder says where it is (its pid file is enough).
    folder = orch_home / "jobs" / "only-here-1"
    folder.mkdir(parents=True)
    (folder / "supervisor.pid").write_text("1\n")
    found = backends.locate("only-here-1", region=None, ledger=ledger)
    assert found.backend.name == "local" and found.entry is None and not found.guessed
    # Known nowhere: the default backend, in the command's region.
    monkeypatch.setenv("AWS_REGION", "eu-west-2")
    found = backends.locate("elsewhere-1", region=None, ledger=ledger)
    assert found.backend.name == backends.DEFAULT and found.guessed and found.backend.region == "eu-west-2"
    assert found.backend.place == "SageMaker in eu-west-2"
    assert backends.locate("elsewhere-1", region="ap-south-1", ledger=ledger).backend.region == "ap-south-1"


def test_the_local_backend_names_lists_and_describes_its_jobs(orch_home):
    local = backends.create("local")
    assert (local.place, local.label, local.region) == ("the local backend", "local", None)
    assert local.job_names("x") == [] and not local.exists("x-1")
    # The running job's supervisor lives (this process): one whose supervisor is gone is not in flight.
    for name, state in (("sweep-a-t1", "running"), ("sweep-a-t2", "completed"), ("other-1", "failed")):
        (orch_home / "jobs" / name).mkdir(parents=True)
        (orch_home / "jobs" / name / "status.json").write_text(json.dumps({"state": state, "pid": os.getpid()}))
    assert local.job_names("sweep-a") == ["sweep-a-t1", "sweep-a-t2"]
    assert local.job_names("sweep-a", in_flight=True) == ["sweep-a-t1"]
    assert local.exists("other-1") and local.describe("other-1").status == "failed"
    assert local.describe("nope-1") is None
    assert local.has_logs("other-1") and local.no_logs("other-1") == "no log lines for other-1"
