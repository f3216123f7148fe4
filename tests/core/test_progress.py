"""The progress bar a render shows on a terminal (``avatargen.progress``)."""

from __future__ import annotations

from types import SimpleNamespace

from avatargen.progress import RenderProgress


def test_the_progress_bar_shows_frames_chunks_and_speed(capsys) -> None:
    with RenderProgress(25, 100, enabled=True) as bar:
        bar.update(SimpleNamespace(frames_done=50, elapsed_s=1.0, total_frames=100, n_chunks_done=3, i_chunks_done=2))
    shown = capsys.readouterr().err
    assert "rendering" in shown and "50/100 frames" in shown and "N 3 I 2" in shown and "RTF 0.50" in shown, shown


def test_a_disabled_bar_shows_nothing(capsys) -> None:
    with RenderProgress(25, 100, enabled=False) as bar:
        bar.update(SimpleNamespace(frames_done=50, elapsed_s=1.0, total_frames=100, n_chunks_done=3, i_chunks_done=2))
    assert capsys.readouterr().err == ""
