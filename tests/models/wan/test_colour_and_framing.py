"""The reference's colour correction and framing, held against scikit-image's Lab (the oracle the reference calls) and
the tables and rules written out here; tests/models/wan/test_reference_parity.py runs MeiGen-AI's own functions."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from avatargen.families.wan.colour import ColourTarget, lab_to_rgb, match_and_blend, rgb_to_lab
from avatargen.families.wan.config import REFERENCE_NEGATIVE_PROMPT, negative_prompt, sampling_shift
from avatargen.families.wan.framing import BUCKETS_480P, BUCKETS_720P, CoverCrop, bucket_table, cover_crop, nearest_bucket

color = pytest.importorskip("skimage.color")


def _oracle(video: np.ndarray, reference: np.ndarray, strength: float) -> np.ndarray:
    """match_and_blend_colors as its docstring describes it, with scikit-image: (T, H, W, 3) in [-1, 1]."""
    ref_lab = color.rgb2lab(np.clip((reference + 1) / 2, 0, 1))
    out = []
    for frame in np.clip((video + 1) / 2, 0, 1):
        lab = color.rgb2lab(frame)
        for c in range(3):
            mean, std = lab[..., c].mean(), lab[..., c].std()
            target_mean, target_std = ref_lab[..., c].mean(), ref_lab[..., c].std()
            lab[..., c] = target_mean if std == 0 else (lab[..., c] - mean) * (target_std / std) + target_mean
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lab2rgb warns when it clips a negative Z
            corrected = np.clip(color.lab2rgb(lab), 0, 1)
        out.append((1 - strength) * frame + strength * corrected)
    return np.stack(out) * 2 - 1


def test_lab_conversions_match_scikit_image() -> None:
    rgb = np.random.default_rng(0).random((16, 24, 3))
    lab = color.rgb2lab(rgb)
    assert np.abs(rgb_to_lab(torch.from_numpy(rgb)).numpy() - lab).max() < 1e-9
    lab[..., 2] += np.random.default_rng(1).normal(0, 60, lab.shape[:2])  # some colours outside sRGB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.clip(color.lab2rgb(lab), 0, 1)
    assert np.abs(lab_to_rgb(torch.from_numpy(lab)).numpy() - expected).max() < 1e-9


@pytest.mark.parametrize("strength", [1.0, 0.5])
def test_every_frame_is_moved_to_the_reference_lab_statistics(strength: float) -> None:
    g = torch.Generator().manual_seed(2)
    video = torch.rand(1, 3, 4, 20, 28, generator=g) * 1.6 - 0.9  # (1, 3, T, H, W), a little outside [-1, 1] too
    video[:, 0, 2] = 0.3  # a flat red channel in frame 2: it takes the target's mean
    reference = torch.rand(1, 3, 1, 20, 28, generator=g) * 2 - 1
    got = match_and_blend(video, ColourTarget.of(reference), strength)
    expected = _oracle(video[0].permute(1, 2, 3, 0).double().numpy(), reference[0, :, 0].permute(1, 2, 0).double().numpy(), strength)
    assert got.shape == video.shape and got.dtype == video.dtype
    assert np.abs(got[0].permute(1, 2, 3, 0).double().numpy() - expected).max() < 1e-6
    assert torch.equal(match_and_blend(video, ColourTarget.of(reference), 0.0), video)


def test_the_reference_buckets_and_the_nearest_one() -> None:
    assert bucket_table(640, 16) == BUCKETS_480P and bucket_table(960, 16) == BUCKETS_720P
    assert nearest_bucket(1080, 1920, BUCKETS_480P) == (448, 896)  # 16:9 landscape (0.5625 -> "0.50")
    assert nearest_bucket(1920, 1080, BUCKETS_480P) == (832, 448)  # a phone held upright (1.78 -> "1.86")
    assert nearest_bucket(1080, 1920, BUCKETS_720P) == (704, 1280)
    assert nearest_bucket(500, 500, BUCKETS_480P) == (640, 640)
    tiny = bucket_table(64, 16)
    assert tiny["1.00"] == (64, 64) and all(h % 16 == 0 and w % 16 == 0 for h, w in tiny.values())


def test_cover_crop_resizes_to_cover_then_crops_the_centre() -> None:
    picture = np.random.default_rng(3).integers(0, 256, (300, 700, 3), dtype=np.uint8)
    framing = cover_crop(300, 700, 640, 16)  # ratio 0.43 -> "0.38": (384, 1024)
    assert framing.target == (384, 1024)
    scale = 1024 / 700  # the width decides: the picture covers the bucket
    height, width = int(np.ceil(scale * 300)), int(np.ceil(scale * 700))
    resized = np.asarray(Image.fromarray(picture).resize((width, height), resample=Image.BILINEAR))
    top, left = round((height - 384) / 2), round((width - 1024) / 2)  # torchvision's centre crop
    assert np.array_equal(framing.picture(picture), resized[top : top + 384, left : left + 1024])
    # a box goes through the same scale and crop; the masks' nearest resize agrees with it
    x0, y0, x1, y1 = framing.box((350, 0, 700, 300))
    assert (x0, y1, x1) == pytest.approx((350 * width / 700 - left, 384, 1024), abs=1e-6)
    masks = torch.zeros(1, 300, 700)
    masks[0, :, 350:] = 1
    framed = framing.masks(masks)[0]
    assert framed.shape == (384, 1024) and framed[:, int(x0) + 1 :].all() and not framed[:, : int(x0) - 1].any()


def test_a_framing_is_for_one_picture_size() -> None:
    with pytest.raises(ValueError, match="pictures"):
        CoverCrop((100, 100), (64, 64)).picture(np.zeros((90, 100, 3), np.uint8))


def test_the_reference_negative_prompt_and_shift_are_the_defaults() -> None:
    from avatargen.config.loader import load_config, to_config

    model = to_config(load_config(["model=infinitetalk"])).model
    assert negative_prompt(model) == REFERENCE_NEGATIVE_PROMPT and REFERENCE_NEGATIVE_PROMPT.startswith("bright tones")
    assert sampling_shift(model) == 7.0
    assert sampling_shift(to_config(load_config(["model=infinitetalk", "model.image_size=960"])).model) == 11.0
    overridden = to_config(load_config(["model=infinitetalk", "model.wan.negative_prompt=''", "model.wan.sampling_shift=3"]))
    assert negative_prompt(overridden.model) == "" and sampling_shift(overridden.model) == 3.0
