"""entrypoints/launcher/container.py: launch.py as the container's first process.

The SM_* variables are checked against the real SageMaker training toolkit's own (a dev
dependency), the gethostname() override is built and preloaded for real, orphans are reaped for
real; and launch.py under a stop signal kills a torchrun that outlives half the grace period.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from job_waits import patience

from entrypoints.launcher import container
from entrypoints.shared import contract

ROOT = Path(__file__).resolve().parents[1]
# What launch.py and train.py read (contract.Contract, data channels): the fallback must agree
# with the toolkit on every one of them.
READ_BY_US = ("SM_HOSTS", "SM_CURRENT_HOST", "SM_CURRENT_INSTANCE_TYPE", "SM_CHANNELS", "SM_CHANNEL_CODE",
              "SM_CHANNEL_TRAIN", "SM_MODEL_DIR", "SM_OUTPUT_DIR", "SM_OUTPUT_DATA_DIR", "SM_INPUT_DIR", "SM_HPS",
              "SM_NETWORK_INTERFACE_NAME", "SM_NUM_GPUS")


def host_tree(root: Path, host: str = "algo-2", hosts=("algo-1", "algo-2")) -> Path:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps({
        "sagemaker_program": '"launch.py"', "sagemaker_region": '"us-east-1"', "sagemaker_job_name": '"j-1"',
        "sagemaker_container_log_level": "20", "lr": "0.001"}))
    (config / "resourceconfig.json").write_text(json.dumps({
        "current_host": host, "hosts": list(hosts), "network_interface_name": "eth0",
        "current_instance_type": "ml.trn1.32xlarge", "current_group_name": "homogeneousCluster",
        "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.trn1.32xlarge",
                             "hosts": list(hosts)}]}))
    channel = {"S3DistributionType": "FullyReplicated", "TrainingInputMode": "File", "RecordWrapperType": "None"}
    (config / "inputdataconfig.json").write_text(json.dumps({"code": channel, "train": channel}))
    return root


def test_the_emulated_sm_variables_are_the_toolkits(tmp_path):
    pytest.importorskip("sagemaker_training")
    root = host_tree(tmp_path / "ml")
    # The toolkit reads SAGEMAKER_BASE_DIR when imported: a fresh interpreter per tree.
    script = ("import json; from entrypoints.launcher import container; "
              "print(json.dumps(container.toolkit_sm_environment()))")
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(root), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=patience(120))
    assert done.returncode == 0, done.stderr
    toolkit, source = json.loads(done.stdout.strip().splitlines()[-1])
    assert source.startswith("sagemaker-training ")
    ours = container.emulated_sm_environment(root)
    for name in READ_BY_US:
        got, want = ours[name], toolkit[name]
        if name in ("SM_HOSTS", "SM_CHANNELS", "SM_HPS"):
            got, want = json.loads(got), json.loads(want)
        assert got == want, name
    base = {"SAGEMAKER_BASE_DIR": str(root), "SM_NUM_CPUS": ours["SM_NUM_CPUS"]}
    assert contract.Contract.from_env({**ours, **base}) == contract.Contract.from_env({**toolkit, **base})


def test_the_toolkit_can_be_switched_off_for_the_fallback(monkeypatch):
    monkeypatch.setenv(container.TOOLKIT_ENV, "off")
    assert container.toolkit_sm_environment() is None


def test_adopting_keeps_what_the_platform_set(tmp_path, monkeypatch):
    root = host_tree(tmp_path / "ml", host="algo-1")
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(root))
    monkeypatch.setenv(container.TOOLKIT_ENV, "off")
    for name in [k for k in os.environ if k.startswith("SM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SM_NUM_CPUS", "1")  # the local backend's per-host share
    setup = container.adopt_sm_environment(lambda line: None)
    assert setup.sm_environment == "emulated" and setup.record()["entrypoint"] is True
    assert os.environ["SM_NUM_CPUS"] == "1" and os.environ["SM_CURRENT_HOST"] == "algo-1"
    assert contract.Contract.from_env().output_data_dir == root / "output" / "data"


def test_the_hostname_override_is_built_and_preloaded_for_the_training_processes(tmp_path):
    # The training image's /changehostname.c has this shape: gethostname() returning a
    # placeholder the start script replaces (aws-neuron/deep-learning-containers
    # common/changehostname.c). Ours, written for the test, has the same placeholder.
    source = tmp_path / "changehostname.c"
    source.write_text('#include <string.h>\n#include <stddef.h>\n'
                      'int gethostname(char *name, size_t len) {\n'
                      '    const char *val = PLACEHOLDER_HOSTNAME;\n'
                      '    strncpy(name, val, len);\n    return 0;\n}\n')
    lib = container.hostname_library(source, "algo-2", tmp_path)
    env = {**os.environ, "LD_PRELOAD": str(lib)}
    done = subprocess.run([sys.executable, "-c", "import socket; print(socket.gethostname())"], env=env,
                          capture_output=True, text=True, timeout=patience(60))
    assert done.stdout.strip() == "algo-2" != socket.gethostname()


def test_prepare_preloads_it_only_when_the_image_has_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv(container.CHANGEHOSTNAME_C_ENV, str(tmp_path / "absent.c"))
    setup = container.Setup(sm_environment="emulated")
    ctr = contract.Contract.from_env({"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-1"})
    monkeypatch.setattr(container, "install_requirements", lambda code_dir, toolkit: "installed")
    container.prepare(setup, ctr, lambda line: None)
    assert setup.hostname is None and "LD_PRELOAD" not in setup.env and setup.requirements == "installed"
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C PLACEHOLDER_HOSTNAME")
    monkeypatch.setenv(container.CHANGEHOSTNAME_C_ENV, str(broken))
    container.prepare(setup, ctr, lambda line: None)
    assert setup.hostname is None and setup.warnings[0].startswith("host name not set: building")


def test_requirements_are_installed_or_the_job_fails_with_the_reason(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    assert container.install_requirements(code, toolkit=False) == "none"
    (code / "requirements.txt").write_text("pytest\n")  # installed already: pip needs no network
    assert container.install_requirements(code, toolkit=False) == "installed"
    (code / "requirements.txt").write_text("this is ~~ not a requirement\n")  # refused before any download
    with pytest.raises(RuntimeError, match="requirements.txt could not be installed"):
        container.install_requirements(code, toolkit=False)


def test_waiting_for_host_names_retries_then_gives_up_naming_the_host():
    calls = []

    def resolve(host):
        calls.append(host)
        if host == "algo-2" and calls.count("algo-2") < 3:
            raise socket.gaierror("not yet")

    container.wait_for_hosts(["algo-1", "algo-2"], timeout_s=60, resolve=resolve, sleep=lambda s: None)
    assert calls == ["algo-1", "algo-2", "algo-2", "algo-2"]

    def never(host):
        raise socket.gaierror("no such host")

    with pytest.raises(RuntimeError, match="host algo-9 did not resolve within 0 s"):
        container.wait_for_hosts(["algo-9"], timeout_s=0.0, resolve=never, sleep=lambda s: None)


def test_as_a_subreaper_launch_py_inherits_orphans_and_reaps_them(tmp_path):
    # In a process of its own: a subreaper keeps that role for life.
    script = """
import subprocess, sys, time
from entrypoints.launcher import container
assert container.become_subreaper()
# sh starts a background sleep and exits at once: the sleep is orphaned, and comes to us.
subprocess.run(["sh", "-c", "sleep 0.5 & echo $!"], stdout=open(sys.argv[1], "w"), check=True)
orphan = int(open(sys.argv[1]).read())
assert any(pid == orphan for pid, ppid, _ in container._children_table() if ppid == __import__("os").getpid())
deadline = time.time() + 30
reaped = []
while orphan not in reaped and time.time() < deadline:
    reaped += container.reap_orphans(keep=set())
    time.sleep(0.05)
print("reaped" if orphan in reaped else "not reaped")
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "pid")], capture_output=True, text=True,
                          timeout=patience(60), env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "reaped", done.stderr


def test_orphaned_zombies_are_reaped_and_our_own_children_are_not():
    mine = subprocess.Popen([sys.executable, "-c", "pass"])
    orphan = subprocess.Popen([sys.executable, "-c", "pass"])
    for proc in (mine, orphan):
        deadline = time.time() + patience(30)
        while container._children_table() and not any(
                pid == proc.pid and state == "Z" for pid, _, state in container._children_table()):
            assert time.time() < deadline, "the child never exited"
            time.sleep(0.05)
    assert container.reap_orphans(keep={mine.pid}) == [orphan.pid]
    assert mine.wait(timeout=patience(10)) == 0  # still ours to wait for, with its real exit code
    states = {pid: state for pid, _, state in container._children_table()}
    assert orphan.pid not in states


def test_a_torchrun_that_outlives_half_the_grace_period_is_killed(orch_home, tmp_path, fake_train):
    from test_launch import Host, make_job, start_launcher, wait_for

    job = make_job(workers=1, mode="off")
    host = Host(tmp_path, job)
    proc = start_launcher(host, FAKE_TRAIN_SLEEP="300", FAKE_TRAIN_IGNORE_SIGTERM="1", ORCHESTRATOR_STOP_GRACE_S="4")
    try:
        wait_for(lambda: any("fake-train rank 0 warm" in line for line in proc.lines), 60, "no start", proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=patience(60)) == 1
    finally:
        proc.kill()
    assert any("torchrun still runs 2 s after the stop signal: killing it and its workers" in line
               for line in proc.lines), "".join(proc.lines)
    assert host.results["status"] == "stopped"


@pytest.mark.parametrize("toolkit", ["on", "off"])
def test_a_failed_set_up_fails_the_job_with_its_reason_and_a_record(orch_home, tmp_path, monkeypatch, toolkit):
    """launch.py --container from the unpacked source archive, as the entrypoint runs it, with a
    requirements.txt pip refuses (before any download): the job fails, saying why, in the
    failure file and in results.json, and runs no torchrun."""
    import io
    import tarfile

    from test_launch import make_job

    from orchestrator import sourcedir

    if toolkit == "on":
        pytest.importorskip("sagemaker_training")
    job = make_job(workers=1, mode="off")
    root = host_tree(tmp_path / "ml", host="algo-1", hosts=("algo-1",))
    code = root / "code"
    with tarfile.open(fileobj=io.BytesIO(sourcedir.build_archive(job))) as tar:
        tar.extractall(code, filter="data")
    (code / "requirements.txt").write_text("this is ~~ not a requirement\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_") and k != "PYTHONPATH"}
    env.update({"SAGEMAKER_BASE_DIR": str(root), "SM_STUDIO_LOCAL_MODE": "true"})
    if toolkit == "off":
        env[container.TOOLKIT_ENV] = "off"
    done = subprocess.run([sys.executable, str(code / "launch.py"), "--container"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=patience(180))
    assert done.returncode == 1, done.stdout + done.stderr
    failure = (root / "output" / "failure").read_text()
    assert failure.startswith("algo-1: container set-up failed: ") and "requirements" in failure
    results = json.loads((root / "output" / "data" / "results.json").read_text())
    assert results["status"] == "failed" and results["container"]["entrypoint"] is True
    assert results["container"]["sm_environment"].startswith("sagemaker-training" if toolkit == "on" else "emulated")
    assert "torch.distributed.run" not in done.stdout
