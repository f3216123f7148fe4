"""``ReferenceCompositor``: each generated frame's mouth and jaw blended into the reference picture at its own size.

The bundled model draws a soft 256x256 copy of the whole framed face; only its mouth region follows the speech. So
the output is the reference's own pixels (identity, detail, background, body), scaled to at most ``max_side``, with
the generated frame upsampled into the crop square the model's input was cut from and blended in under a feathered
ellipse over the mouth and jaw (``MOUTH_REGION``). Before blending, the generated pixels are colour-matched to the
reference per channel (mean and std over the feather ring, where both show skin), so the skin tone does not jump at
the edge of the mask. An optional ``warp`` (idle motion) then moves each composited frame.

``MOUTH_REGION`` is measured, not guessed (``benchmarks/quality/mouth_region.py``): 60 training identities (seeds 0-59,
256x256, head still) drawn at the expressions speech drives; the pixels whose grey level changes (std over the
frames > 4 grey levels in >= 5 % of identities) lie in x 0.371-0.629, y 0.516-0.703 of the training frame, and the
ellipse centred at (0.500, 0.603) with half-axes (0.127, 0.089) holds 99 % of them (99.6 % of the change). The
blend weight is 1 inside that ellipse and falls smoothly to 0 over ``feather`` (0.04 of the side) beyond it, down to
y 0.732, which covers the jaw under the lips (0.06 put the model's soft chin in place of the reference's sharp one on
``examples/avatar_1.png``). Fractions are of the crop square, which ``avatargen.face.framing`` places like the
training frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from PIL import Image

from avatargen.compose.layout import FaceLayout
from avatargen.compose.opencv import cv2
from avatargen.face.detector import Face
from avatargen.face.lips import Lips

Warp = Callable[[np.ndarray, int], np.ndarray]  # frame (H', W', 3) uint8, absolute frame index -> frame


class MouthPaste(Protocol):
    """What puts the mouth in instead of the blend (``MouthWarp``)."""

    def pasting(self, generated: np.ndarray, frames: np.ndarray, first: int | None = None) -> Iterator[int]:
        """(t, S, S, 3) model frames, (t, H', W', 3) reference frames: writes the mouth into each of those frames,
        yielding its index once written; ``first``: the absolute index of the first frame (None: unknown)."""
        ...

    def model_box(self, side: int) -> tuple[int, int, int, int]:
        """(y0, y1, x0, x1), end exclusive: all ``pasting`` reads of a (side, side) model frame."""
        ...

    @property
    def reads_model(self) -> bool:
        """Whether ``pasting`` reads the model frames at all (False: a render runs no model)."""
        ...


@dataclass(frozen=True)
class MouthRegion:
    """An ellipse in fractions of the crop square (x right, y down) and the feather beyond it (fraction of the side)."""

    centre: tuple[float, float]
    half_axes: tuple[float, float]
    feather: float


MOUTH_REGION = MouthRegion(centre=(0.500, 0.603), half_axes=(0.127, 0.089), feather=0.04)
DEFAULT_MAX_SIDE = 1280
RING = (0.1, 0.9)  # blend weights between these are the feather ring the colour statistics are taken over
MIN_RING_PIXELS = 16  # fewer ring pixels inside the picture than this: no colour matching
GAIN_LIMITS = (0.5, 2.0)  # the per-channel std ratio is held within these (a flat ring must not blow up the gain)


def output_size(height: int, width: int, max_side: int) -> tuple[int, int]:
    """(H', W'): the picture's size scaled down to at most ``max_side`` on its long side, both sides even (H.264)."""
    scale = min(1.0, max_side / max(height, width))
    if scale == 1.0:
        return height - height % 2, width - width % 2
    return max(2, 2 * round(height * scale / 2)), max(2, 2 * round(width * scale / 2))


class ReferenceCompositor:
    """Built once per render from the reference ``picture`` (H, W, 3) uint8, the crop ``square`` (left, top, side)
    in its pixels that the model's (S, S) input was cut from, and the ``face`` found in it (None: none detected).

    ``compose(generated, first_frame_index)`` turns (t, S, S, 3) uint8 model frames into (t, H', W', 3) uint8 output
    frames (``size``); ``warp``, when given, is applied to each composited frame with its absolute frame index. It may
    also be set after construction, once ``layout()`` and ``size`` have placed it (idle motion needs both).
    ``mouth``, when set (``pipeline.mouth=warp``: ``avatargen/compose/mouth_warp.py``), puts the mouth into the
    reference in place of the feathered blend.
    """

    def __init__(
        self,
        picture: np.ndarray,
        square: tuple[int, int, int],
        model_size: int,
        face: Face | None = None,
        max_side: int = DEFAULT_MAX_SIDE,
        warp: Warp | None = None,
        region: MouthRegion = MOUTH_REGION,
    ):
        height, width = picture.shape[:2]
        out_h, out_w = output_size(height, width, max_side)
        self.size = (out_h, out_w)
        self.model_size = model_size
        self.warp = warp
        self.mouth: MouthPaste | None = None
        self._face = face
        self._square = square
        if (out_h, out_w) == (height - height % 2, width - width % 2) and max(height, width) <= max_side:
            background = picture[:out_h, :out_w]  # no resampling: the picture's own pixels, an odd edge row dropped
            self._scale = (1.0, 1.0)
        else:
            background = np.asarray(Image.fromarray(picture).resize((out_w, out_h), Image.Resampling.LANCZOS))
            self._scale = (out_w / width, out_h / height)  # (x, y) output pixels per picture pixel
        self.background = np.ascontiguousarray(background)  # (H', W', 3) uint8

        left, top, side = square
        # Crop fractions (fx, fy) of every output pixel centre: picture x = (x' + 0.5) / scale_x, fraction = (x - left) / side.
        fx = ((np.arange(out_w) + 0.5) / self._scale[0] - left) / side  # (W',)
        fy = ((np.arange(out_h) + 0.5) / self._scale[1] - top) / side  # (H',)
        weight = _ellipse_weight(fx[None, :], fy[:, None], region)  # (H', W')
        rows, cols = np.nonzero(weight > 0)
        if len(rows) == 0:  # the mouth lies outside the picture: nothing is generated into it
            self._box = None
            return
        y0, y1, x0, x1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
        self._box = (int(y0), int(y1), int(x0), int(x1))
        weight = weight[y0:y1, x0:x1]
        self._weight = weight[None, :, :, None]  # (1, h, w, 1) float32
        self._ring = (weight > RING[0]) & (weight < RING[1])  # (h, w) bool
        # The model pixel each output pixel's centre falls on (``model_pixel_mapping``: model pixel centres at
        # integers), sampled bilinear from the part of the model frame it reaches, its edge repeated past the frame.
        px, py = (fx[x0:x1] * model_size - 0.5).astype(np.float32), (fy[y0:y1] * model_size - 0.5).astype(np.float32)
        low = np.clip(np.floor([px.min(), py.min()]).astype(int), 0, model_size - 1)  # (2,) x, y
        high = np.clip(np.floor([px.max(), py.max()]).astype(int) + 2, 1, model_size)  # (2,) x, y, end exclusive
        self._read = (int(low[1]), int(high[1]), int(low[0]), int(high[0]))  # (y0, y1, x0, x1) in the model frame
        self._map_x = np.ascontiguousarray(np.broadcast_to(px - low[0], weight.shape), np.float32)  # (h, w)
        self._map_y = np.ascontiguousarray(np.broadcast_to((py - low[1])[:, None], weight.shape), np.float32)  # (h, w)
        patch = self.background[y0:y1, x0:x1].astype(np.float32)  # (h, w, 3)
        self._patch = patch[None]  # (1, h, w, 3)
        ring = patch[self._ring]  # (n, 3)
        self._match_colour = ring.shape[0] >= MIN_RING_PIXELS
        self._ring_mean, self._ring_std = ((ring.mean(axis=0), ring.std(axis=0, ddof=1)) if self._match_colour
                                           else (None, None))  # fmt: skip

    def model_box(self) -> tuple[int, int, int, int] | None:
        """(y0, y1, x0, x1), end exclusive: the model-frame pixels ``compose`` reads (None: none, the mouth lies
        outside the picture). The decoder need not produce any other (``Pipeline.render``'s ``read_box``)."""
        if self.mouth is not None:
            return self.mouth.model_box(self.model_size)
        if self._box is None:
            return None
        return self._read  # bilinear reads the pixel at each sample's floor and the one after it, within the frame

    def reads_model(self) -> bool:
        """Whether ``compose`` reads the model's frames at all. False for a mouth that reads none (a photograph's
        moved by its speech over a drawn interior, a still one: ``MouthPaste.reads_model``) or one outside the
        picture: the render then builds and runs no model (avatargen/pipeline/blank.py)."""
        if self.mouth is not None:
            return self.mouth.reads_model
        return self._box is not None

    def layout(self) -> FaceLayout | None:
        """The face found in the reference, in output pixels (None: none was detected)."""
        if self._face is None:
            return None
        sx, sy = self._scale
        # A uniform scale (the sides are rounded to even pixels: sx and sy differ by well under 1 %).
        scale = (sx + sy) / 2
        return FaceLayout.from_face(self._face).moved(scale, (0.5 * scale - 0.5, 0.5 * scale - 0.5))

    def to_output(self, lips: Lips) -> Lips:
        """``lips`` found in the reference picture, in output pixels."""
        sx, sy = self._scale
        scale = (sx + sy) / 2  # uniform, as in ``layout``
        return lips.moved(scale, (0.5 * scale - 0.5, 0.5 * scale - 0.5))

    def model_pixel_mapping(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((a_x, a_y), (b_x, b_y)): output pixel x' lies at model pixel a_x * x' + b_x (y alike; pixel centres at
        integers in both), the mapping the blend samples the model frame with."""
        left, top, side = self._square
        (sx, sy), size = self._scale, self.model_size
        # model pixel = (((x' + 0.5) / sx - left) / side) * S - 0.5
        return (size / (side * sx), size / (side * sy)), ((0.5 / sx - left) * size / side - 0.5,
                                                          (0.5 / sy - top) * size / side - 0.5)  # fmt: skip

    def compose(self, generated: np.ndarray, first_frame_index: int) -> np.ndarray:
        """(t, S, S, 3) uint8 model frames -> (t, H', W', 3) uint8: the reference with their mouth and jaw."""
        return self.move(self.paste(generated, first_frame_index), first_frame_index)

    def paste(self, generated: np.ndarray, first_frame_index: int | None = None) -> np.ndarray:
        """(t, S, S, 3) uint8 model frames -> (t, H', W', 3) uint8: the reference with their mouth, before ``warp``
        (``first_frame_index``: the absolute index of the first, which a speech-driven mouth needs)."""
        frames = self.blank(generated.shape[0])
        for _ in self.pasting(generated, frames, first_frame_index):
            pass
        return frames

    def blank(self, count: int) -> np.ndarray:
        """(count, H', W', 3) uint8: the reference, each, for ``pasting`` to write into."""
        return np.repeat(self.background[None], count, axis=0)

    def pasting(self, generated: np.ndarray, frames: np.ndarray, first_frame_index: int | None = None) -> Iterator[int]:
        """``paste`` a frame at a time into ``frames`` (``blank``): yields each frame's index once its mouth is in,
        so that a caller hands frame i on while the next is drawn."""
        if self.mouth is not None:
            yield from self.mouth.pasting(generated, frames, first_frame_index)
            return
        if self._box is not None:
            y0, y1, x0, x1 = self._box
            frames[:, y0:y1, x0:x1] = self._blend(generated)
        yield from range(len(frames))

    def move(self, frames: np.ndarray, first_frame_index: int) -> np.ndarray:
        """``warp`` (when set) applied to each of the (t, H', W', 3) composited ``frames``, in place."""
        if self.warp is not None:
            for i, frame in enumerate(frames):
                moved = self.warp(frame, first_frame_index + i)
                if moved is not frame:  # a frame nothing moved comes back as itself
                    frame[...] = moved
        return frames

    def _blend(self, generated: np.ndarray) -> np.ndarray:
        """(t, S, S, 3) uint8 -> (t, h, w, 3) uint8: the mouth box of the output, generated pixels blended in."""
        y0, y1, x0, x1 = self._read
        video = generated[:, y0:y1, x0:x1].astype(np.float32)  # (t, h', w', 3); a copy: frames may be read-only
        matched = np.stack([cv2.remap(frame, self._map_x, self._map_y, cv2.INTER_LINEAR,
                                      borderMode=cv2.BORDER_REPLICATE) for frame in video])  # (t, h, w, 3)
        if self._match_colour:
            ring = matched[:, self._ring]  # (t, n, 3)
            mean, std = ring.mean(axis=1, keepdims=True), ring.std(axis=1, ddof=1, keepdims=True)  # (t, 1, 3)
            gain = np.clip(self._ring_std / np.maximum(std, np.float32(1e-3)), *GAIN_LIMITS)  # (t, 1, 3)
            matched = (matched - mean[:, :, None]) * gain[:, :, None] + self._ring_mean  # (t, h, w, 3)
        blended = self._patch + self._weight * (matched - self._patch)  # (t, h, w, 3)
        return np.clip(np.round(blended), 0, 255).astype(np.uint8)


def _ellipse_weight(fx: np.ndarray, fy: np.ndarray, region: MouthRegion) -> np.ndarray:
    """Blend weight at crop fractions (fx, fy): 1 inside the region's ellipse, a smoothstep to 0 at the ellipse grown
    by ``feather`` on each half-axis, 0 beyond (broadcast over ``fx`` and ``fy``)."""
    (cx, cy), (ax, ay), grow = region.centre, region.half_axes, region.feather
    dx, dy = fx - cx, fy - cy
    inner = np.sqrt((dx / ax) ** 2 + (dy / ay) ** 2)  # 1 on the inner ellipse
    outer = np.sqrt((dx / (ax + grow)) ** 2 + (dy / (ay + grow)) ** 2)  # 1 on the outer ellipse
    with np.errstate(divide="ignore", invalid="ignore"):
        # Along the ray from the centre: 0 at the inner ellipse, 1 at the outer one.
        along = (1 - 1 / inner) / (1 / outer - 1 / inner)
    along = np.where(inner <= 1, 0.0, np.clip(np.nan_to_num(along, nan=1.0), 0.0, 1.0))
    return (1 - along * along * (3 - 2 * along)).astype(np.float32)


class CompositingSink:
    """A frame sink that composites each (t, S, S, 3) batch of model frames and hands the result to ``sinks``;
    ``first_frame`` is the absolute index of the first frame it will receive (a resumed render starts past 0).

    ``paste_s`` and ``move_s`` add up the seconds spent blending the mouth in and in ``warp`` (idle motion); the
    render reports them apart from the sinks' own writes."""

    def __init__(self, compositor: ReferenceCompositor, sinks: list, first_frame: int = 0):
        self.compositor = compositor
        self.sinks = sinks
        self.next_frame = first_frame
        self.paste_s = 0.0
        self.move_s = 0.0

    def write(self, frames: np.ndarray) -> None:
        """Each frame composited and handed on before the next is drawn: the encoder (another process) takes one
        while this thread draws the next. A whole batch at a time, the two took turns (a photo with 120 s of speech:
        4 % slower)."""
        first, composed = self.next_frame, self.compositor.blank(frames.shape[0])
        started = time.perf_counter()
        for i in self.compositor.pasting(frames, composed, first):
            pasted = time.perf_counter()
            frame = self.compositor.move(composed[i : i + 1], first + i)  # (1, H', W', 3)
            self.paste_s += pasted - started
            self.move_s += time.perf_counter() - pasted
            for sink in self.sinks:
                sink.write(frame)
            started = time.perf_counter()
        self.next_frame += frames.shape[0]
