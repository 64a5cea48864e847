"""names: job names, sweep ids and tags, and reading a job name back into its sweep."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from orchestrator import names
from orchestrator.errors import InputError


def test_job_names_fit_sagemaker_and_keep_the_trial_part():
    long_name = "a" * 54
    for tick in (None, "202601050300"):
        ident = names.Identity(long_name, "0123abcd", tick)
        for attempt in (0, 1, 99):
            name = ident.job_name("t89abcdef", attempt)
            assert len(name) <= 63
            assert re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", name)
            assert name.endswith("-t89abcdef" + (f"-r{attempt}" if attempt else ""))
            assert ident.suffix in name
            assert ident.owns(name)
    ident = names.Identity("demo", "0123abcd")
    assert ident.job_name("t89abcdef") == "demo-0123abcd-t89abcdef"
    assert not ident.owns("demo-0123abcd-202601050300-t89abcdef")  # a tick of the same sweep
    assert not ident.owns("demo-0123abcd-t89abcdef-extra")


def test_a_scheduled_ticks_untimed_id_finds_it():
    assert names.sweep_keys("nightly-0123abcd-202611300200") == {
        "nightly-0123abcd-202611300200", "nightly-0123abcd", "nightly"}
    assert names.sweep_keys("odd") == {"odd"}


def test_a_job_name_follows_sagemakers_rule():
    for good in ("a", "vit-1", "a" * 63, "A-b--c9"):
        assert names.is_job_name(good), good
    for bad in ("", "-a", "a-", "a_b", "a b", "a" * 64, "a/b", "..", "ä"):
        assert not names.is_job_name(bad), bad
    with pytest.raises(InputError, match="SageMaker allows 63"):
        names.check_job_name("a" * 64)
    with pytest.raises(InputError, match="single dashes"):
        names.check_job_name("a_b")


def test_a_sweep_id_hashes_its_name_and_trials_and_marks_a_tick():
    one = names.sweep_identity("demo", ["aa" * 32, "bb" * 32])
    assert re.fullmatch(r"demo-[0-9a-f]{8}", one.sweep_id)
    assert names.sweep_identity("demo", ["aa" * 32, "bb" * 32]) == one  # the same trials: the same sweep
    assert names.sweep_identity("demo", ["bb" * 32, "aa" * 32]).digest != one.digest
    assert names.sweep_identity("other", ["aa" * 32, "bb" * 32]).digest != one.digest
    tick = names.sweep_identity("demo", ["aa" * 32], datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc))
    assert tick.sweep_id.endswith("-202611300300") and tick.tags("t1") == {
        names.TAG_SWEEP: tick.sweep_id, names.TAG_TRIAL: "t1"}
    assert names.trial_id("0123abcd" + "f" * 56) == "t0123abcd"


def test_a_job_name_is_read_back_into_its_trial_and_attempt():
    ident = names.Identity("a" * 60, "0123abcd", "202601050300")
    assert ident.parse(ident.job_name("t89abcdef")) == ("t89abcdef", 0)
    assert ident.parse(ident.job_name("t89abcdef", 12)) == ("t89abcdef", 12)
    assert ident.parse(names.Identity("b" * 60, "0123abcd").job_name("t89abcdef")) is None
    assert ident.parse("unrelated-job") is None


@pytest.mark.parametrize("job, sweep, belongs", [
    ("demo-0123abcd-t89abcdef", "demo", True),  # by its sweep name
    ("demo-0123abcd-t89abcdef-r2", "demo-0123abcd", True),  # by its id
    ("demo-0123abcd-202601050300-t89abcdef", "demo-0123abcd", True),  # a tick, by its untimed id
    ("demo-0123abcd-202601050300-t89abcdef", "demo-0123abcd-202601050300", True),
    ("demo-0123abcd-202601050300-t89abcdef", "demo-0123abcd-202601060300", False),  # another tick
    ("demo-0123abcd-t89abcdef", "dem", False),  # a prefix of the name is not the name
    ("demos-0123abcd-t89abcdef", "demo", False),
    ("demo-plain-job", "demo", True),  # not of a sweep's shape: by its start
    ("anything", None, True),
])
def test_a_job_known_only_by_its_name_belongs_to_its_sweep(job, sweep, belongs):
    assert names.in_sweep(job, sweep) is belongs


def test_a_long_sweep_name_is_matched_by_its_shortened_job_names():
    long_name = "x" * 70
    ident = names.Identity(long_name, "0123abcd", "202601050300")
    job = ident.job_name("t89abcdef", 3)
    assert len(job) <= 63 and names.in_sweep(job, long_name) and names.in_sweep(job, ident.sweep_id)
    assert names.listing_needle(long_name) in job and names.listing_needle(ident.sweep_id) in job
    assert names.tagged_in_sweep(ident.sweep_id, long_name) and not names.tagged_in_sweep(ident.sweep_id, "x")
