"""What a viewer sees in a talking-head video, measured on real face networks (the ``avatargen[eval]`` extra).

``evaluate_video(video, audio, reference=None, seams=None, fps=None)`` returns a JSON-able dict of every metric
(face found, identity distance to the reference, lip sync with its chance level, sharpness, seams, flicker, head
motion, blinks, mouth spill); ``format_report(result)`` renders it for the terminal; ``write_sheet`` draws a contact
sheet. Each metric is one file on the ``Metric`` protocol (``metric.py``); a new one joins with ``register_metric``
or an ``avatargen.metrics`` entry point (``registry.py``). See docs/eval.md.
"""

from avatargen.eval.evaluate import evaluate_video
from avatargen.eval.metric import Metric
from avatargen.eval.registry import register_metric, unregister_metric
from avatargen.eval.report import format_report

__all__ = ["Metric", "evaluate_video", "format_report", "register_metric", "unregister_metric"]
