"""entrypoints/trainer/isa_probe.py: inductor's CPU vector-ISA probes remembered in the compile cache."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from entrypoints.shared import compile_cache as cc
from entrypoints.trainer import isa_probe

AVX_CODE = "extern \"C\" void __avx_chk_kernel() {}"
FEATURES = "avx2 avx512f fma sse4_2"


class FakeIsa:
    def __init__(self, name: str = "avx512", flags: str = "-mavx512f -mfma"):
        self.name, self._arch_flags = name, flags

    def __str__(self) -> str:
        return self.name


class Probe:
    """Stands in for `VecISA.check_build`: counts calls and answers `result`."""

    def __init__(self, result: bool = True, delay: float = 0.0):
        self.result, self.delay, self.calls = result, delay, 0
        self.lock = threading.Lock()

    def __call__(self, isa: object, code: str) -> bool:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay)
        return self.result


def wrapped(probe: Probe, cache_dir: Path, *, features: str = FEATURES, compiler: str = "gcc version 12.2.0"):
    return isa_probe.memoized(probe, cache_dir, features, lambda: compiler,
                              lambda isa: isa._arch_flags)


def memo_files(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / isa_probe.MEMO_DIR).glob("*.json"))


@pytest.fixture(autouse=True)
def fresh_counts(monkeypatch):
    monkeypatch.setattr(isa_probe, "_counts", {"isa_probe_hit": 0, "isa_probe_miss": 0})


def test_a_passed_probe_is_answered_from_its_memo_in_the_next_process(tmp_path):
    first = Probe()
    assert wrapped(first, tmp_path)(FakeIsa(), AVX_CODE) is True
    assert first.calls == 1
    [memo] = memo_files(tmp_path)
    assert memo.stat().st_mode & 0o777 == 0o644
    recorded = json.loads(memo.read_text())
    assert recorded["ok"] is True and recorded["isa"] == "avx512"
    assert recorded["fingerprint"]["arch_flags"] == "-mavx512f -mfma"
    assert recorded["fingerprint"]["cpu_features"] == FEATURES
    # A new wrapper is what a new rank builds: it reads the memo and probes nothing.
    second = Probe(result=False)
    assert wrapped(second, tmp_path)(FakeIsa(), AVX_CODE) is True
    assert second.calls == 0
    assert isa_probe.counts() == {"isa_probe_hit": 1, "isa_probe_miss": 1}


def test_a_failed_probe_is_not_remembered(tmp_path):
    failing = Probe(result=False)
    check = wrapped(failing, tmp_path)
    assert check(FakeIsa(), AVX_CODE) is False
    assert check(FakeIsa(), AVX_CODE) is False
    assert failing.calls == 2 and memo_files(tmp_path) == []
    # It may have been passing trouble: the next success is recorded as usual.
    assert wrapped(Probe(), tmp_path)(FakeIsa(), AVX_CODE) is True
    assert len(memo_files(tmp_path)) == 1


@pytest.mark.parametrize("change", ["code", "flags", "features", "compiler"])
def test_anything_the_outcome_depends_on_makes_a_new_probe(tmp_path, change):
    wrapped(Probe(), tmp_path)(FakeIsa(), AVX_CODE)
    probe = Probe()
    code = AVX_CODE + "\n// bf16" if change == "code" else AVX_CODE
    isa = FakeIsa(flags="-mavx512f -mfma -mavx512bf16") if change == "flags" else FakeIsa()
    check = wrapped(probe, tmp_path, features=FEATURES.replace("avx512f ", "") if change == "features" else FEATURES,
                    compiler="clang version 17" if change == "compiler" else "gcc version 12.2.0")
    assert check(isa, code) is True
    assert probe.calls == 1 and len(memo_files(tmp_path)) == 2


@pytest.mark.parametrize("content", ["{not json", "[]", '{"schema": 1, "ok": false}', "TAMPER"])
def test_an_unreadable_or_foreign_memo_is_probed_again_and_replaced(tmp_path, content):
    wrapped(Probe(), tmp_path)(FakeIsa(), AVX_CODE)
    [memo] = memo_files(tmp_path)
    good = memo.read_text()
    if content == "TAMPER":
        # A memo under this name whose fingerprint is another host's.
        recorded = json.loads(good)
        recorded["fingerprint"]["cpu_features"] = "sse2"
        content = json.dumps(recorded)
    memo.write_text(content)
    probe = Probe()
    assert wrapped(probe, tmp_path)(FakeIsa(), AVX_CODE) is True
    assert probe.calls == 1
    assert memo.read_text() == good


def test_a_new_memo_schema_gets_names_of_its_own(tmp_path, monkeypatch):
    # The store never replaces an entry it has published: a memo of an older format must not
    # occupy the name the new format writes to, or every later job would probe again.
    wrapped(Probe(), tmp_path)(FakeIsa(), AVX_CODE)
    [old] = memo_files(tmp_path)
    monkeypatch.setattr(isa_probe, "SCHEMA", isa_probe.SCHEMA + 1)
    probe = Probe()
    check = wrapped(probe, tmp_path)
    assert check(FakeIsa(), AVX_CODE) is True and probe.calls == 1
    assert check(FakeIsa(), AVX_CODE) is True and probe.calls == 1
    assert len(memo_files(tmp_path)) == 2 and old.exists()


def test_ranks_probing_at_once_run_the_probe_once(tmp_path):
    probe = Probe(delay=0.3)
    results: list[bool] = []
    ranks = [threading.Thread(target=lambda: results.append(wrapped(probe, tmp_path)(FakeIsa(), AVX_CODE)))
             for _ in range(4)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()
    assert results == [True] * 4
    assert probe.calls == 1
    assert isa_probe.counts() == {"isa_probe_hit": 3, "isa_probe_miss": 1}


def test_memos_travel_as_inductor_cache_entries_and_locks_do_not(tmp_path):
    wrapped(Probe(), tmp_path)(FakeIsa(), AVX_CODE)
    [memo] = memo_files(tmp_path)
    (tmp_path / isa_probe.MEMO_DIR / "tmpabc.json").write_text("{")  # a memo being written
    entries = cc.complete_entries(tmp_path, "inductor")
    assert list(entries) == [f"{isa_probe.MEMO_DIR}/{memo.name}"]
    assert any((tmp_path / "locks").iterdir())


def test_a_memo_that_cannot_be_written_costs_only_the_next_probe(tmp_path):
    (tmp_path / isa_probe.MEMO_DIR).write_text("a file where the folder goes")
    probe = Probe()
    check = wrapped(probe, tmp_path)
    assert check(FakeIsa(), AVX_CODE) is True
    assert check(FakeIsa(), AVX_CODE) is True
    assert probe.calls == 2


def test_a_cache_dir_that_cannot_be_written_still_probes(tmp_path):
    # The cache dir is a file: no lock, no memo, but inductor gets the probe's answer.
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    probe = Probe()
    assert wrapped(probe, blocked)(FakeIsa(), AVX_CODE) is True
    failing = Probe(result=False)
    assert wrapped(failing, blocked)(FakeIsa(), AVX_CODE) is False
    assert probe.calls == 1 and failing.calls == 1


def test_cpu_features_reads_x86_and_arm_flags(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: sse2 avx2 fma avx2\n\nprocessor\t: 1\nflags\t\t: sse2\n")
    assert isa_probe.cpu_features(x86) == "avx2 fma sse2"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert isa_probe.cpu_features(arm) == "asimd fp sve"
    (tmp_path / "none").write_text("processor\t: 0\n")
    assert isa_probe.cpu_features(tmp_path / "none") is None
    assert isa_probe.cpu_features(tmp_path / "missing") is None


def test_install_wraps_inductors_probe_once(tmp_path, monkeypatch):
    from torch._inductor import cpu_vec_isa

    # monkeypatch restores the original after the test.
    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", cpu_vec_isa.VecISA.check_build)
    assert isa_probe.install(None) is False
    assert isa_probe.install(tmp_path) is True
    installed = cpu_vec_isa.VecISA.check_build
    assert getattr(installed, "orchestrator_memo", False)
    assert isa_probe.install(tmp_path) is True
    assert cpu_vec_isa.VecISA.check_build is installed


def test_install_leaves_inductor_alone_when_cpu_features_are_unknown(tmp_path, monkeypatch):
    from torch._inductor import cpu_vec_isa

    original = cpu_vec_isa.VecISA.check_build
    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", original)
    monkeypatch.setattr(isa_probe, "cpu_features", lambda: None)
    assert isa_probe.install(tmp_path) is False
    assert cpu_vec_isa.VecISA.check_build is original
