"""Idle motion: a still reference sways by a few pixels and blinks every few seconds, as the project's own face
track measures it, while the background and the body stay exactly as they were."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.compose.idle_motion import IdleMotion, IdleMotionSettings
from avatargen.compose.layout import FaceLayout
from avatargen.data.examples import HELDOUT_SEEDS_START
from avatargen.data.identity import identity_from_seed
from avatargen.data.render import FaceRenderer
from avatargen.errors import ConfigError

pytest.importorskip("dlib", reason="the face track needs avatargen[eval]")

from avatargen.eval.face_track import FaceTracker  # noqa: E402
from avatargen.eval.motion import measure_blinks, measure_head_motion  # noqa: E402
from avatargen.face.detector import shared_detector  # noqa: E402
from avatargen.face.framing import EYES_AT  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.eval import clips  # noqa: E402

FPS = 25
SECONDS = 10
SEED = 7


def _avatar() -> np.ndarray:
    """A held-out training-style avatar, neutral pose, 256x256."""
    return FaceRenderer(identity_from_seed(HELDOUT_SEEDS_START + 1), 256).render()[0]


def _motion(frame: np.ndarray, settings: IdleMotionSettings = IdleMotionSettings()) -> IdleMotion:
    layout = FaceLayout.from_face(shared_detector().find(frame))
    return IdleMotion(layout, frame.shape[:2], FPS, SEED, settings)


def _tracked(frames, crop: tuple[slice, slice] = (slice(None), slice(None))) -> dict[str, np.ndarray]:
    tracker = FaceTracker(shared_detector(), embed_every=10**9)
    for index, frame in enumerate(frames):
        tracker.update(index, np.ascontiguousarray(frame[crop]))
    return tracker.track.arrays()


def test_a_training_avatar_sways_by_a_few_pixels_and_blinks_every_few_seconds() -> None:
    avatar = _avatar()
    motion = _motion(avatar)
    track = _tracked(motion.warp(avatar, i) for i in range(SECONDS * FPS))
    head, blinks = measure_head_motion(track["centre"], FPS), measure_blinks(track["eyes"], FPS)
    assert track["detected"].all()  # the face is found in every frame, shut eyes included
    assert 1.5 <= head["head_range_px"] <= 8.0, head
    assert 8 <= blinks["blinks_per_min"] <= 30, blinks


def test_a_photograph_sways_continuously_and_blinks_at_its_own_resolution() -> None:
    photo = clips.astronaut()  # 512x512, a half-body portrait
    motion = _motion(photo)
    around_face = (slice(0, 256), slice(97, 353))  # the tracker reads a 256x256 window of the full-size frames
    track = _tracked((motion.warp(photo, i) for i in range(SECONDS * FPS)), around_face)
    head, blinks = measure_head_motion(track["centre"], FPS), measure_blinks(track["eyes"], FPS)
    steps = np.linalg.norm(np.diff(track["centre"], axis=0), axis=1)
    assert track["detected"].all()
    assert 1.0 <= head["head_range_px"] <= 8.0, head
    assert 0.02 <= head["head_motion_px"] and steps.max() < 2.0, (head, steps.max())  # moving, never jumping
    assert 8 <= blinks["blinks_per_min"] <= 30, blinks


def test_the_background_and_the_body_never_move() -> None:
    photo = clips.astronaut()
    avatar = _avatar()
    for frame, still in ((photo, (slice(300, None), slice(None))), (photo, (slice(None), slice(0, 140))),
                         (avatar, (slice(0, 30), slice(0, 30))), (avatar, (slice(0, 30), slice(226, None))),
                         (avatar, (slice(246, None), slice(None)))):  # fmt: skip
        motion = _motion(frame)
        blinking = [i for i in range(FPS * 10) if motion.eye_closure(i) > 0.5][:4]
        for index in [0, 31, 77, 163, *blinking]:
            moved = motion.warp(frame, index)
            assert np.array_equal(moved[still], frame[still])
        assert not np.array_equal(moved, frame)


def test_a_blink_behind_glasses_closes_the_eye_and_leaves_the_rim_above_it_in_place() -> None:
    photo = clips.grace_hopper()  # her glasses' upper rim runs about half an eye width above each eye
    layout = FaceLayout.from_face(shared_detector().find(photo))
    motion = IdleMotion(layout, photo.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False), textured_lids=True)
    shut = _most_shut(motion)
    assert motion.eye_closure(shut) > 0.8
    change = np.abs(_grey(motion.warp(photo, shut)) - _grey(photo))
    rows, cols = np.mgrid[0 : photo.shape[0], 0 : photo.shape[1]]
    for corners in (layout.points[0:2], layout.points[2:4]):
        along = corners[0] - corners[1]
        width = float(np.linalg.norm(along))
        along = along / width * np.sign(along[0])
        offset = np.stack([cols, rows], axis=-1) - corners.mean(axis=0)
        s, t = offset @ along / width, offset @ np.array([-along[1], along[0]]) / width  # eye widths, t down
        rim = (np.abs(s) < 0.5) & (t > -0.8) & (t < -0.35)
        opening = (np.abs(s) < 0.3) & (np.abs(t) < 0.1)
        assert change[opening].mean() > 15.0  # the lid covers the eye (the rim used to slide down with it: 34-39)
        assert change[rim].mean() < 6.0, change[rim].mean()


@pytest.mark.parametrize("grey", [False, True], ids=["colour", "grey"])
def test_the_skin_stretched_between_a_shut_lid_and_a_rim_shows_no_streaks(grey: bool) -> None:
    """Between the rim held in front and the lid sliding down, a thin strip of skin stretches five-fold: it showed
    as a comb of streaks along the stretch (its detail across the eye 1.2-1.8x the picture's, against its detail
    along it); it is now smoothed across the eye where it stretches, within a third of the picture's ratio."""
    photo = clips.grace_hopper()
    if grey:
        photo = np.repeat(np.rint(_grey(photo)).astype(np.uint8)[..., None], 3, axis=2)
    layout = FaceLayout.from_face(shared_detector().find(photo))
    motion = IdleMotion(layout, photo.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False), textured_lids=True)
    shut = _grey(motion.warp(photo, _most_shut(motion)))
    for corners in (layout.points[0:2], layout.points[2:4]):
        (x, y), width = corners.mean(axis=0), float(np.linalg.norm(corners[0] - corners[1]))
        rows, cols = slice(int(y - 0.45 * width), int(y - 0.05 * width)), slice(int(x - 0.5 * width), int(x + 0.5 * width))

        def across_over_along(image: np.ndarray) -> float:
            patch = image[rows, cols]
            return float(np.abs(np.diff(patch, axis=1)).mean() / np.abs(np.diff(patch, axis=0)).mean())

        assert across_over_along(shut) < 1.35 * across_over_along(_grey(photo)), (across_over_along(shut),
                                                                                 across_over_along(_grey(photo)))


def test_long_lashes_hang_below_a_shut_lid_of_skin_without_streaks() -> None:
    """A shut lid's lashes point down. Long mascara'd lashes used to stretch with the lid and stand over it shut, as a
    comb of dark streaks (82-88 % of the lid dark, its detail across the eye 2.6x that along it); they now give way to
    the skin between them as the lid closes (none dark, 0.5-0.6x) and hang below its edge (89-92 % dark there, 8-11 %
    before)."""
    from tests.face.photos import long_lashes

    photo = long_lashes()
    layout = FaceLayout.from_face(shared_detector().find(photo))
    motion = IdleMotion(layout, photo.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False), textured_lids=True)
    shut, picture = _grey(motion.warp(photo, _most_shut(motion))), _grey(photo)
    for corners in (layout.points[0:2], layout.points[2:4]):
        (x, y), width = corners.mean(axis=0), float(np.linalg.norm(corners[0] - corners[1]))
        cols = slice(int(x - 0.3 * width), int(x + 0.3 * width))
        lid = slice(int(y - 0.45 * width), int(y - 0.05 * width))  # over the shut lid
        under = slice(int(y + 0.1 * width), int(y + 0.35 * width))  # below its edge, where they hang
        cheek = np.median(picture[int(y + 0.55 * width) : int(y + 0.8 * width), cols])

        def dark(rows: slice) -> float:
            return float((shut[rows, cols] < 0.7 * cheek).mean())

        patch = shut[lid, cols]
        across_over_along = np.abs(np.diff(patch, axis=1)).mean() / np.abs(np.diff(patch, axis=0)).mean()
        assert dark(lid) < 0.05 and dark(under) > 0.5 and across_over_along < 1.5, (dark(lid), dark(under),
                                                                                   across_over_along)


def _grey(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


@pytest.mark.parametrize("picture", ["avatar_2", "avatar_3", "held-out avatar"])
def test_a_drawn_blink_shuts_a_plain_lid_over_the_whole_eye_and_leaves_the_brow_where_it_is(picture: str) -> None:
    """A cartoon's shut eye is a lid of its skin under a brow that stays put. The skin above a drawn eye was stretched
    down over it whole: its crease lines became a comb of streaks over the lid (9-21 % of its pixels unlike the
    cheek), a brow whose tails dip towards the eye was dragged down into a brown box (the brow's region changed by
    3-11 levels on average), and the eye's white showed at its corners, which reach past the detector's (2 white
    pixels on avatar_2). Now none, under 1 level, none."""
    from avatargen.io.image import load_reference

    if picture.startswith("avatar_"):
        frame = load_reference(REPO / "examples" / f"{picture}.png", 256, "face", lambda line: None).square
    else:
        frame = _avatar()
    layout = FaceLayout.from_face(shared_detector().find(frame))
    motion = IdleMotion(layout, frame.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False))
    unlike_cheek, brow_moved, white_left = drawn_blink_measures(frame, motion.warp(frame, _most_shut(motion)), layout)
    assert unlike_cheek < 0.03 and brow_moved < 1.5 and white_left == 0, (unlike_cheek, brow_moved, white_left)


@pytest.mark.parametrize("picture", ["avatar_1", "held-out avatar", "astronaut", "long lashes", "tilted"])
def test_the_lids_read_only_the_pixels_around_the_eye_that_their_memo_compares(picture: str, monkeypatch) -> None:
    """Each eye's lid shapes are remembered with the pixels around it and reused while those stay the same (a
    composited frame keeps the reference's eyes): every pixel they read must lie in that box, or a frame whose
    pixels changed just outside it would get a stale lid. Photographs and drawn faces, one tilted."""
    import avatargen.compose.idle_motion as idle_motion
    from avatargen.io.image import load_reference
    from tests.face.photos import long_lashes, tilted

    frame, textured = {
        "avatar_1": lambda: (load_reference(REPO / "examples" / "avatar_1.png", 256, "face", lambda _: None).square, False),
        "held-out avatar": lambda: (_avatar(), False),
        "astronaut": lambda: (clips.astronaut(), True),
        "long lashes": lambda: (long_lashes(), True),
        "tilted": lambda: (tilted(), True),
    }[picture]()  # fmt: skip
    layout = FaceLayout.from_face(shared_detector().find(frame))
    motion = IdleMotion(layout, frame.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False), textured_lids=textured)
    motion.warp(frame, 0)  # sets up the box
    read: list[np.ndarray] = []
    real = idle_motion.nearest_pixels
    monkeypatch.setattr(idle_motion, "nearest_pixels", lambda image, points: read.append(points) or real(image, points))
    for eye in motion._eyes:
        read.clear()
        motion._lid_shape(frame, eye)
        rows, cols = motion._read_box(eye)
        points = np.concatenate([p.reshape(-1, 2) for p in read])
        x = np.clip(np.rint(points[:, 0]), 0, frame.shape[1] - 1)
        y = np.clip(np.rint(points[:, 1]), 0, frame.shape[0] - 1)
        assert len(points) > 1000 and (x >= cols.start).all() and (x < cols.stop).all(), (x.min(), x.max(), cols)
        assert (y >= rows.start).all() and (y < rows.stop).all(), (y.min(), y.max(), rows)
    # and the memo is read again where the pixels differ: a frame with other eyes gets its own lids
    shut = _most_shut(motion)
    other = frame.copy()
    rows, cols = motion._read_box(motion._eyes[0])
    other[rows, cols] = other[rows, cols][:, ::-1]  # the region around one eye mirrored
    motion.warp(frame, shut)
    fresh = IdleMotion(layout, frame.shape[:2], FPS, SEED, IdleMotionSettings(head_motion=False), textured_lids=textured)
    assert np.array_equal(motion.warp(other, shut), fresh.warp(other, shut))


def drawn_blink_measures(frame: np.ndarray, shut: np.ndarray, layout: FaceLayout) -> tuple[float, float, int]:
    """What a viewer sees wrong in a drawn face's ``shut`` frame, worst of its eyes: the share of the lid's pixels
    unlike the cheek (streaks), the brow's region's mean change (levels) and the eye's white pixels still white
    (also benchmarks/quality/drawn_blinks.py)."""
    shut = shut.astype(np.float64)
    rows, cols = np.mgrid[0 : frame.shape[0], 0 : frame.shape[1]]
    worst = (0.0, 0.0, 0)
    for corners in (layout.points[0:2], layout.points[2:4]):
        (x, y), width = corners.mean(axis=0), float(np.linalg.norm(corners[0] - corners[1]))
        near = np.abs(cols - x) < 0.5 * width
        lid = near & (rows > y - 0.3 * width) & (rows < y - 0.05 * width)  # over the shut eye
        cheek = np.median(frame[near & (rows > y + 0.55 * width) & (rows < y + 0.8 * width)], axis=0)
        brow = (np.abs(cols - x) < 0.7 * width) & (rows > y - 1.0 * width) & (rows < y - 0.45 * width)
        white = (np.abs(cols - x) < 1.2 * width) & (np.abs(rows - y) < 0.5 * width) & (frame.min(axis=-1) > 190)
        assert white.sum() > 40  # the eye's white is in the box
        unlike_cheek = float((np.abs(shut[lid] - cheek).max(axis=1) > 12).mean())
        brow_moved = float(np.abs(shut[brow] - frame[brow]).max(axis=1).mean())
        white_left = int((shut[white].min(axis=-1) > 190).sum())
        worst = (max(worst[0], unlike_cheek), max(worst[1], brow_moved), max(worst[2], white_left))
    return worst


def _most_shut(motion: IdleMotion) -> int:
    return max(range(FPS * 10), key=motion.eye_closure)


def test_any_frame_computed_alone_equals_the_same_frame_in_sequence() -> None:
    avatar = _avatar()
    in_order = _motion(avatar)
    blink = next(i for i in range(FPS * 10) if in_order.eye_closure(i) > 0.5)
    sequence = {i: in_order.warp(avatar, i) for i in range(blink - 20, blink + 20)}
    sequence[100_000] = in_order.warp(avatar, 100_000)
    alone = _motion(avatar)  # a fresh one, asked for frames out of order, a far one first (a resumed render)
    for index in [100_000, blink + 19, blink, blink - 20, blink + 3]:
        assert np.array_equal(alone.warp(avatar, index), sequence[index])


def test_a_frame_warped_in_place_has_the_pixels_of_a_copied_warp() -> None:
    avatar = _avatar()
    motion = _motion(avatar)
    blink = next(i for i in range(FPS * 10) if motion.eye_closure(i) > 0.5)
    for index in (3, blink):
        frame = avatar.copy()
        assert motion.warp_in_place(frame, index) is frame
        assert np.array_equal(frame, motion.warp(avatar, index)) and not np.array_equal(frame, avatar)


def test_blinks_come_at_irregular_intervals_unrelated_to_any_chunk_length() -> None:
    onsets = _motion(_avatar()).blink_onsets(300.0)
    gaps = np.diff(onsets)
    assert 60 <= len(onsets) <= 90  # 15 a minute
    assert gaps.min() >= 1.5 and gaps.max() <= 8.0 and gaps.std() > 0.15 * gaps.mean()
    for chunk_s in (0.64, 0.96, 1.28, 2.0, 3.2, 4.0):  # no chunk grid sees blinks at one phase of its chunks
        phase_lock = abs(np.exp(2j * np.pi * onsets / chunk_s).mean())
        assert phase_lock < 0.35, (chunk_s, phase_lock)


def test_the_head_moves_smoothly_from_frame_to_frame() -> None:
    motion = _motion(_avatar())
    poses = np.array([motion.head_pose(i) for i in range(60 * FPS)])  # (T, 4): dx, dy, roll, nod
    width = motion.layout.face_width
    assert np.abs(np.diff(poses[:, :2], axis=0)).max() < 0.01 * width  # under a pixel per frame
    assert np.ptp(poses[:, 0]) > 0.01 * width and np.ptp(poses[:, 2]) > 0  # yet it does move, and turns


def test_idle_motion_off_gives_every_frame_back_unchanged() -> None:
    avatar = _avatar()
    off = _motion(avatar, IdleMotionSettings(head_motion=False, blinks_per_minute=0))
    assert all(off.warp(avatar, i) is avatar for i in range(0, 500, 7))
    blinks_only = _motion(avatar, IdleMotionSettings(head_motion=False))
    shut = blinks_only.warp(avatar, next(i for i in range(500) if blinks_only.eye_closure(i) == 1.0))
    changed_rows = np.flatnonzero((shut != avatar).any(axis=(1, 2)))
    eyes_y = blinks_only.layout.points[:4, 1].mean()
    assert len(changed_rows) and np.abs(changed_rows - eyes_y).max() < 0.3 * blinks_only.layout.face_width


def test_the_idle_motion_imports_no_torch() -> None:
    """Rendering a photograph needs no torch: its import alone is about a second of the time to the first frame."""
    import subprocess
    import sys

    code = "import sys\nimport avatargen.compose.idle_motion\nassert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_settings_out_of_range_name_the_setting() -> None:
    with pytest.raises(ConfigError, match="blinks_per_minute"):
        IdleMotionSettings(blinks_per_minute=-1)
    with pytest.raises(ConfigError, match="head_amplitude"):
        IdleMotionSettings(head_amplitude=50)
    with pytest.raises(ConfigError, match="blink_seconds"):
        IdleMotionSettings(blink_seconds=0.0)


def test_the_canonical_layout_is_where_the_detector_finds_a_training_face() -> None:
    canonical = FaceLayout.canonical(512)
    found = FaceLayout.from_face(shared_detector().find(_avatar())).moved(2.0, (0.0, 0.0))
    assert np.abs(canonical.points - found.points).max() < 0.03 * 512
    assert abs(canonical.face_width - found.face_width) < 0.05 * 512
    assert np.allclose(canonical.points[:4].mean(axis=0) / 512, EYES_AT, atol=0.002)


def test_a_face_at_the_frame_edge_or_beyond_it_warps_without_error() -> None:
    avatar = _avatar()
    canonical = FaceLayout.canonical(256)
    for offset, moves in (((-110.0, -80.0), True), ((120.0, 90.0), True), ((900.0, 900.0), False)):
        motion = IdleMotion(canonical.moved(1.0, offset), avatar.shape[:2], FPS, SEED)
        blink = next(i for i in range(500) if motion.eye_closure(i) == 1.0)
        frames = [motion.warp(avatar, index) for index in (0, 40, blink)]
        assert all(frame.shape == avatar.shape for frame in frames)
        assert any(not np.array_equal(frame, avatar) for frame in frames) == moves


def test_the_swaying_face_keeps_the_reference_detail() -> None:
    """The eval's sharpness (Laplacian variance of the aligned face chip over the reference's) of a photograph swayed
    at the default amplitude: resampling must not smear what compositing kept (bilinear gave 0.60, bicubic 0.89)."""
    from avatargen.eval.face_track import chip_measures

    photo = clips.astronaut()
    detector = shared_detector()
    reference = chip_measures(detector.chip(photo, detector.find(photo)))[2]
    motion = _motion(photo, IdleMotionSettings(blinks_per_minute=0.0, head_amplitude=3.0))
    ratios = []
    for index in range(0, 200, 20):
        frame = motion.warp(photo, index)
        ratios.append(chip_measures(detector.chip(frame, detector.find(frame)))[2] / reference)
    assert np.median(ratios) > 0.8, ratios
