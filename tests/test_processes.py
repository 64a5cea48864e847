"""processes: live processes, command lines and process trees through psutil."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from job_waits import patience

from orchestrator import processes

# A group leader whose child leaves the group for a session of its own (as torchrun's workers
# do), then both sleep.
TREE = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_live_process_a_zombie_and_none():
    assert processes.process_alive(os.getpid())
    assert not processes.process_alive(None) and not processes.process_alive(0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + patience(30)
    while processes.process_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # exited and not reaped: a zombie, not alive
    assert not processes.process_alive(child.pid)
    child.wait()
    assert not processes.process_alive(child.pid)


def test_runs_tells_the_recorded_program_from_a_recycled_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"])
    try:
        # Popen may return before the exec has replaced the forked copy of this process, whose
        # /proc/PID/cmdline is still pytest's (or empty) until then.
        deadline = time.monotonic() + patience(30)
        while "marker-arg" not in (processes.command_line(child.pid) or []) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert processes.runs(child.pid, ["marker-arg"], ["-c"])
        assert not processes.runs(child.pid, ["marker-arg"], ["another-job-dir"])
        assert processes.command_line(child.pid)[-1] == "marker-arg"
    finally:
        child.kill()
        child.wait()
    assert not processes.runs(child.pid, ["marker-arg"]) and processes.command_line(child.pid) is None
    assert not processes.runs(None, ["marker-arg"])


def test_a_tree_includes_descendants_that_left_the_group_and_kill_tree_ends_them():
    leader = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert leader.stdout.readline().strip() == b"ready"
        tree = processes.process_tree(leader.pid)
        assert leader.pid in tree and len(tree) == 2
        (other,) = [pid for pid in tree if pid != leader.pid]
        assert os.getpgid(other) != leader.pid  # outside the group: found as a descendant
        processes.kill_tree(leader.pid, signal.SIGKILL)
        leader.wait(timeout=patience(30))
        deadline = time.monotonic() + patience(30)
        while processes.process_alive(other) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not processes.process_alive(other)
    finally:
        leader.kill()
        leader.wait()
    processes.kill_tree(None, signal.SIGKILL)  # nothing to signal: no error
