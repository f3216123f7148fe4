"""How a library's error is quoted in avatargen's one-line messages (``avatargen.errors.first_line``)."""

from __future__ import annotations

from avatargen.errors import first_line


def test_a_quoted_error_is_its_first_line_or_its_class_and_long_lines_are_cut_at_a_word():
    trace = RuntimeError("shape mismatch in conv\nException raised from check at aten/src/ATen/native/Conv.cpp:42")
    assert first_line(trace) == "shape mismatch in conv"  # torch's C++ trace stays out
    assert first_line(ValueError("  \n ")) == "ValueError"
    assert first_line(OSError("The actor died unexpectedly before finishing"), 20) == "The actor died ..."
    assert first_line(OSError("short"), 20) == "short"
