"""Where a rank runs: its place in the job (`Dist`) and the device runtime (`xla` or `native`).

Contract:
- `Dist.from_env()` reads torchrun's variables once (RANK, WORLD_SIZE, LOCAL_RANK,
  LOCAL_WORLD_SIZE, GROUP_RANK); without them the process is rank 0 of 1.
- `create(name, dist, precision)` returns a `Runtime`; every runtime offers the same steps:
  `setup` (process group), `prepare` (device placement, DDP, torch.compile), `autocast`,
  `backward`, `optimizer_step`, `mark_step` (end of the traced step), `sync` (wait for the
  device, for timing), `loader` (host batches -> device batches), `compiled_graphs`,
  `agree_min`, `to_cpu`, `state_dict`/`load_state_dict` (loss-scaler state), `shutdown`.
- `xla`: torch-xla. One device per process, `init_process_group("xla")` when world > 1,
  gradients all-reduced by `xm.optimizer_step`, `torch_xla.sync()` ends each step, bf16 by
  `torch.autocast("xla")`. fp16 is refused (Neuron trains in bf16).
- `native`: eager PyTorch on CUDA (nccl) when available, else CPU (gloo); DDP when world > 1;
  optional `torch.compile`; bf16/fp16 autocast, fp16 with a gradient scaler.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from entrypoints.trainer import isa_probe

PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Dist:
    """This process's place in the job, read once from torchrun's environment."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_node_main(self) -> bool:
        return self.local_rank == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Dist:
        env = os.environ if env is None else env

        def number(name: str, default: int) -> int:
            raw = env.get(name, "")
            try:
                return int(raw) if raw != "" else default
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not an integer") from None

        dist = cls(
            rank=number("RANK", 0),
            world_size=number("WORLD_SIZE", 1),
            local_rank=number("LOCAL_RANK", 0),
            local_world_size=number("LOCAL_WORLD_SIZE", 1),
            node_rank=number("GROUP_RANK", 0),
        )
        if not (0 <= dist.rank < dist.world_size and 0 <= dist.local_rank < dist.local_world_size):
            raise ValueError(f"inconsistent torchrun environment: {dist}")
        return dist


class Runtime(ABC):
    """One device runtime. Subclasses: `XlaRuntime`, `NativeRuntime` (see the module docstring)."""

    name: str
    device: torch.device

    def __init__(self, dist: Dist, precision: str) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        self.dist = dist
        self.precision = precision
        self.group_initialised = False
        # Whether torch.compile splits the DDP graph per bucket (native, compiled, world > 1).
        self.ddp_split_graphs: bool | None = None

    @abstractmethod
    def setup(self) -> None:
        """Join the process group (world > 1)."""

    @abstractmethod
    def prepare(self, module: nn.Module, compile: bool) -> nn.Module:
        """The module to call in the step (wrapped for DDP/compile); `module` must already
        sit on `self.device`."""

    @abstractmethod
    def autocast(self) -> contextlib.AbstractContextManager:
        """The mixed-precision context for the forward pass."""

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    @abstractmethod
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Reduce gradients if the runtime does that here, then step."""

    @abstractmethod
    def mark_step(self) -> None:
        """End of one traced step: xla cuts and launches its graph here."""

    @abstractmethod
    def sync(self) -> None:
        """Block until the device has finished all queued work (for step timing only)."""

    def loader(self, batches: Iterable) -> Iterable:
        """Host batches from a DataLoader as device batches."""
        return batches

    @abstractmethod
    def compiled_graphs(self) -> int:
        """Graphs compiled so far in this process (0 for eager)."""

    def compiler_cache(self) -> dict[str, int]:
        """Lookups of the compiler's own caches in this process, by layer and outcome
        (`fxgraph_hit`, `aotautograd_miss`, ...); empty where the runtime keeps no such counts."""
        return {}

    @abstractmethod
    def agree_min(self, value: int, tag: str) -> int:
        """The minimum of `value` over all ranks (every rank must call it)."""

    def to_cpu(self, obj: Any) -> Any:
        """`obj` (nested dicts/lists of tensors) with every tensor detached and on the CPU."""
        if isinstance(obj, torch.Tensor):
            return obj.detach().cpu()
        if isinstance(obj, dict):
            return {k: self.to_cpu(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.to_cpu(v) for v in obj)
        return obj

    def state_dict(self) -> dict:
        """Runtime state that a checkpoint must carry (the fp16 loss scaler)."""
        return {}

    def load_state_dict(self, state: Mapping) -> None:
        del state

    def shutdown(self) -> None:
        if self.group_initialised:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.group_initialised = False


# (layer name in stats, torch counters group, counter prefix): inductor's compiled-graph cache
# and AOTAutograd's cache of the traced forward/backward pair in front of it.
COMPILER_CACHE_COUNTERS = (("fxgraph", "inductor", "fxgraph_cache"),
                           ("aotautograd", "aot_autograd", "autograd_cache"))


def gradient_bytes(module: nn.Module) -> int:
    """Bytes of the gradients DDP all-reduces for `module` (its trainable parameters)."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def ddp_split_pays(grad_bytes: int, bucket_cap_bytes: int) -> bool:
    """Whether torch.compile should split a DDP model's graph at gradient-bucket boundaries.

    Dynamo's DDP optimizer compiles one subgraph per bucket so that each bucket's all-reduce
    can start while backward still runs. When every gradient fits in one bucket there is
    nothing to overlap, and the split costs every warm start: AOTAutograd refuses to cache
    graphs compiled through the splitter, so a job with a full inductor cache re-traces the
    joint forward/backward graph in each rank. Split only when there is more than one bucket.
    """
    return grad_bytes > bucket_cap_bytes


class NativeRuntime(Runtime):
    name = "native"

    def __init__(self, dist: Dist, precision: str) -> None:
        super().__init__(dist, precision)
        if torch.cuda.is_available():
            self.device = torch.device("cuda", dist.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.compiled = False
        self.isa_memo = False
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None

    def setup(self) -> None:
        if self.dist.world_size > 1:
            import torch.distributed as dist

            backend = "nccl" if self.device.type == "cuda" else "gloo"
            kwargs = {"device_id": self.device} if self.device.type == "cuda" else {}
            dist.init_process_group(backend, rank=self.dist.rank, world_size=self.dist.world_size, **kwargs)
            self.group_initialised = True

    def prepare(self, module: nn.Module, compile: bool) -> nn.Module:
        model = module
        if self.dist.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(module, device_ids=device_ids)
        if compile:
            if self.device.type == "cpu":
                # Inductor probes the CPU's vector ISAs in fresh interpreters; answer the
                # probes from memos kept in the compile cache, so a warm job runs none.
                self.isa_memo = isa_probe.install(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
            if self.dist.world_size > 1:
                self.ddp_split_graphs = ddp_split_pays(gradient_bytes(module), model.bucket_bytes_cap)
                from torch._dynamo import config as dynamo_config

                dynamo_config.optimize_ddp = self.ddp_split_graphs
            model = torch.compile(model)
            self.compiled = True
        return model

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def mark_step(self) -> None:
        """Eager: every op has already been dispatched."""

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loader(self, batches: Iterable) -> Iterator:
        non_blocking = self.device.type == "cuda"
        for images, labels in batches:
            yield images.to(self.device, non_blocking=non_blocking), labels.to(self.device, non_blocking=non_blocking)

    def compiled_graphs(self) -> int:
        if not self.compiled:
            return 0
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def compiler_cache(self) -> dict[str, int]:
        if not self.compiled:
            return {}
        from torch._dynamo.utils import counters

        found = {f"{layer}_{outcome}": int(counters[group][f"{prefix}_{outcome}"])
                 for layer, group, prefix in COMPILER_CACHE_COUNTERS for outcome in ("hit", "miss", "bypass")}
        return found | (isa_probe.counts() if self.isa_memo else {})

    def agree_min(self, value: int, tag: str) -> int:
        if self.dist.world_size == 1:
            return value
        import torch.distributed as dist

        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        return int(tensor.item())

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: Mapping) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


class XlaRuntime(Runtime):
    name = "xla"

    def __init__(self, dist: Dist, precision: str) -> None:
        if precision == "fp16":
            raise ValueError("runtime xla trains in bf16 or fp32; fp16 is not supported on Neuron")
        super().__init__(dist, precision)
        import torch_xla

        self.device = torch_xla.device()

    def setup(self) -> None:
        import torch_xla.runtime as xr

        seen = xr.world_size()
        if seen != self.dist.world_size:
            raise RuntimeError(
                f"torch-xla sees a world of {seen} but torchrun started {self.dist.world_size} ranks; "
                "with PJRT_DEVICE=CPU torch-xla runs one process only: use workers_per_node 1 or "
                "runtime native")
        if self.dist.world_size > 1:
            import torch.distributed as dist
            import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)

            dist.init_process_group("xla", init_method="xla://")
            self.group_initialised = True

    def prepare(self, module: nn.Module, compile: bool) -> nn.Module:
        if compile:
            raise ValueError("compile: true needs runtime native (xla always compiles its graphs)")
        return module

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "bf16":
            return torch.autocast("xla", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(optimizer)

    def mark_step(self) -> None:
        import torch_xla

        torch_xla.sync()

    def sync(self) -> None:
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()

    def loader(self, batches: Iterable) -> Iterable:
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        return MpDeviceLoader(batches, self.device)

    def compiled_graphs(self) -> int:
        import torch_xla.debug.metrics as met

        return int(met.counter_value("UncachedCompile") or 0)

    def agree_min(self, value: int, tag: str) -> int:
        if self.dist.world_size == 1:
            return value
        import torch_xla.core.xla_model as xm

        return int(xm.mesh_reduce(tag, value, min))

    def to_cpu(self, obj: Any) -> Any:
        import torch_xla

        # Materialise pending lazy work once, rather than per tensor on transfer.
        torch_xla.sync()
        return super().to_cpu(obj)


def create(name: str, dist: Dist, precision: str) -> Runtime:
    """The runtime called `name` ("xla" or "native")."""
    if name == "native":
        return NativeRuntime(dist, precision)
    if name == "xla":
        return XlaRuntime(dist, precision)
    raise ValueError(f"training.runtime must be xla or native, not {name!r}")
