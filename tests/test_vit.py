"""entrypoints/trainer/vit.py: the timm ViT and the conv-free patch embedding."""

from __future__ import annotations

import pytest

# torch, timm and the modules that import them are imported when the first test here runs,
# not at collection: every test process collects this file, most never run it.
torch = nn = PatchEmbed = vit = None


@pytest.fixture(autouse=True, scope="module")
def _torch_modules():
    global torch, nn, PatchEmbed, vit
    import torch
    from timm.layers import PatchEmbed
    from torch import nn

    from entrypoints.trainer import vit

TINY = {"arch": "vit_tiny_patch16_224", "image_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 48,
        "num_heads": 3, "num_classes": 7}


def _pair(**kwargs) -> tuple[PatchEmbed, vit.LinearPatchEmbed]:
    torch.manual_seed(0)
    conv = PatchEmbed(**kwargs)
    linear = vit.LinearPatchEmbed(**kwargs)
    state = vit.conv_to_linear_state({f"patch_embed.{k}": v for k, v in conv.state_dict().items()})
    linear.load_state_dict({k.removeprefix("patch_embed."): v for k, v in state.items()})
    return conv, linear


@pytest.mark.parametrize("kwargs, image", [
    (dict(img_size=32, patch_size=8, in_chans=3, embed_dim=24), (5, 3, 32, 32)),
    (dict(img_size=(48, 32), patch_size=16, in_chans=3, embed_dim=16), (2, 3, 48, 32)),
    (dict(img_size=28, patch_size=7, in_chans=1, embed_dim=10, bias=False), (3, 1, 28, 28)),
])
def test_linear_patch_embed_equals_conv(kwargs, image):
    conv, linear = _pair(**kwargs)
    x = torch.randn(*image)
    expected = conv(x)
    got = linear(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert not any(isinstance(m, nn.Conv2d) for m in linear.modules())


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_linear_patch_embed_unflattened_formats(fmt):
    conv, linear = _pair(img_size=32, patch_size=8, embed_dim=12, output_fmt=fmt, strict_img_size=False)
    x = torch.randn(2, 3, 24, 40)
    torch.testing.assert_close(linear(x), conv(x), atol=1e-5, rtol=0)


def test_linear_patch_embed_dynamic_padding():
    conv, linear = _pair(img_size=32, patch_size=8, embed_dim=12, strict_img_size=False, dynamic_img_pad=True)
    x = torch.randn(2, 3, 30, 27)
    torch.testing.assert_close(linear(x), conv(x), atol=1e-5, rtol=0)


def test_linear_patch_embed_rejects_wrong_size():
    linear = vit.LinearPatchEmbed(img_size=32, patch_size=8, embed_dim=8)
    with pytest.raises(ValueError, match="expects 32x32"):
        linear(torch.randn(1, 3, 40, 32))


def test_whole_model_linear_equals_conv_with_copied_weights():
    torch.manual_seed(1)
    conv_model = vit.build(dict(TINY, patch_embed="conv")).eval()
    linear_model = vit.build(dict(TINY, patch_embed="linear")).eval()
    linear_model.load_state_dict(vit.conv_to_linear_state(conv_model.state_dict()))
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(linear_model(x), conv_model(x), atol=1e-5, rtol=0)
    back = vit.linear_to_conv_state(linear_model.state_dict(), (8, 8))
    assert torch.equal(back[vit.PATCH_WEIGHT], conv_model.state_dict()[vit.PATCH_WEIGHT])


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_build_applies_overrides(kind):
    model = vit.build(dict(TINY, patch_embed=kind))
    assert len(model.blocks) == 2
    assert model.embed_dim == 48
    assert model.blocks[0].attn.num_heads == 3
    assert model.patch_embed.patch_size == (8, 8)
    assert model.patch_embed.num_patches == 16
    assert model.head.out_features == 7
    has_conv = any(isinstance(m, nn.Conv2d) for m in model.modules())
    assert has_conv == (kind == "conv")
    assert isinstance(model.patch_embed, vit.LinearPatchEmbed) == (kind == "linear")
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 7)


def test_never_pretrained_and_bad_kind():
    assert vit.timm_kwargs(TINY)["pretrained"] is False
    with pytest.raises(ValueError, match="linear or conv"):
        vit.build(dict(TINY, patch_embed="fft"))


def test_a_hybrid_vit_is_refused_with_the_linear_embed_and_keeps_its_stem_with_conv():
    # timm's hybrids embed patches through a ResNet/conv stem (HybridEmbed); forcing our
    # linear PatchEmbed in would silently drop that stem and train another model.
    hybrid = {"arch": "vit_small_r26_s32_224", "image_size": 64, "num_classes": 10}
    with pytest.raises(ValueError, match="HybridEmbed.*use patch_embed: conv"):
        vit.build(dict(hybrid, patch_embed="linear"))
    model = vit.build(dict(hybrid, patch_embed="conv"))
    assert type(model.patch_embed).__name__ == "HybridEmbed"
    assert isinstance(vit.build(TINY).patch_embed, vit.LinearPatchEmbed)
