"""The seconds an environment variable sets: one reader (`env_seconds`) behind a client's
timeouts, the heartbeat and a local job's stop grace, with one wording of a bad value."""

from __future__ import annotations

import pytest

from orchestrator import aws
from orchestrator import follow as following
from orchestrator.backends.local import layout as local_layout
from orchestrator.env_seconds import env_seconds
from orchestrator.errors import InputError

# (variable, the reader that uses it, its default, the bounds its message states)
READERS = {
    "aws read timeout": (aws.READ_TIMEOUT_VARIABLE, lambda: aws.timeouts()[1], aws.READ_TIMEOUT_S,
                         "between 0 and 3600"),
    "heartbeat": (following.HEARTBEAT_VARIABLE, following.heartbeat_seconds, following.DEFAULT_HEARTBEAT_S,
                  "above 0"),
    "local stop grace": (local_layout.STOP_GRACE_ENV, local_layout.stop_grace_s, local_layout.STOP_GRACE_S,
                         "above 0"),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_each_setting_defaults_and_takes_a_number(monkeypatch, name):
    variable, read, default, _ = READERS[name]
    monkeypatch.delenv(variable, raising=False)
    assert read() == default
    monkeypatch.setenv(variable, "")
    assert read() == default  # set but empty counts as unset
    monkeypatch.setenv(variable, "2.5")
    assert read() == 2.5


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "nan", "inf", "-inf"])
@pytest.mark.parametrize("name", sorted(READERS))
def test_each_setting_refuses_a_bad_value_in_one_wording(monkeypatch, name, bad):
    variable, read, default, bounds = READERS[name]
    monkeypatch.setenv(variable, bad)
    with pytest.raises(InputError) as caught:
        read()
    assert caught.value.message == f"{variable}='{bad}' is not a number of seconds {bounds}"
    assert caught.value.hint.endswith(f", or unset it for the default ({default:g})")
    assert caught.value.exit_code == 2


def test_an_upper_bound_is_inclusive(monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_TEST_SECONDS", "3600")
    assert env_seconds("ORCHESTRATOR_TEST_SECONDS", 10, example=30, at_most=3600) == 3600
    monkeypatch.setenv("ORCHESTRATOR_TEST_SECONDS", "3600.5")
    with pytest.raises(InputError, match="between 0 and 3600$"):
        env_seconds("ORCHESTRATOR_TEST_SECONDS", 10, example=30, at_most=3600)
