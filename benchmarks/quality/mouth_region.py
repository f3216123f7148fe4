"""Where a talking face changes, in fractions of the training frame: the measurement behind
``avatargen.compose.composite.MOUTH_REGION``.

Each of ``--identities`` training identities (seeds 0..N-1, the training layout at 256x256, head still) is drawn at
the expressions speech drives (mouth opening 0..1, width 0.7..1.3, smile -0.4..0.4); the per-pixel standard deviation
over those frames (grey levels) is what talking changes. Printed: the box of the pixels whose std exceeds
``--threshold`` grey levels in at least 5 % of identities, the ellipse (centre, half-axes) that holds 99 % of the
changing pixels over all identities, and how much of the change the ellipse holds.

    python benchmarks/quality/mouth_region.py [--identities 60] [--threshold 4]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from avatargen.data import FacePose, FaceRenderer, identity_from_seed

SIZE = 256


def talking_std(seed: int) -> np.ndarray:
    """(SIZE, SIZE) per-pixel grey std over the talking expressions of identity ``seed``."""
    renderer = FaceRenderer(identity_from_seed(seed), SIZE)
    frames = [
        renderer.render(FacePose(mouth_open=o, mouth_width=w, smile=s))[0].astype(np.float32).mean(axis=2)
        for o, w, s in itertools.product(np.linspace(0, 1, 6), (0.7, 1.0, 1.3), (-0.4, 0.0, 0.4))
    ]
    return np.std(np.stack(frames), axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--identities", type=int, default=60)
    parser.add_argument("--threshold", type=float, default=4.0, help="grey levels of std that count as a change")
    args = parser.parse_args()
    stds = np.stack([talking_std(seed) for seed in range(args.identities)])  # (N, SIZE, SIZE)
    changing = stds > args.threshold  # (N, SIZE, SIZE)
    share = changing.mean(axis=0)  # fraction of identities where each pixel changes
    ys, xs = np.nonzero(share >= 0.05)
    print(f"{args.identities} identities, std > {args.threshold:g} grey levels in >= 5 % of them: "
          f"x {xs.min() / SIZE:.3f}..{(xs.max() + 1) / SIZE:.3f}, y {ys.min() / SIZE:.3f}..{(ys.max() + 1) / SIZE:.3f}")
    # The ellipse: centre at the change-weighted mean, half-axes scaled until 99 % of changing pixels are inside.
    weight = share / share.sum()
    grid_y, grid_x = (np.mgrid[0:SIZE, 0:SIZE] + 0.5) / SIZE
    cx, cy = float((weight * grid_x).sum()), float((weight * grid_y).sum())
    spread_x = float(np.sqrt((weight * (grid_x - cx) ** 2).sum()))
    spread_y = float(np.sqrt((weight * (grid_y - cy) ** 2).sum()))
    radius = np.sqrt(((grid_x - cx) / spread_x) ** 2 + ((grid_y - cy) / spread_y) ** 2)
    per_pixel = changing.sum(axis=0)  # (SIZE, SIZE) identities changing there
    order = np.argsort(radius, axis=None)
    held = np.cumsum(per_pixel.ravel()[order]) / per_pixel.sum()
    r99 = float(radius.ravel()[order][np.searchsorted(held, 0.99)])
    print(f"ellipse holding 99 % of the changing pixels: centre ({cx:.3f}, {cy:.3f}), "
          f"half-axes ({r99 * spread_x:.3f}, {r99 * spread_y:.3f}) of the frame side")
    energy = stds.sum(axis=0)
    print(f"share of the std energy inside it: {energy[radius <= r99].sum() / energy.sum():.3f}")


if __name__ == "__main__":
    main()
