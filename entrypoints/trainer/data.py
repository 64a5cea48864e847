"""Training batches: a synthetic pool made once on the device, or an ImageFolder tree.

Contract: every source is `batches(start_step)`, an endless iterator of device batches
`(images float32 [B, 3, S, S], labels int64 [B])` in step order, starting at `start_step`.
The batch of a step depends on the step index only, never on how often the process was
restarted, so a resumed run sees the batches an uninterrupted run would have seen.

- `SyntheticSource`: `pool_size` batches generated once per worker on its device (seeded by
  seed + rank), step i uses batch i mod pool_size; nothing is generated in the hot loop.
- `ImageFolderSource`: torchvision `ImageFolder` of the "train" channel, resized to the
  model's image size, split over ranks by a `DistributedSampler` (shuffled per epoch by the
  job's seed, `drop_last`) and loaded with `DataLoader(drop_last=True)`, so every step has
  the same shape (a partial batch is a new graph, i.e. a recompilation, on XLA).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, DistributedSampler

from entrypoints.trainer.runtime import Dist, Runtime

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
POOL_SIZE = 4


class SyntheticSource:
    """A fixed pool of random batches on the runtime's device (see the module docstring)."""

    def __init__(self, runtime: Runtime, batch_size: int, image_size: int, num_classes: int,
                 seed: int, dist: Dist, pool_size: int = POOL_SIZE) -> None:
        device = runtime.device
        # CPU and CUDA have seeded generators on the device; XLA tensors have none, so the pool
        # is drawn on the host once and copied to the device once.
        gen_device = device if device.type in ("cpu", "cuda") else torch.device("cpu")
        generator = torch.Generator(device=gen_device)
        generator.manual_seed(seed * 1_000_003 + dist.rank)
        self.pool = []
        for _ in range(pool_size):
            images = torch.randn(batch_size, 3, image_size, image_size, generator=generator, device=gen_device)
            labels = torch.randint(0, num_classes, (batch_size,), generator=generator, device=gen_device)
            self.pool.append((images.to(device), labels.to(device)))
        runtime.mark_step()

    def batches(self, start_step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        step = start_step
        pool, size = self.pool, len(self.pool)
        while True:
            yield pool[step % size]
            step += 1


class SkippingSampler(DistributedSampler):
    """DistributedSampler that starts `skip` samples into its epoch (to resume mid-epoch)."""

    skip = 0

    def __iter__(self):
        indices = list(super().__iter__())
        return iter(indices[self.skip:])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.skip)


def image_folder(root: Path, image_size: int):
    """The ImageFolder dataset under `root`, resized to image_size x image_size, normalised."""
    from torchvision import datasets, transforms

    transform = transforms.Compose([
        transforms.Resize((image_size, image_size)),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
    return datasets.ImageFolder(str(root), transform=transform)


class ImageFolderSource:
    """Batches from an ImageFolder tree (see the module docstring)."""

    def __init__(self, runtime: Runtime, root: Path, batch_size: int, image_size: int, num_classes: int,
                 seed: int, dist: Dist, num_workers: int) -> None:
        if not root.is_dir():
            raise FileNotFoundError(f"training data directory {root} does not exist")
        self.runtime = runtime
        self.dataset = image_folder(root, image_size)
        if len(self.dataset.classes) > num_classes:
            raise ValueError(f"{root} has {len(self.dataset.classes)} classes but model.num_classes is "
                             f"{num_classes}")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.sampler = SkippingSampler(self.dataset, num_replicas=dist.world_size, rank=dist.rank,
                                       shuffle=True, seed=seed, drop_last=True)
        self.steps_per_epoch = self.sampler.num_samples // batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{root} has {len(self.dataset)} images: fewer than one batch of {batch_size} per rank "
                f"over {dist.world_size} ranks")

    def batches(self, start_step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch, offset = divmod(start_step, self.steps_per_epoch)
        while True:
            self.sampler.set_epoch(epoch)
            self.sampler.skip = offset * self.batch_size
            loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=self.sampler, drop_last=True,
                                num_workers=self.num_workers, pin_memory=self.runtime.device.type == "cuda",
                                persistent_workers=False)
            yield from self.runtime.loader(loader)
            epoch, offset = epoch + 1, 0


def train_dir(source: str, channels: dict[str, Path]) -> Path:
    """The directory of real training data: the "train" channel, else a file:// source."""
    if "train" in channels:
        return Path(channels["train"])
    if source.startswith("file://"):
        return Path(source[len("file://"):])
    raise ValueError(f"data.source is {source!r} but the job has no 'train' channel "
                     "(SM_CHANNELS lacks it): the backend should have mounted the data there")


def create(runtime: Runtime, spec: dict, dist: Dist, channels: dict[str, Path]):
    """The batch source for a job spec (`spec["data"]["source"]` synthetic or a location)."""
    model, training, data = spec["model"], spec["training"], spec.get("data", {})
    source = data.get("source", "synthetic")
    common = dict(batch_size=int(training["batch_size"]), image_size=int(model["image_size"]),
                  num_classes=int(model["num_classes"]), seed=int(training.get("seed", 0)), dist=dist)
    if source == "synthetic":
        return SyntheticSource(runtime, **common)
    return ImageFolderSource(runtime, train_dir(source, channels), num_workers=int(data.get("num_workers", 0)),
                             **common)
