"""Errors a user can act on, each mapped to a documented exit code.

The CLI prints ``str(error)`` as one line and exits with ``error.exit_code``; tracebacks are shown only with
``--debug``. Anything that is not an ``AvatarGenError`` is a bug and exits 1.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class AvatarGenError(Exception):
    """Base class: a failure with a one-line, user-facing message."""

    exit_code: int = EXIT_FAILURE


class BadInputError(AvatarGenError):
    """An input file (image, audio, checkpoint) or output path is unusable. Exit code 2."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(AvatarGenError):
    """A configuration key, type or group option is invalid. Exit code 2."""

    exit_code = EXIT_BAD_INPUT


class CheckpointError(BadInputError):
    """A checkpoint is missing, unreadable, or its tensors do not match the model. Exit code 2."""


class RenderInterrupted(AvatarGenError):
    """The user interrupted the render (SIGINT). Exit code 130."""

    exit_code = EXIT_INTERRUPTED
