"""What a user asks for (``RenderRequest``), the files a render writes beside its output, and the checks made on
both before anything is read or written: one line naming the problem and the fix (``BadInputError``, exit 2)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from avatargen.pipeline.family import FamilyEngine
from avatargen.config.schema import Config
from avatargen.errors import BadInputError, CheckpointError
from avatargen.io.audio_stream import RawPcm
from avatargen.io.output_lock import lock_path_for
from avatargen.io.outputs import Output, OutputKind, folder_write_problem
from avatargen.io.owned_names import another_renders_name, check_owned_names
from avatargen.io.resume_store import resume_folder_for
from avatargen.io.targets import make_folders, name_max, nearest_existing, refuse_writing_inputs, symlink_loop
from avatargen.render.inputs import STREAM, check_request_inputs

__all__ = ["STREAM", "RenderRequest", "check_outputs_spare_inputs", "check_output_names", "check_request",
           "config_path_for", "make_output_folder", "names_written_beside", "partial_path_for"]  # fmt: skip




@dataclass
class RenderRequest:
    """What the user asked for. ``audio`` ``-`` is stdin (``raw_audio`` says its format when it is not WAV);
    ``output`` ``-`` is MPEG-TS on stdout, None is no file (live outputs only, ``output.publish``). ``video``
    instead of ``image``: dub that source video; ``extra_audio``: the further speakers' files, placed by
    ``person_boxes`` (one per speaker, or found) and sharing the timeline by ``audio_type`` (render_inputs.py).
    ``stdin``: where ``audio`` ``-`` is read from in this process (a pipe an agent writes into); None: stdin."""

    image: Path | None
    audio: Path
    output: Path | None
    prompt: str = ""
    raw_audio: RawPcm | None = None
    video: Path | None = None
    extra_audio: tuple[Path, ...] = ()
    person_boxes: tuple[tuple[float, float, float, float], ...] = ()
    audio_type: str = "para"
    stdin: BinaryIO | None = field(default=None, compare=False)

    @property
    def audio_files(self) -> list[Path]:
        """Every speaker's audio, the first ``audio``."""
        return [self.audio, *self.extra_audio]

    @property
    def picture(self) -> Path:
        """The file the picture comes from: the image, or the source video."""
        return self.image if self.image is not None else self.video

    @property
    def output_file(self) -> Path | None:
        """The MP4 file written, if any."""
        return self.output if self.output is not None and self.output != STREAM else None


def config_path_for(output: Path) -> Path:
    """Where the resolved config of a render is saved: beside the video, ``OUT.yaml``."""
    return output.with_suffix(".yaml")


def partial_path_for(output: Path) -> Path:
    """Where a render writes its video until it is complete: ``OUT.partial.mp4``."""
    return output.with_name(f"{output.stem}.partial.mp4")


def check_request(request: RenderRequest, config: Config, family: FamilyEngine, resume: bool) -> None:
    """Refuse a request that cannot mean anything or that ``family`` (the model of ``config``) cannot do."""
    try:
        request.prompt.encode("utf-8")
    except UnicodeEncodeError as err:  # argv bytes that are not UTF-8 arrive as lone surrogates
        raise BadInputError(
            f"the prompt is not valid UTF-8 text (a byte or surrogate at character {err.start}); pass the prompt as "
            "UTF-8 text"
        ) from None
    if request.output is None and not config.output.publish:
        raise BadInputError("nothing to write: give --output OUT.mp4, --output - (MPEG-TS to stdout) or --publish TARGET")
    if request.output_file is not None:
        _check_output(request.output_file)
    if resume and (request.output_file is None or request.audio == STREAM):
        raise BadInputError("--resume needs an MP4 output file and an audio file; a stream (stdin/stdout) cannot be resumed")
    if request.raw_audio is not None and request.audio != STREAM:
        raise BadInputError("--audio-rate/--audio-channels describe raw PCM on stdin; use them with --audio -")
    check_request_inputs(request.image, request.video, request.audio_files, list(request.person_boxes),
                         request.audio_type, config, family)  # fmt: skip


def names_written_beside(output: Path) -> list[str]:
    """Every name a render of ``output`` writes in its folder, the temporary ones included."""
    partial, saved = partial_path_for(output).name, config_path_for(output).name
    joining = f".{output.stem}.joining.mp4"
    return [output.name, partial, f".{partial}.trim.mp4", saved, f".{saved}.tmp", lock_path_for(output).name,
            resume_folder_for(output).name, joining, f".{joining}.join"]  # fmt: skip


def owned_names(output: Path, save_config: bool) -> list[tuple[Path, str]]:
    """The names a render of ``output`` writes and replaces, each with its kind (``io.owned_names.foreign_reason``)."""
    partial, saved, joining = partial_path_for(output), config_path_for(output), output.with_name(f".{output.stem}.joining.mp4")
    names = [(output, "mp4"), (partial, "partial"), (lock_path_for(output), "lock"), (resume_folder_for(output), "resume")]
    names += [(saved, "yaml")] if save_config else []
    # the hidden temporary names: a killed render's files there are replaced, a folder is refused
    temporary = [partial.with_name(f".{partial.name}.trim.mp4"), saved.with_name(f".{saved.name}.tmp"), joining]
    return names + [(path, "temp") for path in temporary] + [(joining.with_name(f".{joining.name}.join"), "join")]


def check_output_names(output: Path, save_config: bool, overwrite: bool) -> None:
    """Refuse, before anything is written, a render whose names hold a user's file or folder or a link (exit 2,
    naming ``--overwrite``); avatargen's own files from an earlier render are replaced (docs/owned-names.md)."""
    check_owned_names(owned_names(output, save_config), overwrite, resume_folder_for(output))


def _check_output(output: Path) -> None:
    if output.suffix.lower() != ".mp4":
        raise BadInputError(f"output '{output}' must end in .mp4 (the container written is MP4)")
    shared = another_renders_name(output)
    if shared is not None:
        raise BadInputError(shared)
    loop = symlink_loop(output)
    if loop is not None:
        raise BadInputError(f"cannot write to output folder '{output.parent}' ('{loop}' is a symbolic link loop); "
                            "choose a writable folder")  # fmt: skip
    if output.exists() and output.is_dir():
        raise BadInputError(f"output '{output}' is a folder; give a file name ending in .mp4")
    limit = name_max(nearest_existing(output))
    longest = max(len(os.fsencode(name)) for name in names_written_beside(output))
    if longest > limit:
        size = len(os.fsencode(output.name))
        shown = output.name if len(output.name) <= 40 else f"{output.name[:20]}...{output.name[-16:]}"
        raise BadInputError(
            f"output name '{shown}' ({size} bytes) is too long: a render writes '<name>.partial.mp4' and temporary "
            f"files beside it, whose names would be up to {longest} bytes, over this file system's limit of {limit}; "
            f"choose a name of at most {limit - (longest - size)} bytes"
        )


def _inputs(request: RenderRequest, config: Config, family: FamilyEngine) -> list[Path]:
    """Every file the render reads: the image, the audio file, the model's weight files."""
    files = [request.picture] + [audio for audio in request.audio_files if audio != STREAM]
    try:
        files += family.weight_files(config)
    except CheckpointError:
        pass  # reported, with its fix, when the models load
    return files


def check_outputs_spare_inputs(request: RenderRequest, config: Config, family: FamilyEngine, live: list[Output]) -> None:
    """Refuse a render that would write over one of its own inputs (the same file, also through a link or a
    hard link) or delete it with the resume folder, before anything is written."""
    written: list[Path] = [Path(o.target) for o in live if o.kind is OutputKind.HLS]
    folder: Path | None = None
    if request.output_file is not None:
        file = request.output_file
        folder = resume_folder_for(file)
        written += [file.with_name(name) for name in names_written_beside(file)]  # temporary names included
    inputs = _inputs(request, config, family)
    refuse_writing_inputs(written, inputs)
    for source in inputs:
        if folder is not None and Path(os.path.realpath(source)).is_relative_to(os.path.realpath(folder)):
            raise BadInputError(
                f"input '{source}' is inside '{folder}', which this render replaces; copy it elsewhere or choose "
                "another output name"
            )


def make_output_folder(output: Path) -> list[Path]:
    """Create the folder of ``output`` (a file or an HLS playlist); returns the folders created."""
    problem = folder_write_problem(output)
    if problem is None:
        try:
            return make_folders(output.parent)
        except OSError as err:
            problem = err.strerror or str(err)
    raise BadInputError(f"cannot write to output folder '{output.parent}' ({problem}); choose a writable folder")
