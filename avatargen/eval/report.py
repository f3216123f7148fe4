"""``format_report``: the result of ``evaluate_video`` as a short table for the terminal."""

from __future__ import annotations


def format_report(result: dict) -> str:
    """A few aligned lines: one per metric, its value and how to read it, then the notes."""
    rows = [("video", f"{result.get('frames', '?')} frames, {result.get('fps', 0):g} fps, "
                      f"{result.get('width', '?')}x{result.get('height', '?')}"),
            ("face found", f"{result.get('face_found', 0.0):.0%} of frames")]  # fmt: skip
    offset, confidence = result.get("offset_frames"), result.get("sync_confidence")
    if offset is not None:
        rows.append(("lip sync", f"offset {offset:+d} frames (+ = video late), confidence {confidence:.2f} "
                                 f"(out of sync: {result['sync_chance']:.2f} +- {result['sync_chance_sd']:.2f}, best "
                                 f"{result['sync_chance_max']:.2f})"))  # fmt: skip
    else:
        rows.append(("lip sync", f"no offset: {result.get('sync_note') or 'not measured'}"))
    distance = result.get("identity_distance")
    if distance is not None:
        against = "the reference image" if result.get("identity_reference") == "image" else "the first frame"
        rows.append(("identity", f"distance {distance:.2f} to {against} (p95 {result['identity_distance_p95']:.2f}, "
                                 f"worst 10 s {result['identity_distance_worst_window']:.2f}, drift "
                                 f"{result['identity_drift']:+.2f}; < {result['identity_threshold']} = same person)"))  # fmt: skip
    if result.get("sharpness") is not None:
        rows.append(("sharpness", f"{result['sharpness']:.2f} of the reference's face detail (Laplacian variance)"))
    z, bar = result.get("seam_z"), result.get("seam_z_threshold")
    if result.get("seams_found"):
        rows.append(("seams", f"a change every {result['seam_period_frames']} frames ({result['seam_period_s']:g} s), "
                              f"{result['seam_excess']:.2f}x the neighbouring change, at frames "
                              f"{result['seam_frames'][:4]}... (z {z:.1f}, chance bar {bar:.1f})"))  # fmt: skip
    else:
        best = f" (best z {z:.1f}, chance bar {bar:.1f})" if z is not None and bar is not None else ""
        rows.append(("seams", f"no change repeats at a fixed stride more than chance allows{best}"))
    if result.get("seam_ratio") is not None:
        rows.append(("known seams", f"ratio {result['seam_ratio']:.2f} mean, {result['seam_ratio_worst']:.2f} worst "
                                    f"over {len(result['seam_ratios'])} seams (~1 invisible, >>1 visible cuts)"))  # fmt: skip
    rows.append(("flicker", f"{result.get('flicker', 0.0):.2f} gray levels (0 = none), p95 "
                            f"{result.get('flicker_p95', 0.0):.2f}"))  # fmt: skip
    if result.get("head_motion_px") is not None:
        rows.append(("head motion", f"{result['head_motion_px']:.2f} px per frame, range {result['head_range_px']:.0f} px"))
    if result.get("blinks_per_min") is not None:
        rows.append(("blinks", f"{result['blinks_per_min']:.0f} per minute ({result['blinks']} in all)"))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {text}" for name, text in rows]
    lines += [f"note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)
