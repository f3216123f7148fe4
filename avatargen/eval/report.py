"""``format_report``: the result of ``evaluate_video`` as a short table for the terminal."""

from __future__ import annotations


def format_report(result: dict) -> str:
    """A few aligned lines: one per metric, its value and how to read it."""
    rows = [("video", f"{result.get('frames', '?')} frames, {result.get('fps', 0):g} fps, "
                      f"{result.get('width', '?')}x{result.get('height', '?')}")]  # fmt: skip
    offset, confidence = result.get("offset_frames"), result.get("sync_confidence")
    if confidence is None:
        rows.append(("lip sync", result.get("sync_note", "not measured")))
    elif offset is None:
        rows.append(("lip sync", f"confidence {confidence:.3f} ({result.get('sync_note', 'no sync found')})"))
    else:
        rows.append(("lip sync", f"offset {offset:+d} frames (+ = video late), confidence {confidence:.3f} "
                                 f"(by chance {result.get('sync_chance', 0.0):.3f}), "
                                 f"mouth box {result.get('mouth_box')}"))  # fmt: skip
    ratio = result.get("identity_ratio")
    if ratio is not None:
        rows.append(("identity", f"ratio {ratio:.3f} end/start (1 = no drift; {result['identity_start']:.3f} -> "
                                 f"{result['identity_end']:.3f} vs {result['identity_reference'].replace('_', ' ')})"))
    if result.get("seam_ratio") is not None:
        worst = max(result["seam_ratios"])
        rows.append(("seams", f"ratio {result['seam_ratio']:.2f} mean, {worst:.2f} worst over "
                              f"{len(result['seam_ratios'])} seams (~1 invisible, >>1 visible cuts)"))
    rows.append(("flicker", f"{result.get('flicker', 0.0):.3f} gray levels (0 = none), p95 "
                            f"{result.get('flicker_p95', 0.0):.3f}"))  # fmt: skip
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {text}" for name, text in rows)
