"""region.default_region: one order for every command that calls AWS without a region named."""

from __future__ import annotations

import pytest

from orchestrator.errors import InputError
from orchestrator.region import default_region


def test_default_region_order_flag_env_profile_fallback(tmp_path, monkeypatch):
    config = tmp_path / "aws-config"
    config.write_text("[profile work]\nregion = eu-north-1\n\n[profile bare]\noutput = json\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "work")
    monkeypatch.setenv("AWS_REGION", "eu-west-2")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert default_region("ca-central-1") == "ca-central-1"
    assert default_region() == "eu-west-2"
    monkeypatch.delenv("AWS_REGION")
    assert default_region() == "eu-west-1"
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert default_region() == "eu-north-1"
    monkeypatch.setenv("AWS_PROFILE", "bare")
    assert default_region() == "us-east-1"


@pytest.mark.parametrize("empty", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_an_empty_region_variable_counts_as_unset_and_the_profile_region_shows(tmp_path, monkeypatch, empty):
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = ap-south-1\n\n[profile work]\nregion = eu-north-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv(empty, "")
    # botocore takes an empty AWS_DEFAULT_REGION as the region "", hiding the profile's.
    assert default_region() == "ap-south-1"
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert default_region() == "eu-north-1"
    monkeypatch.setenv("AWS_PROFILE", "nope")
    with pytest.raises(InputError, match=r"cannot read the AWS configuration: The config profile \(nope\)"):
        default_region()


def test_default_region_refuses_a_value_that_is_not_a_region(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us east 1")
    with pytest.raises(InputError) as info:
        default_region()
    assert info.value.message == "AWS_REGION='us east 1' is not an AWS region name"
    # No "--region": `cache`, which reads this rule too, has no such flag (QA).
    assert info.value.hint == "make it a region such as us-east-1"
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = Mars\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    with pytest.raises(InputError, match="the region 'Mars' of the AWS config profile default is not an AWS region"):
        default_region()
