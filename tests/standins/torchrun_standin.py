"""A stand-in for `python -m torch.distributed.run` (torchrun) that starts without importing torch.

The launcher's tests run it through `ORCHESTRATOR_TORCHRUN_MODULE` (the `fake_train` fixture
sets it); `tests/test_torchrun_standin.py` holds the same process contract on the real torchrun.
What it keeps of torchrun's contract (torch/distributed/run.py and
torch/distributed/elastic/{agent/server,multiprocessing}/api.py in torch 2.9), and nothing more:

- the command line the launcher builds: --nnodes, --node_rank, --nproc_per_node, --master_addr,
  --master_port, then `-m MODULE ARGS...`;
- static rendezvous over several nodes: node 0 listens on the master port, the other nodes
  connect to it, and no worker starts before every node has joined (a port in use fails node 0
  at once, as the c10d store does);
- each worker's environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
  ROLE_RANK, ROLE_WORLD_SIZE, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*,
  and OMP_NUM_THREADS=1 for more than one worker unless set;
- it runs fake trainers only: it hosts no c10d store for the workers, so a trainer that calls
  `init_process_group` (entrypoints.trainer.train) is refused with exit 2;
- each worker in a session (and process group) of its own, signalled as a group; the workers
  share its stdout and stderr;
- a worker that fails: the others get SIGTERM, then SIGKILL after 30 s; exit code 1;
- SIGTERM or SIGINT (also SIGHUP, SIGQUIT): passed to every worker, SIGKILL after 30 s;
  exit code 1 (torchrun re-raises its SignalException).
It does not reproduce torchrun's failure report (the ChildFailedError summary): the tests that
read that report run the real torchrun.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

CLOSE_TIMEOUT_S = 30.0  # torchrun's PContext.close(timeout=30)
JOIN_TIMEOUT_S = 900.0  # the static rendezvous' join timeout (c10d store)


class Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"Process {os.getpid()} got signal: {signum}")
        self.signum = signum


def _raise_signal(signum: int, _frame) -> None:
    raise Signalled(signum)


def _rendezvous(nnodes: int, node_rank: int, addr: str, port: int) -> socket.socket | None:
    """Every node joined: node 0 holds its listening socket (the store) until the end."""
    if nnodes == 1:
        return None
    if node_rank == 0:
        store = socket.socket()
        store.bind(("", port))  # all addresses, as the c10d store binds
        store.listen()
        peers = [store.accept()[0] for _ in range(nnodes - 1)]
        for peer in peers:
            peer.sendall(b"go")
            peer.close()
        return store
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        try:
            with socket.create_connection((addr, port), timeout=5) as conn:
                conn.settimeout(JOIN_TIMEOUT_S)
                if conn.recv(2) == b"go":
                    return None
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"rendezvous at {addr}:{port} timed out")
        time.sleep(0.2)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)  # the worker's own session and group, as torchrun signals it
    except ProcessLookupError:
        pass


def _close(workers: list[subprocess.Popen], signum: int) -> None:
    """torchrun's close: `signum` to every live worker's group, SIGKILL to those left after 30 s."""
    for proc in workers:
        if proc.poll() is None:
            _signal_group(proc, signum)
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    for proc in workers:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in workers:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="torchrun_standin")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node_rank", type=int, default=0)
    parser.add_argument("--nproc_per_node", type=int, default=1)
    parser.add_argument("--master_addr", default="127.0.0.1")
    parser.add_argument("--master_port", type=int, default=29500)
    parser.add_argument("-m", dest="module", required=True)
    args, rest = parser.parse_known_args(argv)
    if args.module.startswith("entrypoints."):
        print(f"[torchrun stand-in] runs fake trainers only, not {args.module}: mark the test real_torchrun",
              file=sys.stderr, flush=True)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, _raise_signal)
    workers: list[subprocess.Popen] = []
    store = None
    try:
        store = _rendezvous(args.nnodes, args.node_rank, args.master_addr, args.master_port)
        world = args.nnodes * args.nproc_per_node
        for local in range(args.nproc_per_node):
            rank = args.node_rank * args.nproc_per_node + local
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(world),
                       LOCAL_WORLD_SIZE=str(args.nproc_per_node), GROUP_RANK=str(args.node_rank),
                       ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(world), GROUP_WORLD_SIZE=str(args.nnodes),
                       ROLE_NAME="default", MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port),
                       TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0",
                       TORCHELASTIC_RUN_ID="none")
            if args.nproc_per_node > 1:
                env.setdefault("OMP_NUM_THREADS", "1")
            workers.append(subprocess.Popen([sys.executable, "-m", args.module, *rest], env=env,
                                            start_new_session=True))
        while True:
            codes = [proc.poll() for proc in workers]
            failed = [(i, code) for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                local, code = failed[0]
                print(f"[torchrun stand-in] worker rank {args.node_rank * args.nproc_per_node + local} "
                      f"exited with code {code}", file=sys.stderr, flush=True)
                _close(workers, signal.SIGTERM)
                return 1
            if all(code == 0 for code in codes):
                return 0
            time.sleep(0.05)
    except Signalled as exc:
        print(f"[torchrun stand-in] {exc}: stopping the workers", file=sys.stderr, flush=True)
        _close(workers, exc.signum)
        return 1
    finally:
        if store is not None:
            store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
