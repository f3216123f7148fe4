"""What a render of the bundled model says about its reference and prompt: it knows cartoon avatars only, and it
shows no visible style for a prompt (docs/model-card.md)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from avatargen.config.schema import Config, WeightsSource
from avatargen.face.domain import warn_if_out_of_domain


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
