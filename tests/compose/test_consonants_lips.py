"""The lips meet on m, b and p, not on every consonant: over espeak-ng sentences, with the phoneme times espeak-ng
itself reports (benchmarks/quality/bilabials.py), a photograph's speech drive shuts the mouth on m, b and p and
leaves it a little open on most other consonants (n, d, t, k, l, s, z, th ...), open on the vowels."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from avatargen.compose.speech_drive import frame_levels


def _bilabials():
    """benchmarks/quality/bilabials.py as a module (its espeak-ng voice, phoneme classes and scoring)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "quality" / "bilabials.py"
    spec = importlib.util.spec_from_file_location("bilabials", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lips_shut_on_m_b_p_and_stay_apart_on_most_other_consonants():
    bilabials = _bilabials()
    try:
        wave, phonemes = bilabials.corpus()
    except OSError:
        pytest.skip("libespeak-ng not installed")
    rows = bilabials.phoneme_levels(frame_levels([wave], bilabials.RATE, bilabials.FPS), phonemes)
    shut = {what: np.mean(np.array(values) <= 0.1) for what, values in rows.items()}
    assert min(shut["m"], shut["b"], shut["p"]) >= 0.9, shut  # 0.94, 0.97, 1.00 (m 0.83 without the murmur)
    assert shut["other consonants"] <= 0.5, shut  # 0.46 (shut on any dull, quiet stretch: 0.69)
    assert np.mean(np.array(rows["vowels"]) >= 0.3) >= 0.9, shut  # 0.93
    assert shut["pauses"] == 1.0
