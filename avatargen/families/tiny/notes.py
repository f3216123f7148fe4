"""What a render of the bundled model says about its reference and prompt: it knows cartoon avatars only, and it
shows no visible style for a prompt (docs/model-card.md)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from avatargen.config.schema import Config, WeightsSource
from avatargen.face.domain import square_is_photo

MODEL_CARD = "docs/model-card.md"


def photo_warning(name: str, composited: bool = False, warped: bool = False) -> str:
    """The one line printed when the bundled model is given a photograph (``composited``: under reference
    compositing, where only the mouth and jaw are generated; ``warped``: with ``pipeline.mouth=warp``, where the
    photo's own lips move over teeth and a mouth drawn in its colours)."""
    if warped:
        expect = "the photo's own lips and jaw move with the speech, over teeth and a mouth drawn in the photo's colours"
    elif composited:
        expect = "the photo stays as it is but for the mouth and jaw, which are drawn in the soft cartoon style it learnt"
    else:
        expect = "expect a soft cartoon-like face in the photo's colours and layout with a moving mouth, not the person"
    return (f"warning: {name} looks like a photograph; the bundled model (model=tiny) knows only cartoon avatars: "
            f"{expect} ({MODEL_CARD}, Limits; train on your own data for photos)")  # fmt: skip


def warn_if_out_of_domain(square: np.ndarray, name: str, warn, composited: bool = False, warped: bool = False,
                          photo: bool | None = None) -> None:  # fmt: skip
    """One line to ``warn`` when the framed reference ``square`` (S, S, 3) is a photograph (nothing when the face
    networks are not installed: framing already said so); ``composited`` and ``warped`` as in ``photo_warning``;
    ``photo``: ``square_is_photo(square)`` when the caller has it already (None: asked here)."""
    if square_is_photo(square) if photo is None else photo:
        warn(photo_warning(name, composited, warped))


def reference_notes(config: Config, *, picture: str, square: np.ndarray, prompt: str | None, composited: bool,
                    warped: bool, is_photo: Callable[[], bool], warn: Callable[[str], None]) -> None:  # fmt: skip
    """The bundled model's notes on a request (its shipped checkpoint only: a checkpoint a user trained, or random
    weights, get none): the ``--prompt`` note, and the photo warning when the framed ``square`` (S, S, 3) of the
    image ``picture`` is a photograph (``composited``/``warped``: how its frames go out, as ``photo_warning`` words it)."""
    if config.model.weights != WeightsSource.checkpoint or config.model.checkpoint:
        return
    if prompt:
        warn(f"note: --prompt: the bundled model (model={config.model.name}) shows no visible style (at most a "
             "slightly different mouth); prompts are for the models that read one (docs/model-card.md, Prompts)")  # fmt: skip
    warn_if_out_of_domain(square, f"image '{picture}'", warn, composited=composited, warped=warped, photo=is_photo())
