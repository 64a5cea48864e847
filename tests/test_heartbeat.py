"""entrypoints/launcher/heartbeat.py: when the launcher pushes the compile cache and rewrites results.json
while torchrun trains. The thread runs for real, with a clock the test moves."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from entrypoints.launcher import heartbeat
from entrypoints.shared import compile_cache


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakePusher:
    def __init__(self) -> None:
        self.new = False
        self.pushes: list[tuple[float, str]] = []

    def has_new(self) -> bool:
        return self.new

    def push(self, why: str) -> None:
        self.pushes.append((clock.now, why))
        self.new = False


clock = Clock()


def run_heartbeat(script, *, push_interval_s: float = 10.0, beat_s: float = 5.0, pusher=None):
    """Run a Heartbeat ticking every few ms; `script(tick)` is called at every tick (from the
    warmed() callback, which the thread calls until warm and the test keeps calling after) to
    move the clock and change the world; it returns False to stop."""
    clock.now = 0.0
    beats: list[float] = []
    done = threading.Event()
    ticks = [0]
    warm = [False]

    def warmed() -> bool:
        return warm[0]

    hb = heartbeat.Heartbeat(warmed=warmed, pusher=pusher, on_beat=lambda: beats.append(clock.now),
                             push_interval_s=push_interval_s, beat_s=beat_s, log=lambda line: None, tick_s=0.002,
                             clock=clock)
    original_wait = hb.stopping.wait

    def tick(timeout):
        stopped = original_wait(timeout)
        if not stopped:
            ticks[0] += 1
            if script(ticks[0], warm) is False:
                done.set()
                return True
        return stopped

    hb.stopping.wait = tick
    hb.start()
    assert done.wait(30), "the script never finished"
    hb.stop()
    return beats


def test_first_push_right_after_warmup_then_only_when_new_entries_exist():
    pusher = FakePusher()

    def script(tick: int, warm: list[bool]):
        clock.now = float(tick)  # one second per tick
        if tick == 3:
            warm[0] = True  # the first rank reports its warmup steps done
            pusher.new = True
        if tick == 20:
            pusher.new = True  # a graph compiled later
        return tick < 40

    beats = run_heartbeat(script, pusher=pusher)
    assert pusher.pushes[0] == (3.0, "after warmup")
    # Every push interval (10 s) it looks; only the look after tick 20 finds something new.
    assert [why for _, why in pusher.pushes] == ["after warmup", "periodic"]
    assert 20.0 <= pusher.pushes[1][0] <= 24.0
    # results.json is rewritten every beat_s (5 s), warm or not.
    assert beats[:3] == [5.0, 10.0, 15.0] and len(beats) >= 7


def test_no_push_before_the_warmup_steps_and_none_without_a_cache():
    pusher = FakePusher()
    pusher.new = True

    def script(tick: int, warm: list[bool]):
        clock.now = float(tick)
        return tick < 15

    beats = run_heartbeat(script, pusher=pusher)
    assert pusher.pushes == []  # entries exist, but the graphs of the training step may not yet
    assert beats  # the heartbeat runs anyway

    beats = run_heartbeat(lambda tick, warm: (setattr(clock, "now", float(tick)), warm.__setitem__(0, True),
                                              tick < 12)[-1], pusher=None)
    assert beats == [5.0, 10.0]


def test_a_failing_push_or_beat_is_logged_and_the_heartbeat_goes_on():
    logged: list[str] = []
    calls = {"beat": 0}

    def on_beat():
        calls["beat"] += 1
        raise OSError("disk full")

    clock.now = 0.0
    hb = heartbeat.Heartbeat(warmed=lambda: True, pusher=None, on_beat=on_beat, push_interval_s=1, beat_s=0.0,
                             log=logged.append, tick_s=0.001)
    hb.start()
    deadline = threading.Event()
    while calls["beat"] < 3:
        deadline.wait(0.01)
    hb.stop()
    assert not hb.is_alive()
    assert logged[0] == "WARNING heartbeat failed: OSError: disk full"


def test_cache_pusher_sends_only_entries_no_push_or_pull_brought(tmp_path: Path):
    key = compile_cache.CacheKey("inductor", "9.9", "native", "", "cpu-x86_64", 1)
    store = tmp_path / "store"
    earlier = tmp_path / "earlier-job"
    (earlier / "fxgraph" / "aa").mkdir(parents=True)
    (earlier / "fxgraph" / "aa" / "pulled").write_bytes(b"from the store")
    compile_cache.push(store.as_uri(), key, earlier)
    cache_dir = tmp_path / "cache"
    assert compile_cache.pull(store.as_uri(), key, cache_dir).hit_entries == 1
    cache = {"new_entries": 0, "push_bytes": 0, "push_s": 0.0, "pushes": 0, "warnings": []}
    pusher = heartbeat.CachePusher(store.as_uri(), key, cache_dir, cache, log=lambda line: None)
    assert not pusher.has_new()
    manifest = store / key.digest() / compile_cache.MANIFEST
    before = manifest.stat().st_mtime_ns
    pusher.push("nothing new")
    assert cache["pushes"] == 0 and manifest.stat().st_mtime_ns == before
    (cache_dir / "fxgraph" / "bb").mkdir()
    (cache_dir / "fxgraph" / "bb" / "compiled").write_bytes(b"new")
    assert pusher.has_new()
    pusher.push("first")
    assert (cache["pushes"], cache["new_entries"]) == (1, 1)
    assert not pusher.has_new()
    (cache_dir / "fxgraph" / "cc").mkdir()
    (cache_dir / "fxgraph" / "cc" / "later").write_bytes(b"later")
    (cache_dir / "fxgraph" / "cc" / "later.lock").write_bytes(b"")  # still being written: not complete
    assert not pusher.has_new()
    (cache_dir / "fxgraph" / "cc" / "later.lock").unlink()
    assert pusher.has_new()
    pusher.push("second")
    assert (cache["pushes"], cache["new_entries"]) == (2, 2)
    fresh = tmp_path / "fresh"
    assert compile_cache.pull(store.as_uri(), key, fresh).hit_entries == 3
    archives = {e["archive"] for e in json.loads(manifest.read_text())["entries"].values()}
    assert len(archives) == 3  # one per push, each holding only what was new
