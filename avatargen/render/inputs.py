"""A render request's inputs beyond one image and one audio file, opened for the engine: a source video to dub
(``--video``), several speakers (``-a`` given again, ``--person-box``, ``--audio-type``), and the picture framed as
the model family frames it. the render session calls these; the family reads the result as ``RenderInputs``
(avatargen/pipeline/inputs.py). Every refusal is one line naming the fix (``BadInputError``, exit 2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from avatargen.pipeline.family import FamilyEngine
from avatargen.config.schema import Config
from avatargen.errors import BadInputError
from avatargen.face.framing import SquareFraming
from avatargen.face.speakers import speaker_boxes
from avatargen.io import image_prefetch as prefetch
from avatargen.io.audio import AudioFileSource
from avatargen.io.audio_mix import AudioMix
from avatargen.io.audio_tracks import AudioTracksSource, track_statistics
from avatargen.io.image import Reference, load_reference, read_picture_and_alpha, reference_from_rgb
from avatargen.io.video_in import VideoFrames
from avatargen.pipeline.inputs import Box, Framing, RenderInputs
from avatargen.render.request import STREAM


@dataclass
class OpenedPicture:
    """The reference as the pipeline reads it, and how it was framed (for a source video's later frames and the
    speakers' boxes)."""

    loaded: Reference  # the picture, the model's square and the face found (the compositor reads it)
    reference: np.ndarray  # uint8 (h, w, 3): what the family encodes
    framing: Framing
    video: VideoFrames | None  # the source video when dubbing (its frame 0 is the picture)


def open_picture(image: Path | None, video: Path | None, config: Config, family: FamilyEngine,
                 warn: Callable[[str], None], face: int | None = None) -> OpenedPicture:  # fmt: skip
    """The picture (an image, or a source video's first frame) framed: by the family (``FamilyEngine.framing``, e.g. the
    aspect-ratio buckets) or as the square of ``pipeline.image_fit`` (``face``: which face, ``pipeline.face``)."""
    size, fit = config.model.image_size, config.pipeline.image_fit.value
    source = VideoFrames(video, config.model.fps) if video is not None else None

    def load(fit: str) -> Reference:
        if source is not None:
            first = source.frame(0)
            source.close()  # no decoder waits while the models load; the render reads the source again
            return reference_from_rgb(first, size, fit, warn, f"the first frame of video '{video}'", face)
        if fit != "face":
            prefetch.stop(image)
            return load_reference(image, size, fit, warn, face=face)
        rgb, alpha = read_picture_and_alpha(image, fit)  # while the face search beside the start ends
        prefetch.finish(image, size, face, warn)  # what it found is in the picture cache now
        return reference_from_rgb(rgb, size, fit, warn, f"image '{image}'", face, alpha)

    # a family that frames the picture itself needs no face search for a square it does not use
    loaded = load("crop" if family.framing is not None else fit)
    own = family.framing(config, *loaded.picture.shape[:2]) if family.framing is not None else None
    if own is not None and face is not None:  # the model frames the whole picture: no face is chosen
        raise BadInputError(f"--face {face}: model={config.model.name} frames the whole picture by its aspect ratio, "
                            "not around a face; leave out --face (or crop the picture to the face you want)")  # fmt: skip
    if own is not None:
        return OpenedPicture(loaded, own.picture(loaded.picture), own, source)
    if family.framing is not None and fit != "crop":
        loaded = load(fit)  # the family chose the shared square after all (e.g. model.wan.framing=square)
    return OpenedPicture(loaded, loaded.square, SquareFraming(loaded.crop, size), source)


class FramedVideo:
    """A source video's frames framed as its first one was (``FrameSource``, avatargen/pipeline/inputs.py)."""

    def __init__(self, source: VideoFrames, framing: Framing) -> None:
        self.source, self.framing = source, framing

    def frame(self, index: int) -> np.ndarray:
        return self.framing.picture(self.source.frame(index))

    def close(self) -> None:
        """Stop the source's decoder (the end of a render, or its failure)."""
        self.source.close()


def speaker_regions(picture: np.ndarray, boxes: list[Box], tracks: int, framing: Framing,
                    warn: Callable[[str], None]) -> tuple[Box, ...] | None:  # fmt: skip
    """Each speaker's region in the framed picture: the boxes given (each inside the picture), else found
    (avatargen/face/speakers.py); None for one speaker."""
    if tracks < 2:
        return None
    height, width = picture.shape[:2]
    for x0, y0, x1, y1 in boxes:
        if x0 < 0 or y0 < 0 or x1 > width or y1 > height:
            raise BadInputError(f"--person-box {x0:g},{y0:g},{x1:g},{y1:g} reaches outside the picture ({width}x{height}); "
                                f"give X0,Y0,X1,Y1 within 0..{width} and 0..{height}")  # fmt: skip
    found = boxes or speaker_boxes(picture, warn)
    framed = tuple(framing.box(box) for box in found)
    for given, (x0, y0, x1, y1) in zip(boxes, framed):
        if x1 - x0 < 1 or y1 - y0 < 1:  # the framing (the aspect-ratio crop) cut the speaker off
            raise BadInputError(f"--person-box {','.join(f'{v:g}' for v in given)} lies outside the part of the "
                                "picture the model frames (its aspect-ratio crop); give a box over the speaker's "
                                "face, nearer the picture's centre")  # fmt: skip
    return framed


def open_audio(audio: list[Path], audio_type: str, config: Config, block: int, warn: Callable[[str], None]) -> Any:
    """The audio source of files (stdin is opened by the render session): one file's, or the speakers' as (n, tracks)."""
    rate, min_samples = config.model.sample_rate, config.model.sample_rate // config.model.fps
    if len(audio) == 1:
        return AudioFileSource(audio[0], rate, block_samples=block, min_samples=min_samples)
    source = AudioTracksSource(audio, rate, audio_type, block_samples=block, min_samples=min_samples)
    hints = [s.duration_hint for s in source.sources]
    if audio_type == "para" and None not in hints and abs(hints[0] - hints[1]) > 1 / config.model.fps:
        warn(f"note: the two audio files last {hints[0]:.2f} s and {hints[1]:.2f} s; the shorter one is followed by "
             "silence (--audio-type para: at once; add: one after the other)")  # fmt: skip
    return source


def render_inputs(opened: OpenedPicture, audio: list[Path], audio_type: str, boxes: list[Box], config: Config,
                  warn: Callable[[str], None]) -> RenderInputs:  # fmt: skip
    """What the family reads beyond the picture and the prompt (``RenderInputs``)."""
    rate = config.model.sample_rate
    stats = None
    if STREAM not in audio:
        if len(audio) == 1:
            stats = lambda: (track_statistics(audio[0], rate),)  # noqa: E731 - one decode pass, when a family asks
        else:
            stats = AudioTracksSource(audio, rate, audio_type).statistics
    video = FramedVideo(opened.video, opened.framing) if opened.video is not None else None
    regions = speaker_regions(opened.loaded.picture, boxes, len(audio), opened.framing, warn)
    return RenderInputs(video=video, tracks=len(audio), track_stats=stats, regions=regions)


def output_audio(audio: list[Path], audio_type: str) -> Path | AudioMix:
    """The audio the video carries: the file, or the speakers' files mixed as the model heard them."""
    return audio[0] if len(audio) == 1 else AudioMix(tuple(audio), audio_type)


def input_digests(video: Path | None, audio: list[Path], boxes: list[Box], audio_type: str,
                  digest: Callable[[Path], str]) -> dict[str, str]:  # fmt: skip
    """What a resumed render must also share with the stopped one: the source video, the further speakers' files,
    their boxes and how they share the timeline."""
    found = {f"audio_{k + 1}": digest(path) for k, path in enumerate(audio[1:], start=1)}
    if video is not None:
        found["video"] = digest(video)
    if len(audio) > 1:
        found["speakers"] = json.dumps({"boxes": [list(b) for b in boxes], "audio_type": audio_type})
    return found
