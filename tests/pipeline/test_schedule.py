"""The N/I chunk schedule: every frame leaves exactly once and in order; I chunks run after both neighbours."""

from hypothesis import given, settings, strategies as st

from avatargen.pipeline.schedule import ChunkSchedule, Emit, IChunk, NChunk, frame_count


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 40))
    interpolate = draw(st.booleans()) and n >= 3
    seam = draw(st.integers(1, max(1, n - 2))) if interpolate else 0
    anchor = draw(st.integers(1, max(1, (n - seam) // 2))) if interpolate else 0
    motion = draw(st.integers(0, n - 1))
    return ChunkSchedule(n, motion, interpolate, seam, anchor)


@settings(max_examples=400, deadline=None)
@given(schedule=schedules(), total=st.integers(1, 400))
def test_every_frame_leaves_once_in_order_and_i_chunks_follow_both_neighbours(schedule, total):
    done_n: set[int] = set()
    done_i: set[int] = set()
    emitted = 0
    order = []
    for step in schedule.steps(schedule.spans(total)):
        if isinstance(step, NChunk):
            assert step.cond_start <= step.start < step.end <= total
            if step.index > 0 and schedule.motion_frames:
                assert step.cond_start < step.start  # conditioned on the previous chunk's boundary frames
            done_n.add(step.index)
            order.append(f"N{step.index}")
        elif isinstance(step, IChunk):
            assert {step.index, step.index + 1} <= done_n, "an I chunk ran before both of its N chunks"
            assert step.left_start < step.seam_start < step.seam_end <= step.right_end
            done_i.add(step.index)
            order.append(f"I{step.index}")
        else:
            assert isinstance(step, Emit)
            assert step.start == emitted, "frames left out of order, twice, or with a gap"
            assert step.end > step.start
            if step.source == "I":
                assert step.index in done_i
            else:
                assert step.index in done_n
            emitted = step.end
    assert emitted == total
    n_chunks = -(-total // schedule.n_chunk_frames)
    assert len(done_n) == n_chunks
    assert len(done_i) == (n_chunks - 1 if schedule.interpolate else 0)


def test_execution_order_matches_the_spec():
    schedule = ChunkSchedule(n_chunk_frames=16, motion_frames=2, interpolate=True, seam_frames=4, anchor_frames=2)
    names = [f"{type(s).__name__[0]}{s.index}" for s in schedule.steps(schedule.spans(64)) if not isinstance(s, Emit)]
    assert names == ["N0", "N1", "I0", "N2", "I1", "N3", "I2"]


def test_i_chunk_anchors_are_the_frames_beside_the_seam():
    schedule = ChunkSchedule(n_chunk_frames=16, motion_frames=2, interpolate=True, seam_frames=4, anchor_frames=3)
    seams = [s for s in schedule.steps(schedule.spans(40)) if isinstance(s, IChunk)]
    assert (seams[0].left_start, seams[0].seam_start, seams[0].seam_end, seams[0].right_end) == (11, 14, 18, 21)


def test_frame_count_rounds_duration_times_fps():
    assert frame_count(16000 * 3, 16000, 25) == 75
    assert frame_count(16000 * 3 + 319, 16000, 25) == 75  # 0.4985 frame: down
    assert frame_count(16000 * 3 + 320, 16000, 25) == 76  # half a frame: up
