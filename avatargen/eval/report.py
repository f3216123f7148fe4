"""``format_report``: the result of ``evaluate_video`` as a short table for the terminal."""

from __future__ import annotations

from typing import Any

from avatargen.eval.registry import metric_classes


def format_report(result: dict[str, Any]) -> str:
    """A few aligned lines: the video, then each metric's rows (its value and how to read it), then the notes."""
    rows = [("video", f"{result.get('frames', '?')} frames, {result.get('fps', 0):g} fps, "
                      f"{result.get('width', '?')}x{result.get('height', '?')}")]  # fmt: skip
    for metric in metric_classes():
        rows += metric.rows(result)
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {text}" for name, text in rows]
    lines += [f"note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)
