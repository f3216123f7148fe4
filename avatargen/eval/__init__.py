"""Quality metrics for any talking-head video: lip sync, identity drift, seam continuity, flicker.

``evaluate_video(video, audio, reference=None, seams=None, fps=None)`` returns a JSON-able dict of every metric;
``format_report(result)`` renders it for the terminal.
"""

from avatargen.eval.evaluate import evaluate_video
from avatargen.eval.report import format_report

__all__ = ["evaluate_video", "format_report"]
