"""entrypoints.launcher.torchrun: the command line of one host's torchrun."""

from __future__ import annotations

import sys

from launch_harness import make_job

from entrypoints.launcher import torchrun
from entrypoints.shared import contract


def test_torchrun_command_from_the_contract(orch_home, tmp_path):
    job = make_job(itype="ml.trn1n.32xlarge", count=2, workers=3)
    ctr = contract.Contract.from_env({**contract.sm_environment(tmp_path, ["algo-1", "algo-2"], "algo-2",
                                                                "ml.trn1n.32xlarge", {}, [])})
    command = torchrun.torchrun_command(job, ctr, {}, tmp_path / "job.json", tmp_path / "ranks", "entrypoints.trainer.train")
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    flags = dict(zip(command[3:13:2], command[4:14:2], strict=True))
    assert flags == {"--nnodes": "2", "--node_rank": "1", "--nproc_per_node": "3", "--master_addr": "algo-1",
                     "--master_port": str(contract.MASTER_PORT)}
    assert command[13:] == ["-m", "entrypoints.trainer.train", "--job", str(tmp_path / "job.json"),
                            "--stats-dir", str(tmp_path / "ranks")]
    port = torchrun.torchrun_command(job, ctr, {torchrun.MASTER_PORT_ENV: "4242"}, tmp_path, tmp_path, "m")
    assert port[port.index("--master_port") + 1] == "4242"


def test_another_torchrun_module_is_named_by_the_environment(orch_home, tmp_path):
    job = make_job(workers=2)
    ctr = contract.Contract.from_env(contract.sm_environment(tmp_path, ["algo-1"], "algo-1", "ml.trn1.2xlarge", {}, []))
    env = {torchrun.TORCHRUN_MODULE_ENV: "torchrun_standin"}
    command = torchrun.torchrun_command(job, ctr, env, tmp_path / "job.json", tmp_path / "ranks", "m")
    assert command[:3] == [sys.executable, "-m", "torchrun_standin"]
    # An empty value is no choice: the real torchrun.
    command = torchrun.torchrun_command(job, ctr, {torchrun.TORCHRUN_MODULE_ENV: ""}, tmp_path, tmp_path, "m")
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
