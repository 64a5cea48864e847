"""What launch.py does while torchrun trains: push newly compiled cache entries, refresh results.json.

A stopped, timed-out or spot-interrupted job may be killed (SIGKILL) at any moment, so nothing
that matters may wait for the end of training:

- `CachePusher` pushes the complete compile cache entries of this host that neither the pull
  brought nor an earlier push sent (the store's manifest merge then adds only what it lacks),
  and adds each push's figures to the job's `cache` section.
- `Heartbeat` is the thread that calls it: once the host's first rank reports its warmup steps
  done (the graphs exist then), and afterwards every `push_interval_s` seconds when new
  complete entries exist; and that calls `on_beat` (launch.py rewrites results.json, status
  "running") every `beat_s` seconds. `stop()` ends it after the push or beat in flight, so the
  final push and the final results.json follow it without racing it.

A failing callback is logged and retried at its next turn: the heartbeat never stops training.
Stdlib only (+ `entrypoints.shared.compile_cache`); nothing here imports `orchestrator`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from entrypoints.shared import compile_cache

# How often the thread wakes up to look at the ranks' progress and the clock.
TICK_S = 1.0


class CachePusher:
    """Pushes this host's new complete entries of `key` from `cache_dir` to `uri`.

    `cache` is launch.py's `cache` section of results.json: each push adds to `new_entries`,
    `push_bytes`, `push_s` and `pushes`, and its warnings to `warnings` (once each).
    """

    def __init__(self, uri: str, key: compile_cache.CacheKey, cache_dir: Path, cache: dict,
                 log: Callable[[str], None]) -> None:
        self.uri = uri
        self.key = key
        self.cache_dir = cache_dir
        self.cache = cache
        self.log = log
        self.lock = threading.Lock()
        self.known: set[str] = set(self.local())  # what the pull brought (or an earlier run left)

    def local(self) -> dict[str, Path]:
        return compile_cache.complete_entries(self.cache_dir, self.key.kind)

    def has_new(self) -> bool:
        """Whether complete entries exist that no push has sent yet."""
        return bool(set(self.local()) - self.known)

    def push(self, why: str) -> None:
        """Push what is new (a cheap look at the local cache when nothing is)."""
        with self.lock:
            names = set(self.local())
            if not names - self.known:
                return
            pushed = compile_cache.push(self.uri, self.key, self.cache_dir)
            cache = self.cache
            cache["new_entries"] += pushed.new_entries
            cache["push_bytes"] += pushed.bytes
            cache["push_s"] = round(cache["push_s"] + pushed.seconds, 3)
            cache["pushes"] += 1
            fresh = [w for w in pushed.warnings if w not in cache["warnings"]]
            cache["warnings"].extend(fresh)
            for warning in fresh:
                self.log(f"WARNING compile cache: {warning}")
            if not any(w.startswith("cache not pushed") for w in pushed.warnings):
                self.known |= names
            self.log(f"compile cache pushed ({why}): {pushed.new_entries} new entries, {pushed.bytes} bytes "
                     f"in {pushed.seconds:.2f}s")


class Heartbeat(threading.Thread):
    """The thread described in the module docstring.

    `warmed()` says whether the host's first rank has finished its warmup steps; `pusher` is
    None when the job has no compile cache to push.
    """

    def __init__(self, *, warmed: Callable[[], bool], pusher: CachePusher | None, on_beat: Callable[[], None],
                 push_interval_s: float, beat_s: float, log: Callable[[str], None], tick_s: float = TICK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.warmed = warmed
        self.pusher = pusher
        self.on_beat = on_beat
        self.push_interval_s = push_interval_s
        self.beat_s = beat_s
        self.log = log
        self.tick_s = tick_s
        self.clock = clock
        self.stopping = threading.Event()
        self.is_warm = False

    def stop(self) -> None:
        """End the thread once what it is doing is done."""
        self.stopping.set()
        if self.is_alive():
            self.join()

    def _call(self, what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - the heartbeat must never stop training
            self.log(f"WARNING {what} failed: {type(exc).__name__}: {exc}")

    def run(self) -> None:
        next_beat = self.clock() + self.beat_s
        next_push = 0.0  # set by the first push, once the ranks are warm
        while not self.stopping.wait(self.tick_s):
            now = self.clock()
            if self.pusher is not None:
                if not self.is_warm:
                    try:
                        self.is_warm = bool(self.warmed())
                    except Exception:  # noqa: BLE001 - a stats file being replaced: look again
                        self.is_warm = False
                    if self.is_warm:
                        self._call("compile cache push", lambda: self.pusher.push("after warmup"))
                        next_push = self.clock() + self.push_interval_s
                elif now >= next_push:
                    if self.pusher.has_new():
                        self._call("compile cache push", lambda: self.pusher.push("periodic"))
                    next_push = self.clock() + self.push_interval_s
            if self.clock() >= next_beat:
                self._call("heartbeat", self.on_beat)
                next_beat = self.clock() + self.beat_s
