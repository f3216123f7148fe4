"""Record what MeiGen-AI's own InfiniteTalk code computes at toy size into tests/models/wan/fixtures/ (CPU, fp32,
the weights and inputs of recorded_parity.py), for test_recorded_parity.py to hold avatargen's Wan path to it
without a checkout. Re-record after changing a case, or to check a newer reference commit:

    pip install --no-deps --target /tmp/tv torchvision
    pip install --no-deps --target /tmp/tf4 'transformers==4.57.*' 'tokenizers==0.22.*' 'huggingface-hub<1.0'
    PYTHONPATH=/tmp/tv:. python tests/models/wan/record_reference.py --reference InfiniteTalk --only dit colour dubbing
    PYTHONPATH=/tmp/tf4:/tmp/tv:. python tests/models/wan/record_reference.py --reference InfiniteTalk --only audio

The reference's wav2vec2 forward needs transformers 4.x (it sets ``output_attentions``, which transformers 5 refuses
under SDPA), while diffusers, which its DiT module imports, needs the newer huggingface-hub: hence the two runs.
torchvision is the reference's dependency only (its ``center_crop``; the compiled ops are not loaded).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from tests.models.wan import recorded_parity as cases  # noqa: E402
from tests.models.wan.reference_code import (  # noqa: E402
    function_from,
    load_module,
    multitalk_model,
    multitalk_utils,
    prepare,
)

CHECKS = ("dit", "colour", "dubbing", "audio")


COMMIT: list[str] = []  # --commit, or the checkout's HEAD


def _provenance(root: Path) -> dict[str, str]:
    if not COMMIT:
        try:
            COMMIT.append(subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                         text=True, check=True).stdout.strip())  # fmt: skip
        except (OSError, subprocess.CalledProcessError):
            COMMIT.append("unknown")
    import transformers

    return {"reference": "MeiGen-AI/InfiniteTalk", "commit": COMMIT[0], "torch": torch.__version__,
            "transformers": transformers.__version__}  # fmt: skip


def record_dit(root: Path) -> dict[str, float]:
    """``WanModel`` of wan/modules/multitalk_model.py: two speakers with person masks, and one speaker."""
    reference = multitalk_model(root).WanModel(weight_init=True, **cases.TOY_DIT)
    reference.disable_teacache()
    seed, shapes = 1, cases.layout(reference)
    weights = cases.seeded_weights(shapes, seed)
    reference.load_state_dict(weights, strict=True)
    reference.eval()
    inputs = cases.dit_inputs()
    frames, height, width = cases.DIT_LATENTS
    tokens = frames * (height // 2) * (width // 2)
    outputs = {}
    with torch.no_grad():
        for name, speakers in (("two_speakers", inputs["audio"]), ("one_speaker", inputs["audio"][:1])):
            outputs[f"output.{name}"] = reference([inputs["x"]], t=inputs["t"], context=[inputs["text"]],
                                                  seq_len=tokens, clip_fea=inputs["clip"], y=[inputs["y"]],
                                                  audio=speakers, ref_target_masks=inputs["masks"])  # fmt: skip
    kept, digests = cases.stored_inputs(inputs)
    cases.write_fixture("infinitetalk_dit", {**kept, **outputs}, {
        "config": cases.TOY_DIT, "seed": seed, "layout": shapes, "weights_digest": cases.digest(weights),
        "input_digests": digests, "provenance": _provenance(root)})  # fmt: skip
    return {k: v.abs().max().item() for k, v in outputs.items()}


def record_colour(root: Path) -> dict[str, float]:
    """``match_and_blend_colors`` of wan/utils/multitalk_utils.py at strength 1 and 0.5."""
    reference = multitalk_utils(root).match_and_blend_colors
    inputs = cases.colour_inputs()
    strengths = [1.0, 0.5]
    outputs = {f"output.strength_{s:g}": reference(inputs["video"].clone(), inputs["image"].clone(), s)
               for s in strengths}  # fmt: skip
    kept, digests = cases.stored_inputs(inputs)
    cases.write_fixture("infinitetalk_colour", {**kept, **outputs}, {
        "strengths": strengths, "input_digests": digests, "provenance": _provenance(root)})  # fmt: skip
    return {k: v.abs().max().item() for k, v in outputs.items()}


def record_dubbing(root: Path) -> dict[str, object]:
    """``resize_and_centercrop`` of wan/multitalk.py on a source frame at its 480p bucket, the I2V latent of
    [that frame, black frames] through ``WanVAE_`` of wan/modules/vae.py at toy width, and the source frames the
    clips read (``audio_start_idx += frame_num - motion_frame``: 81-frame clips, 9 motion frames)."""
    import torchvision.transforms as transforms

    from avatargen.families.wan.models.params import vae_params

    resize_and_centercrop = function_from(root / "wan" / "multitalk.py", "resize_and_centercrop", {
        "math": math, "torch": torch, "nn": torch.nn, "Image": Image, "np": np, "transforms": transforms})  # fmt: skip
    frame = cases.dubbing_source_frame()
    buckets = multitalk_utils(root).ASPECT_RATIO_627  # 'infinitetalk-480', chosen as in its generate()
    ratio = frame.shape[0] / frame.shape[1]
    bucket = list(buckets[sorted(buckets, key=lambda x: abs(float(x) - ratio))[0]][0])
    framed = resize_and_centercrop(Image.fromarray(frame), bucket)  # uint8 (1, 3, 1, H, W)
    image = (framed / 255 - 0.5) * 2
    stride = cases.FRAMED_STRIDE

    params = vae_params("wan_tiny")
    config = cases._vae_config(params)
    vae = load_module(root, "wan.modules.vae").WanVAE_(
        dim=config["dim"], z_dim=config["z_dim"], dim_mult=config["dim_mult"], num_res_blocks=config["num_res_blocks"],
        attn_scales=[], temperal_downsample=config["temperal_downsample"])  # fmt: skip
    vae_seed, shapes = 5, cases.layout(vae)
    weights = cases.seeded_weights(shapes, vae_seed)
    vae.load_state_dict(weights, strict=True)
    vae.eval()
    small = torch.nn.functional.interpolate(image[:, :, 0], size=(32, 64), mode="area")[:, :, None]
    video = torch.cat([small, torch.zeros(1, 3, 12, 32, 64)], dim=2)  # [frame, black frames]: 13 frames
    scale = [torch.tensor(config["latent_mean"]), 1.0 / torch.tensor(config["latent_std"])]
    with torch.no_grad():
        latent = vae.encode(video, scale)
    source_frames = torch.tensor([72 * k for k in range(6)])  # 16 s of audio: six clips
    tensors = {"output.framed_sample": image[..., ::stride, ::stride], "input.small": small,
               "output.i2v_latent": latent, "output.source_frames": source_frames}  # fmt: skip
    cases.write_fixture("infinitetalk_dubbing", tensors, {
        "bucket": bucket, "framed_digest": cases.digest({"framed": framed[0, :, 0]}),
        "input_digests": {"frame": cases.digest({"frame": torch.from_numpy(frame)})},
        "vae_config": config, "vae_seed": vae_seed, "vae_layout": shapes, "vae_weights_digest": cases.digest(weights),
        "provenance": _provenance(root)})  # fmt: skip
    return {"framed": image.abs().max().item(), "i2v_latent": latent.abs().max().item()}


def record_audio(root: Path) -> dict[str, float]:
    """``loudness_norm`` + ``get_embedding`` of generate_infinitetalk.py with the ``Wav2Vec2Model`` of
    src/audio_analysis/wav2vec2.py (toy size) and transformers' feature extractor, on a 30 s clip."""
    import pyloudnorm
    from einops import rearrange
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor

    from avatargen.families.wan.models.specs import WAV2VEC2_TINY

    config = Wav2Vec2Config(**WAV2VEC2_TINY, attn_implementation="eager")  # its forward sets output_attentions
    model = load_module(root, "src.audio_analysis.wav2vec2").Wav2Vec2Model(config).eval()
    seed, shapes = 7, cases.layout(model)
    weights = cases.seeded_weights(shapes, seed)
    model.load_state_dict(weights, strict=True)
    namespace = {"np": np, "torch": torch, "rearrange": rearrange, "pyln": pyloudnorm}
    get_embedding = function_from(root / "generate_infinitetalk.py", "get_embedding", namespace)
    loudness_norm = function_from(root / "generate_infinitetalk.py", "loudness_norm", namespace)
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                         return_attention_mask=False)  # fmt: skip
    samples = cases.speech(cases.AUDIO_SECONDS)
    features = get_embedding(loudness_norm(samples), extractor, model)  # (frames, layers, C)
    cases.write_fixture("infinitetalk_audio", {"output.features": features}, {
        "config": WAV2VEC2_TINY, "seconds": cases.AUDIO_SECONDS, "seed": seed, "layout": shapes,
        "weights_digest": cases.digest(weights),
        "input_digests": {"speech": cases.digest({"speech": torch.from_numpy(samples)})},
        "provenance": _provenance(root)})  # fmt: skip
    return {"frames": features.shape[0], "scale": features.abs().max().item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="a checkout of MeiGen-AI/InfiniteTalk")
    parser.add_argument("--only", nargs="+", choices=CHECKS, default=list(CHECKS))
    parser.add_argument("--commit", help="the reference's commit, stored in the fixtures (default: the checkout's HEAD)")
    args = parser.parse_args()
    COMMIT.extend([args.commit] if args.commit else [])
    os.environ["AVATARGEN_REFERENCE"] = args.reference
    from tests.models.wan.reference_code import reference_root

    root = reference_root()
    prepare()
    torch.manual_seed(0)  # the reference's constructors initialise weights before the seeded ones replace them
    recorders = {"dit": record_dit, "colour": record_colour, "dubbing": record_dubbing, "audio": record_audio}
    for check in args.only:
        print(check, recorders[check](root), flush=True)


if __name__ == "__main__":
    main()
