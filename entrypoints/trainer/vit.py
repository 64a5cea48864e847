"""The Vision Transformer: timm's, with an optional conv-free patch embedding.

Contract:
- `build(model_spec)` takes the `model` mapping of a job spec (field names as in
  orchestrator/spec/models.py ModelSpec) and returns a timm VisionTransformer with random weights
  (`pretrained=False` always: nothing is downloaded). `patch_size`, `depth`, `embed_dim` and
  `num_heads` override the arch's values when given.
- `patch_embed: linear` swaps timm's Conv2d patch embedding for `LinearPatchEmbed`: the image
  is cut into non-overlapping patches by reshape/permute and projected by one `nn.Linear`.
  That is the same function as the stride-p, kernel-p convolution (Neuron compiles matmuls
  far better than convolutions); `conv_to_linear_state` maps weights between the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from timm.layers import Format, PatchEmbed
from torch import nn

PATCH_WEIGHT = "patch_embed.proj.weight"


class LinearPatchEmbed(PatchEmbed):
    """timm's PatchEmbed with the Conv2d replaced by reshape + `nn.Linear`.

    Accepts the same constructor arguments (timm's VisionTransformer passes them through
    `embed_layer`). The linear weight is the conv weight flattened in (channel, row, column)
    order: `linear.weight == conv.weight.reshape(embed_dim, -1)`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conv = self.proj
        in_features = conv.in_channels * self.patch_size[0] * self.patch_size[1]
        self.proj = nn.Linear(in_features, conv.out_channels, bias=conv.bias is not None,
                              device=conv.weight.device, dtype=conv.weight.dtype)
        if self.output_fmt not in (Format.NCHW, Format.NHWC):
            raise ValueError(f"LinearPatchEmbed supports NLC/NHWC/NCHW outputs, not {self.output_fmt}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        ph, pw = self.patch_size
        if self.img_size is not None and self.strict_img_size:
            if (height, width) != tuple(self.img_size):
                raise ValueError(f"input is {height}x{width}, the model expects {self.img_size[0]}x{self.img_size[1]}")
        if self.dynamic_img_pad:
            pad_h, pad_w = (ph - height % ph) % ph, (pw - width % pw) % pw
            x = nn.functional.pad(x, (0, pad_w, 0, pad_h))
            height, width = height + pad_h, width + pad_w
        elif height % ph or width % pw:
            raise ValueError(f"input {height}x{width} is not divisible by the patch size {ph}x{pw}")
        gh, gw = height // ph, width // pw
        # (B, C, gh, ph, gw, pw) -> (B, gh, gw, C, ph, pw): each patch flattened as the conv sees it.
        patches = x.reshape(batch, channels, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5)
        x = self.proj(patches.reshape(batch, gh, gw, channels * ph * pw))
        if self.flatten:
            x = x.reshape(batch, gh * gw, -1)
        elif self.output_fmt == Format.NCHW:
            x = x.permute(0, 3, 1, 2)
        return self.norm(x)


def timm_kwargs(model_spec: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for `timm.create_model` from the spec's model mapping."""
    kwargs: dict[str, Any] = {
        "pretrained": False,
        "img_size": int(model_spec.get("image_size", 224)),
        "num_classes": int(model_spec.get("num_classes", 1000)),
    }
    for key in ("patch_size", "depth", "embed_dim", "num_heads"):
        if model_spec.get(key) is not None:
            kwargs[key] = int(model_spec[key])
    if model_spec.get("patch_embed", "linear") == "linear":
        kwargs["embed_layer"] = LinearPatchEmbed
    return kwargs


def build(model_spec: Mapping[str, Any]) -> nn.Module:
    """A randomly initialised timm ViT for the spec (see the module docstring)."""
    import timm

    arch = model_spec.get("arch", "vit_base_patch16_224")
    kind = model_spec.get("patch_embed", "linear")
    if kind not in ("linear", "conv"):
        raise ValueError(f"model.patch_embed must be linear or conv, not {kind!r}")
    if kind == "linear":
        # Hybrid ViTs (a ResNet or conv stem, timm's HybridEmbed) would silently lose their stem
        # to our embed_layer: look at what the architecture builds by itself first. On the meta
        # device that allocates nothing and takes a few tens of milliseconds.
        kwargs = {k: v for k, v in timm_kwargs(model_spec).items() if k != "embed_layer"}
        with torch.device("meta"):
            own = type(getattr(timm.create_model(arch, **kwargs), "patch_embed", None))
        if own is not PatchEmbed:
            raise ValueError(f"{arch} embeds patches with {own.__name__} (a hybrid or non-ViT arch), not "
                             "timm's PatchEmbed; use patch_embed: conv for it")
    model = timm.create_model(arch, **timm_kwargs(model_spec))
    if kind == "linear" and not isinstance(getattr(model, "patch_embed", None), LinearPatchEmbed):
        raise ValueError(f"{arch} does not use timm's PatchEmbed (a hybrid or non-ViT arch); "
                         "use patch_embed: conv for it")
    return model


def conv_to_linear_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict of a conv-patch model, reshaped for the linear-patch model of the same spec."""
    out = dict(state)
    weight = out.get(PATCH_WEIGHT)
    if weight is not None and weight.dim() == 4:
        out[PATCH_WEIGHT] = weight.reshape(weight.shape[0], -1)
    return out


def linear_to_conv_state(state: Mapping[str, torch.Tensor], patch_size: tuple[int, int],
                         in_chans: int = 3) -> dict[str, torch.Tensor]:
    """The inverse of `conv_to_linear_state`, to hand weights to tools that expect timm's layout."""
    out = dict(state)
    weight = out.get(PATCH_WEIGHT)
    if weight is not None and weight.dim() == 2:
        out[PATCH_WEIGHT] = weight.reshape(weight.shape[0], in_chans, *patch_size)
    return out
