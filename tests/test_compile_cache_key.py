"""entrypoints.shared.compile_cache.key: what decides whether compiled artifacts are reusable."""

from __future__ import annotations

import sys
import types

import pytest

from entrypoints.shared import compile_cache as cc


def test_digest_is_sanitised_and_depends_on_every_field():
    digest = cc.CacheKey("inductor", "2.9.0+cpu", "native", "A=1", "cpu", 2).digest()
    assert digest.startswith("inductor-2.9.0_cpu-")
    assert len(digest.rsplit("-", 1)[1]) == 16
    base = dict(kind="neuronx-cc", compiler_version="2.22.1", runtime="xla", flags="", target="trn1", world_size=2)
    digests = {cc.CacheKey(**base).digest()}
    for field, value in [("flags", "-O1"), ("target", "trn2"), ("world_size", 32), ("compiler_version", "2.23.0")]:
        digests.add(cc.CacheKey(**{**base, field: value}).digest())
    assert len(digests) == 5


@pytest.mark.parametrize("bad", [dict(kind="gcc"), dict(runtime="jax"), dict(world_size=0)])
def test_key_rejects_programming_errors(bad):
    fields = dict(kind="neuronx-cc", compiler_version="1", runtime="xla", flags="", target="trn1", world_size=1)
    with pytest.raises(ValueError):
        cc.CacheKey(**{**fields, **bad})


def test_key_for_xla_reads_the_compiler_version_and_drops_the_cache_dir(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    compiler = bin_dir / "neuronx-cc"
    compiler.write_text("#!/bin/sh\necho 'NeuronX Compiler version 2.22.12471.0+6ba3a2e1'\necho\n"
                        "echo 'Python version 3.12.3'\n")
    compiler.chmod(0o755)
    env = {"PATH": str(bin_dir), "NEURON_CC_FLAGS": "--cache_dir=/tmp/a --model-type=transformer -O1 --cache_dir /b"}
    key = cc.key_for("xla", "trn1", 32, env)
    assert key == cc.CacheKey("neuronx-cc", "2.22.12471.0+6ba3a2e1", "xla", "--model-type=transformer -O1", "trn1", 32)
    moved = cc.key_for("xla", "trn1", 32, {**env, "NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/c -O1"})
    assert moved.digest() == key.digest()


def test_key_for_xla_without_the_compiler():
    key = cc.key_for("xla", "trn2", 64, {"PATH": "/nonexistent"})
    assert (key.kind, key.compiler_version, key.flags, key.world_size) == ("neuronx-cc", "absent", "", 64)


def test_key_for_native_uses_torch_and_inductor_options(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.9.0+cpu"))
    env = {"TORCHINDUCTOR_CACHE_DIR": "/somewhere", "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
           "TORCHINDUCTOR_FREEZING": "0", "PATH": "/bin"}
    key = cc.key_for("native", "cpu", 2, env)
    assert key == cc.CacheKey("inductor", "2.9.0+cpu", "native",
                              "TORCHINDUCTOR_FREEZING=0 TORCHINDUCTOR_MAX_AUTOTUNE=1", "cpu", 2)
    with pytest.raises(ValueError):
        cc.key_for("tpu", "cpu", 1, env)
