"""entrypoints.shared.compile_cache.entries: which local files and folders are complete entries."""

from __future__ import annotations

from pathlib import Path

from compile_cache_harness import inductor_tree, neuron_entry

from entrypoints.shared import compile_cache as cc


def test_only_complete_neuron_entries_count(tmp_path):
    good = neuron_entry(tmp_path, "1")
    neuron_entry(tmp_path, "2", state="failed")
    neuron_entry(tmp_path, "3", state="locked")
    in_flight = tmp_path / "neuronxcc-2.22.1" / "MODULE_4+4fe2a1"
    in_flight.mkdir()
    (in_flight / "model.neff").write_bytes(b"partial")  # no model.done yet
    linked = Path(tmp_path / neuron_entry(tmp_path, "5"))
    (linked / "escape").symlink_to("/etc/passwd")
    (tmp_path / "neuronxcc-2.22.1" / "not-a-module").mkdir()
    (tmp_path / "stray.lock").write_text("")
    assert set(cc.complete_entries(tmp_path, "neuronx-cc")) == {good}


def test_inductor_entries_are_files_without_locks_or_temporaries(tmp_path):
    expected = inductor_tree(tmp_path)
    assert set(cc.complete_entries(tmp_path, "inductor")) == expected


def test_entry_names_pull_would_refuse_never_travel(tmp_path):
    (tmp_path / "ok.py").write_bytes(b"x")
    (tmp_path / "with space.py").write_bytes(b"x")
    assert set(cc.complete_entries(tmp_path, "inductor")) == {"ok.py"}
