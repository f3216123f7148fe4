"""The reference's frame size for a picture (``get_size_less_than_area`` with ``--size 704*384``: checked against
it on 2,500 picture sizes when ported; these are its values)."""

from __future__ import annotations

import pytest

from avatargen.families.liveavatar.framing import size_within_area


@pytest.mark.parametrize(
    ("picture", "frame"),
    [((720, 1280), (384, 704)), ((1280, 720), (704, 384)), ((1024, 1024), (512, 512)), ((512, 384), (512, 384)),
     ((100, 300), (128, 320)), ((3000, 2000), (576, 384))],
)  # fmt: skip
def test_the_frame_keeps_the_pictures_aspect_within_704_by_384(picture, frame) -> None:
    assert size_within_area(*picture, 704 * 384) == frame
