"""avatargen's Wan path against MeiGen-AI's own InfiniteTalk code on a CPU: toy sizes, random weights, fp32. Prints
one JSON object of measured maximum absolute differences (docs/wan-parity.md, "Parity with the reference code").

The reference is not pip-installable and is never copied into this repository: give a checkout of
https://github.com/MeiGen-AI/InfiniteTalk. Its own dependencies that avatargen lacks go in a separate folder put
first on the path: torchvision (any recent build; its compiled ops are not loaded) and, for the audio features,
transformers 4.x (the reference's wav2vec2 forward sets ``output_attentions``, which transformers 5 refuses with SDPA):

    pip install --no-deps --target /tmp/refdeps torchvision 'transformers==4.57.*' 'tokenizers==0.22.*' \
        'huggingface-hub<1.0'
    PYTHONPATH=/tmp/refdeps:. python benchmarks/quality/reference_parity.py --reference /path/to/InfiniteTalk

(diffusers, which the DiT's module imports, needs a newer huggingface-hub: run ``--only dit colour dubbing`` with
torchvision alone on the path, and ``--only audio`` with the folder above.)

``--recorded`` needs no checkout: ours against the reference's outputs recorded in tests/models/wan/fixtures/
(tests/models/wan/record_reference.py), the numbers tests/models/wan/test_recorded_parity.py asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHECKS = ("dit", "colour", "dubbing", "audio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--reference", help="a checkout of MeiGen-AI/InfiniteTalk")
    source.add_argument("--recorded", action="store_true", help="the reference's recorded outputs (no checkout)")
    parser.add_argument("--only", nargs="+", choices=CHECKS, default=list(CHECKS))
    parser.add_argument("--audio-seconds", type=float, default=30.0)
    args = parser.parse_args()
    if args.recorded:
        from tests.models.wan import recorded_parity as recorded

        run = {"dit": recorded.dit_two_speakers, "colour": recorded.colour_correction,
               "dubbing": recorded.dubbing_conditioning, "audio": recorded.audio_features}  # fmt: skip
        print(json.dumps({check: run[check]() for check in args.only}, indent=1))
        return
    os.environ["AVATARGEN_REFERENCE"] = args.reference
    from tests.models.wan import reference_parity as parity
    from tests.models.wan.reference_code import reference_root

    root = reference_root()
    results: dict[str, object] = {}
    if "dit" in args.only:
        results["dit"] = parity.dit_two_speakers(root)
    if "colour" in args.only:
        results["colour"] = parity.colour_correction(root)
    if "dubbing" in args.only:
        results["dubbing"] = parity.dubbing_conditioning(root)
    if "audio" in args.only:
        results["audio_whole_file"] = parity.audio_features(root, args.audio_seconds)
        results["audio_windows_10s"] = parity.audio_features(root, args.audio_seconds, window_s=10.0)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
