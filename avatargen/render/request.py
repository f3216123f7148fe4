"""What a user asks for (``RenderRequest``), the files a render writes beside its output, and the checks made on
both before anything is read or written: one line naming the problem and the fix (``BadInputError``, exit 2).

Nothing here imports torch: the CLI makes every check that needs no model family's engine (``check_before_reading``
with no engine) before it imports torch, so that a wrong path or option is said in a fraction of a second; the
render makes them all again with its engine."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from avatargen.bulk.locations import mp4_name_problem
from avatargen.config.schema import Config
from avatargen.errors import BadInputError, CheckpointError
from avatargen.io.audio_stream import RawPcm
from avatargen.io.audio_tracks import ARRANGEMENTS
from avatargen.io.input_files import AUDIO_FIX, IMAGE_FIX, VIDEO_FIX, check_input_file
from avatargen.io.output_lock import lock_path_for
from avatargen.io.outputs import Output, OutputKind, folder_write_problem, parse_publish_target
from avatargen.io.owned_names import another_renders_name, check_owned_names, playlist_names, resume_folder_for
from avatargen.io.sink import encoder_targets
from avatargen.io.targets import make_folders, name_max, nearest_existing, refuse_writing_inputs, symlink_loop
from avatargen.pipeline.inputs import Box

if TYPE_CHECKING:
    from avatargen.pipeline.family import FamilyEngine

__all__ = ["STREAM", "RenderRequest", "check_before_reading", "check_outputs_spare_inputs", "check_output_names",
           "check_request", "config_path_for", "make_output_folder", "names_written_beside", "parse_box",
           "partial_path_for"]  # fmt: skip

STREAM = Path("-")  # --audio - reads stdin; --output - writes MPEG-TS to stdout


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


def parse_box(text: str) -> Box:
    """``X0,Y0,X1,Y1`` (pixels of the picture, x to the right, y down) -> a box; BadInputError naming the format."""
    try:
        x0, y0, x1, y1 = (float(part) for part in text.split(","))
    except ValueError:
        raise BadInputError(f"--person-box '{text}' must be X0,Y0,X1,Y1 in pixels of the picture, e.g. 40,60,300,460") from None
    if not (x1 > x0 and y1 > y0):
        raise BadInputError(f"--person-box '{text}' is empty: X1 must be right of X0 and Y1 below Y0")
    return x0, y0, x1, y1


def _check_face_number(face: int | None, video: Path | None, audio: list[Path], fit: str) -> None:
    """``--face N`` where it chooses nothing is refused, never ignored: N below 1, a dubbed video, two speakers, a
    picture framed without a face (``pipeline.image_fit=crop|pad``). A number past the faces is refused once the
    faces are found (face/choice.py)."""
    if face is None:
        return
    if face < 1:
        raise BadInputError(f"--face {face}: faces are numbered from 1, left to right; give --face 1 or more")
    unused = ("--video follows the dubbed video's own face" if video is not None
              else "two speakers are placed by --person-box (or found in the picture)" if len(audio) > 1
              else f"pipeline.image_fit={fit} frames the picture without choosing a face" if fit != "face" else None)  # fmt: skip
    if unused is not None:
        raise BadInputError(f"--face {face} chooses the face an image is framed around, but {unused}; leave out --face")


def check_request_inputs(image: Path | None, video: Path | None, audio: list[Path], boxes: list[Box],
                         audio_type: str, config: Config, family: FamilyEngine | None) -> None:  # fmt: skip
    """Refuse, before anything is opened, what the request cannot mean or the model (``family``, None: not asked
    yet) cannot do."""
    if (image is None) == (video is None):
        raise BadInputError("give the picture to animate: --image PICTURE, or --video SOURCE to dub a video (not both)")
    if video is not None and family is not None and not family.follows_video:
        raise BadInputError(f"--video (dubbing) needs a model that follows a source video; model={config.model.name} "
                            "renders from an image: see docs/models.md (model=infinitetalk)")  # fmt: skip
    _check_face_number(config.pipeline.face, video, audio, config.pipeline.image_fit.value)
    if len(audio) > 1 and STREAM in audio:
        raise BadInputError("-a - (stdin) carries one speaker; give two files for two speakers")
    if family is not None and len(audio) > family.speakers:
        raise BadInputError(f"{len(audio)} audio files (-a) but model={config.model.name} renders "
                            f"{'one speaker' if family.speakers == 1 else f'at most {family.speakers} speakers'}; "
                            + ("give one -a (two speakers: see docs/wan-rendering.md, model=multitalk)" if family.speakers == 1
                               else f"give at most {family.speakers} -a, one per speaker"))  # fmt: skip
    if boxes and len(boxes) != len(audio):
        raise BadInputError(f"{len(boxes)} --person-box for {len(audio)} audio file(s) (-a); give one box per speaker, "
                            "in the order of the -a files, or none (found in the picture)")  # fmt: skip
    if boxes and len(audio) == 1:
        raise BadInputError("--person-box places two speakers; with one audio file the speaker is the whole picture")
    if audio_type not in ARRANGEMENTS:
        raise BadInputError(f"--audio-type '{audio_type}' is not one of {', '.join(ARRANGEMENTS)} (para: at once, "
                            "add: one after the other)")  # fmt: skip
    if audio_type != "para" and len(audio) == 1:  # add: the first speaker's file, then the second's
        raise BadInputError(f"--audio-type {audio_type} arranges two speakers' audio; with one -a leave it out (or give "
                            "a second -a)")  # fmt: skip


def check_before_reading(request: RenderRequest, config: Config, family: FamilyEngine | None, resume: bool,
                         overwrite: bool) -> list[Output]:  # fmt: skip
    """Every check of the request, its config and its outputs before any input is read: no output may be an input,
    and a user's files at the output's names are never replaced unasked (``overwrite``). Returns the live outputs
    (``output.publish``). ``family`` None: the checks only the model family's engine answers wait (the CLI's pass,
    before torch is imported)."""
    o = config.output
    check_request(request, config, family, resume)
    live = [parse_publish_target(t, o.gop_seconds, o.hls_window, o.publish_timeout_s)
            for t in encoder_targets(config)]  # a sink's own targets (webrtc://) checked by it
    check_outputs_spare_inputs(request, config, family, live)
    if request.output_file is not None:
        check_output_names(request.output_file, o.save_config, overwrite)
    for output in live:  # nor at a playlist's, nor its segments'
        if output.kind is OutputKind.HLS:
            check_owned_names(playlist_names(Path(output.target)), overwrite)
    return live


def check_request(request: RenderRequest, config: Config, family: FamilyEngine | None, resume: bool) -> None:
    """Refuse a request that cannot mean anything, whose input files cannot be read, or that ``family`` (the model
    of ``config``; None: not asked yet) cannot do."""
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
    for path, kind, fix in ((request.image, "image", IMAGE_FIX), (request.video, "video", VIDEO_FIX)):
        if path is not None:
            check_input_file(path, kind, fix)
    for audio in request.audio_files:
        if audio != STREAM:
            check_input_file(audio, "audio", AUDIO_FIX)


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
    if output.is_dir():
        raise BadInputError(f"output '{output}' is a folder; give a file name ending in .mp4, e.g. {output / 'talk.mp4'}")
    problem = mp4_name_problem(output)
    if problem is not None:
        raise BadInputError(f"output '{output}' {problem}")
    shared = another_renders_name(output)
    if shared is not None:
        raise BadInputError(shared)
    loop = symlink_loop(output)
    if loop is not None:
        raise BadInputError(f"cannot write to output folder '{output.parent}' ('{loop}' is a symbolic link loop); "
                            "choose a writable folder")  # fmt: skip
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


def _inputs(request: RenderRequest, config: Config, family: FamilyEngine | None) -> list[Path]:
    """Every file the render reads: the image, the audio file, the model's weight files (``family`` None: not yet)."""
    files = [request.picture] + [audio for audio in request.audio_files if audio != STREAM]
    try:
        files += family.weight_files(config) if family is not None else []
    except CheckpointError:
        pass  # reported, with its fix, when the models load
    return files


def check_outputs_spare_inputs(request: RenderRequest, config: Config, family: FamilyEngine | None,
                               live: list[Output]) -> None:  # fmt: skip
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
