"""Errors a user can act on, each mapped to a documented exit code.

The CLI prints ``str(error)`` as one line and exits with ``error.exit_code``; tracebacks are shown only with
``--debug``. Anything that is not an ``AvatarGenError`` is a bug and exits 1.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_PUBLISH_FAILED = 3  # a live output (RTMP ingest, stdout reader) failed under output.on_publish_failure=stop
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + 2
EXIT_TERMINATED = 143  # SIGTERM: 128 + 15


def first_line(error: BaseException, limit: int | None = None) -> str:
    """The first line of ``error``'s message (its class name where it has none), cut at a word within ``limit``
    characters: how an error from a library (torch, OmegaConf, Ray: often many lines, a C++ trace) is quoted in
    avatargen's one-line messages."""
    lines = str(error).strip().splitlines()
    line = lines[0].strip() if lines else type(error).__name__
    return line if limit is None or len(line) <= limit else f"{line[:limit].rsplit(' ', 1)[0]} ..."


class AvatarGenError(Exception):
    """Base class: a failure with a one-line, user-facing message."""

    exit_code: int = EXIT_FAILURE


class BadInputError(AvatarGenError):
    """An input file (image, audio, checkpoint) or output path is unusable. Exit code 2."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(AvatarGenError):
    """A configuration key, type or group option is invalid. Exit code 2."""

    exit_code = EXIT_BAD_INPUT


class MissingExtraError(BadInputError):
    """A model needs an optional extra that is not installed (``pip install 'avatargen[NAME]'``). Exit code 2."""


class CheckpointError(BadInputError):
    """A checkpoint is missing, unreadable, or its tensors do not match the model. Exit code 2."""


class ResumeMismatchError(BadInputError):
    """``--resume`` of a render whose inputs or config differ from the stopped one's. Exit code 2. ``what``: what
    differs, for a caller that starts over instead (a batch job): ``the config differs from the stopped render's
    (seed was 0, is 3)``."""

    def __init__(self, message: str, what: str = ""):
        super().__init__(message)
        self.what = what


class DiskFullError(BadInputError):
    """The disk filled up or a file-size limit was hit while writing. Exit code 2; the render can be resumed."""


class NonFiniteError(BadInputError):
    """A model produced NaN or Inf: its checkpoint is broken (bad input, exit code 2); the message names the module."""


class AudioDecoderStopped(AvatarGenError):
    """The audio decoder (ffmpeg) died or failed after it had given audio: not the input's fault. Exit code 1; a
    render keeps what it made and says how to resume."""


class PublishError(AvatarGenError):
    """A live output failed (an ingest went down, the program reading stdout closed it). Exit code 3."""

    exit_code = EXIT_PUBLISH_FAILED


class RenderInterrupted(AvatarGenError):
    """The render was stopped by a signal: exit code 130 for SIGINT (the default), 143 for SIGTERM."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED):
        super().__init__(message)
        self.exit_code = exit_code
