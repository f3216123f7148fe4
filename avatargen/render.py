"""One render request, end to end: validate inputs, build the models, run the pipeline into an MP4, report.

The CLI parses arguments and prints; everything a render does lives here, so scripts can call ``render()`` too.
The outputs (file, live, stdout) are one ``Encoder``, optionally behind a real-time pacer. Signals and
resume (avatargen/resume.py): a stopped render closes its partial MP4 with what was emitted; ``resume=True`` continues
from the latest checkpoint, writes the rest as a new part, and joins the parts into ``OUT.mp4``.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from omegaconf import DictConfig

from avatargen.compose.composite import CompositingSink, ReferenceCompositor
from avatargen.compose.idle_motion import IdleMotion
from avatargen.compose.layout import FaceLayout
from avatargen.compose.mouth_choice import mouth_for
from avatargen.config.loader import to_config, to_yaml
from avatargen.config.families import family_of
from avatargen.config.schema import Config, MouthMode, PublishFailure, WeightsSource
from avatargen.config.validate import idle_motion_settings
from avatargen.errors import AvatarGenError, BadInputError, CheckpointError, DiskFullError, PublishError, RenderInterrupted
from avatargen.face.choice import reference_lips
from avatargen.face.domain import square_is_photo, warn_if_out_of_domain
from avatargen.io.audio_stream import AudioStreamSource, RawPcm
from avatargen.io.image import Reference
from avatargen.io.mp4_join import join_parts
from avatargen.io.encoder import Encoder
from avatargen.io.output_lock import OutputLock, lock_path_for
from avatargen.io.outputs import Output, folder_write_problem, parse_publish_target, stdout_output
from avatargen.io.pacing import RealtimePacer
from avatargen.io.resume_store import ResumeStore, file_digest, resume_folder_for
from avatargen.io.targets import make_folders, name_max, nearest_existing, refuse_writing_inputs, remove_empty_folders, symlink_loop
from avatargen.pipeline.build import build_pipeline, resolve_checkpoint, resolve_device
from avatargen.pipeline.follower import render_as_follower
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.schedule import checkpoint_grid
from avatargen.render_inputs import check_request_inputs, input_digests, open_audio, open_picture, output_audio, render_inputs
from avatargen.resume import StopRequests, checkpoint_saver, fingerprint, resume_point
from avatargen.runtime.distributed import rank_failures, start_parallel
from avatargen.runtime.memory import current_rss_mb, peak_rss_mb


STREAM = Path("-")  # --audio - reads stdin; --output - writes MPEG-TS to stdout


@dataclass
class RenderRequest:
    """What the user asked for. ``audio`` ``-`` is stdin (``raw_audio`` says its format when it is not WAV);
    ``output`` ``-`` is MPEG-TS on stdout, None is no file (live outputs only, ``output.publish``). ``video``
    instead of ``image``: dub that source video; ``extra_audio``: the further speakers' files, placed by
    ``person_boxes`` (one per speaker, or found) and sharing the timeline by ``audio_type`` (render_inputs.py)."""

    image: Path | None
    audio: Path
    output: Path | None
    prompt: str = ""
    raw_audio: RawPcm | None = None
    video: Path | None = None
    extra_audio: tuple[Path, ...] = ()
    person_boxes: tuple[tuple[float, float, float, float], ...] = ()
    audio_type: str = "para"

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


def _check_request(request: RenderRequest, config: Config, resume: bool) -> None:
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
                         request.audio_type, config)  # fmt: skip


def names_written_beside(output: Path) -> list[str]:
    """Every name a render of ``output`` writes in its folder, the temporary ones included."""
    partial, saved = partial_path_for(output).name, config_path_for(output).name
    return [output.name, partial, f".{partial}.trim.mp4", saved, f".{saved}.tmp", lock_path_for(output).name,
            resume_folder_for(output).name, f".{output.stem}.joining.mp4", f".{output.name}.join"]  # fmt: skip


def _check_output(output: Path) -> None:
    if output.suffix.lower() != ".mp4":
        raise BadInputError(f"output '{output}' must end in .mp4 (the container written is MP4)")
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


def _inputs(request: RenderRequest, config: Config) -> list[Path]:
    """Every file the render reads: the image, the audio file, the model's weight files."""
    files = [request.picture] + [audio for audio in request.audio_files if audio != STREAM]
    try:
        files += family_of(config).weight_files(config)
    except CheckpointError:
        pass  # reported, with its fix, when the models load
    return files


def _check_outputs_spare_inputs(request: RenderRequest, config: Config, live: list[Output]) -> None:
    """Refuse a render that would write over one of its own inputs (the same file, also through a link or a
    hard link) or delete it with the resume folder, before anything is written."""
    written: list[Path] = [Path(o.target) for o in live if o.kind == "hls"]
    folder: Path | None = None
    if request.output_file is not None:
        file = request.output_file
        folder = resume_folder_for(file)
        written += [file.with_name(name) for name in names_written_beside(file)]  # temporary names included
    inputs = _inputs(request, config)
    refuse_writing_inputs(written, inputs)
    for source in inputs:
        if folder is not None and Path(os.path.realpath(source)).is_relative_to(os.path.realpath(folder)):
            raise BadInputError(
                f"input '{source}' is inside '{folder}', which this render replaces; copy it elsewhere or choose "
                "another output name"
            )


def _make_output_folder(output: Path) -> list[Path]:
    """Create the folder of ``output`` (a file or an HLS playlist); returns the folders created."""
    problem = folder_write_problem(output)
    if problem is None:
        try:
            return make_folders(output.parent)
        except OSError as err:
            problem = err.strerror or str(err)
    raise BadInputError(f"cannot write to output folder '{output.parent}' ({problem}); choose a writable folder")


def compositor_for(
    loaded: Reference, config: Config, is_photo: Callable[[], bool] | None = None,
    warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> ReferenceCompositor | None:
    """The reference compositor of a render (``pipeline.composite``), or None: frames go out as the model makes them.

    Compositing needs to know where the model's square sits on a face framed as in training: ``image_fit=face``
    found a face, or the image is a square taken whole (``image_fit=crop``/``pad`` of a square image, a
    training-style avatar); a family whose frames are not that square (it renders the whole picture at its own
    resolution) is left alone. Idle motion
    (``pipeline.idle_motion``) moves each composited frame, placed from the detected face, or from the training
    layout when a whole square image had none detected. ``pipeline.mouth`` chooses how the mouth gets in: the
    reference's own lips moved (``MouthWarp``, its opening read by the cue that suits a photograph or a cartoon) or
    the feathered blend of the model's mouth; ``auto`` warps both kinds but blends a cartoon whose own mouth the
    cue reads open (a dark beard, a smile showing its teeth: ``mouth_for``; docs/model-card.md); the warp moves the
    lips the lip finder found, or keeps the still mouth (one line to ``warn``) where it could not trust them. ``is_photo`` says
    whether the framed square is a photograph (default: ``square_is_photo``; a render passes one that asks once)."""
    if not config.pipeline.composite or not family_of(config).composited:
        return None
    height, width = loaded.picture.shape[:2]
    whole_square = height == width and loaded.crop == (0, 0, width)
    if loaded.face is None and not (whole_square and config.pipeline.image_fit.value != "face"):
        return None  # no face found: the model's centre crop, as the warning said
    compositor = ReferenceCompositor(loaded.picture, loaded.crop, config.model.image_size, loaded.face,
                                     max_side=config.output.max_side)  # fmt: skip
    layout = compositor.layout() or FaceLayout.canonical(compositor.size[1])
    mode = config.pipeline.mouth
    if is_photo is None:
        is_photo = partial(square_is_photo, loaded.square, loaded.square_face)
    if mode != MouthMode.blend:  # warp; auto: warp, or None: blend (mouth_for says when)
        lips = reference_lips(loaded.picture, loaded.face)  # None: estimated from the landmarks
        compositor.mouth = mouth_for(compositor, layout, lips, is_photo(), mode == MouthMode.auto, loaded.square, warn)
    settings = idle_motion_settings(config)
    if settings.active:
        compositor.warp = IdleMotion(layout, compositor.size, config.model.fps, config.seed, settings).warp_in_place
    return compositor


def _open_inputs(request: RenderRequest, config: Config, warn: Callable[[str], None]) -> tuple[
    np.ndarray, ReferenceCompositor | None, Any, RenderInputs
]:  # fmt: skip
    """The reference as the family reads it (the square, or the family's own framing), its compositor (None: none),
    the audio source and the ``RenderInputs`` (a source video, the speakers' regions); the photo warning. ffmpeg
    reads the audio file's header in its own process (~30 ms) while the image's face is searched; an image error
    still comes first (the audio's outcome is then not asked)."""
    block = max(1, int(config.pipeline.audio_block_s * config.model.sample_rate))
    with ThreadPoolExecutor(max_workers=1) as pool:
        audio_file = None if request.audio == STREAM else pool.submit(
            open_audio, request.audio_files, request.audio_type, config, block, warn)  # fmt: skip
        opened = open_picture(request.image, request.video, config, warn, face=config.pipeline.face)
        loaded = opened.loaded
        # The compositor's mouth and the photo warning both ask whether the square is a photograph: one face search.
        is_photo = cache(partial(square_is_photo, loaded.square, loaded.square_face))
        compositor = compositor_for(loaded, config, is_photo, warn)
        if config.model.weights == WeightsSource.checkpoint and not config.model.checkpoint:
            if request.prompt:
                warn(f"note: --prompt: the bundled model (model={config.model.name}) shows no visible style (at most a "
                     "slightly different mouth); prompts are for the models that read one (docs/model-card.md, Prompts)")  # fmt: skip
            # the bundled model knows cartoons only
            warn_if_out_of_domain(loaded.square, f"image '{request.picture}'", warn, composited=compositor is not None,
                                  warped=compositor is not None and compositor.mouth is not None,
                                  photo=is_photo())  # fmt: skip
        if audio_file is None:
            source = AudioStreamSource(config.model.sample_rate, block, request.raw_audio)
        else:
            source = audio_file.result()
    inputs = render_inputs(opened, request.audio_files, request.audio_type, list(request.person_boxes), config, warn)
    return opened.reference, compositor, source, inputs


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def render(
    request: RenderRequest,
    cfg: DictConfig,
    progress_factory: Callable[[int, int | None], Any] | None = None,
    warn: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    record_seams: bool = False,
    resume: bool = False,
    resume_command: str = "",
    output_lock: OutputLock | None = None,
) -> dict[str, Any]:
    """Render ``request`` with config ``cfg``; returns the report printed by ``--json``.

    ``progress_factory(fps, total_frames_estimate)`` returns a context manager with ``update(Progress)``.
    ``resume`` continues a stopped render of the same output (same inputs and config, else ``BadInputError``).
    SIGINT/SIGTERM stop it after the current step with ``RenderInterrupted`` (exit code 130/143), whose message
    names the partial MP4 and ``resume_command``. The output file is written under its lock (``OUT.lock``): a second
    render of it fails at once (``OutputLockedError``); ``output_lock`` is one the caller already holds.
    """
    with StopRequests() as stop, rank_failures():
        return _render(request, cfg, progress_factory, warn, record_seams, resume, resume_command, stop, output_lock)


def _render(
    request: RenderRequest,
    cfg: DictConfig,
    progress_factory: Callable[[int, int | None], Any] | None,
    warn: Callable[[str], None],
    record_seams: bool,
    resume: bool,
    resume_command: str,
    stop: StopRequests,
    output_lock: OutputLock | None,
) -> dict[str, Any]:
    started = time.perf_counter()
    config = to_config(cfg)
    _check_request(request, config, resume)
    o = config.output
    live = [parse_publish_target(t, o.gop_seconds, o.hls_window, o.publish_timeout_s) for t in o.publish]
    _check_outputs_spare_inputs(request, config, live)
    reference, compositor, source, inputs = _open_inputs(request, config, warn)
    if config.model.weights == WeightsSource.random:
        weights = "random"
        warn("note: model.weights=random: untrained weights, the video is noise (for tests and benchmarks only)")
    else:
        weights = str(resolve_checkpoint(config))
    if config.runtime.threads:
        torch.set_num_threads(config.runtime.threads)
    device = resolve_device(config)
    parallel = start_parallel(config, device)  # alone, or one rank of a render over torchrun's ranks
    if request.audio == STREAM and parallel.world.world_size > 1:
        raise BadInputError("--audio - (stdin) works for one process only; render the audio from a file under torchrun")
    file = request.output_file if parallel.world.is_primary else None  # only rank 0 touches the output
    lock = output_lock
    created: list[Path] = []  # folders this render made: removed again if it fails before writing into them
    try:
        if parallel.world.is_primary:
            for target in [file] if file is not None else []:
                created += _make_output_folder(target)
            for output in live:
                if output.kind == "hls":
                    created += _make_output_folder(Path(output.target))
        if file is not None and lock is None:
            lock = OutputLock(file)
            lock.acquire()  # before anything of the output is written or removed; models load after it
        try:
            return _render_locked(request, cfg, config, progress_factory, warn, record_seams, resume, resume_command,
                                  stop, started, live, reference, compositor, source, weights, device, parallel,
                                  inputs, lock)  # fmt: skip
        finally:
            if lock is not None and lock is not output_lock:
                lock.release()
    finally:
        remove_empty_folders(created)


def _render_locked(
    request: RenderRequest, cfg: DictConfig, config: Config, progress_factory: Callable[[int, int | None], Any] | None,
    warn: Callable[[str], None], record_seams: bool, resume: bool, resume_command: str, stop: StopRequests,
    started: float, live: list[Output], reference: Any, compositor: ReferenceCompositor | None, source: Any,
    weights: str, device: torch.device, parallel: Any, inputs: RenderInputs, lock: OutputLock | None = None,
) -> dict[str, Any]:  # fmt: skip
    # the family may choose its defaults by whether its frames are composited (the bundled one: its motion frames)
    pipeline = build_pipeline(config, device, parallel, composited=compositor is not None)
    models = pipeline.models
    # Compositing reads only the mouth region of the model's frames: only that part is decoded.
    decode_only = {"read_box": compositor.model_box()} if compositor is not None else {}
    decode_only["inputs"] = inputs  # what shapes the work: a source video, the speakers
    if not parallel.world.is_primary:  # computes its share of what rank 0 computes; only rank 0 writes the output
        checkpoint = parallel.from_primary(None) if resume else None  # rank 0 reads the resume point
        return render_as_follower(pipeline, reference, source, request.prompt, parallel.agreed(stop.requested),
                                  resume=checkpoint, **decode_only)  # fmt: skip

    fps = config.model.fps
    height, width = compositor.size if compositor is not None else reference.shape[:2]
    grid = checkpoint_grid(pipeline.schedule, max(1, round(fps * config.output.gop_seconds)))
    file, streamed_audio = request.output_file, request.audio == STREAM
    store: ResumeStore | None = None  # checkpoints for --resume: only a file rendered from a file can be resumed
    checkpoint = None
    partial = partial_path_for(file) if file is not None else None
    if file is not None and not streamed_audio:
        store = ResumeStore(file)
        found = fingerprint(request.picture, request.audio, request.prompt, cfg, config, device, models.precision.name,
                            parallel.layout)  # fmt: skip
        found.update(input_digests(request.video, request.audio_files, list(request.person_boxes), request.audio_type,
                                   file_digest))  # fmt: skip
        checkpoint = resume_point(store, found, partial, warn) if resume else None
        if checkpoint is None:
            store.reset(found)
    if resume:
        checkpoint = parallel.from_primary(checkpoint)  # the other ranks continue from the same point
    start = checkpoint.frames if checkpoint is not None else 0
    if store is not None:
        store.begin_run(start)
    estimate = round(source.duration_hint * fps) if source.duration_hint else None
    resume_hint = f"resume with: {resume_command or '--resume'}"

    def dropped(output: Output, reason: str) -> None:
        warn(f"warning: publish target '{output.label}' failed ({reason}); dropped it, the other outputs go on "
             "(output.on_publish_failure=drop)")  # fmt: skip

    writer = Encoder(
        file, width, height, fps, None if streamed_audio else output_audio(request.audio_files, request.audio_type),
        crf=config.output.crf, preset=config.output.preset, gop_seconds=config.output.gop_seconds,
        start_frame=start, keyframe_period=grid.period, keyframe_shift=grid.shift,
        outputs=live + ([stdout_output()] if request.output == STREAM else []),
        drop_failed_live=config.output.on_publish_failure == PublishFailure.drop, on_dropped=dropped,
        audio_pipe=streamed_audio, hold_fds=(lock.fileno(),) if lock is not None else (),  # the lock lives while ffmpeg does
    )  # fmt: skip

    def kept_so_far() -> str:
        """Where the video rendered so far is, and how to continue it (for the message of an error)."""
        if partial is None:
            return "the live outputs end here"
        where = f"the video so far is in '{partial}'" + (f" (earlier parts in '{store.folder}')" if store and store.parts else "")
        return f"{where}; {resume_hint}" if store is not None else where

    pacer: RealtimePacer | None = None
    try:
        if streamed_audio:
            source.encoder_audio = writer.write_audio
            # A stop ends a stream's input, even one stalled: the render makes the video of all the audio that came.
            stop.on_request(source.end_input)
        if config.output.realtime:

            def underrun(count: int) -> None:
                if count == 1:
                    warn("warning: --realtime: generation fell behind the clock, the live output stalled; a faster "
                         "device, more runtime.threads or pipeline=preview avoids it (underruns are counted in the "
                         "report)")  # fmt: skip

            pacer = RealtimePacer(writer, fps, config.output.realtime_buffer_s, on_underrun=underrun)
        sink = pacer if pacer is not None else writer
        if compositor is not None:  # the model's square frames become the reference picture with their mouth
            sink = CompositingSink(compositor, [sink], first_frame=start)
        progress_cm = progress_factory(fps, estimate) if progress_factory else None
        should_stop = None if streamed_audio else parallel.agreed(stop.requested)  # a stream stops at its end
        run = dict(record_seams=record_seams, resume=checkpoint, should_stop=should_stop, **decode_only)
        if store is not None:
            run.update(checkpoints=grid, on_checkpoint=checkpoint_saver(store))
        models.monitor.reset()  # the modules outlive a render (batch reuses them); their placement costs do not
        if progress_cm is not None:
            with progress_cm as bar:
                stats = pipeline.render(reference, source, [sink], request.prompt, on_progress=bar.update, **run)
        else:
            stats = pipeline.render(reference, source, [sink], request.prompt, **run)
        rss_end = current_rss_mb()  # after the last segment: what a render holds once it runs (flat over hours)
        if pacer is not None:
            pacer.close(hurry=stats.stopped)  # the last frames go out on the clock too
    except KeyboardInterrupt:  # a second signal: stop at once, keep what the encoder has, its audio cut to its video
        stop.finishing()
        writer.abort(trim=True)
        raise RenderInterrupted(f"interrupted by {stop.name}; {kept_so_far()}", stop.exit_code) from None
    except BaseException as error:
        writer.abort(trim=True)
        rendered = writer.frames_written > 0 or (store is not None and bool(store.parts))
        if not isinstance(error, DiskFullError) and not rendered:
            # Failed before a frame was made (a broken checkpoint's NaN in chunk 0, a model that cannot run): an empty
            # partial and a state without a checkpoint are nothing to resume.
            if partial is not None:
                partial.unlink(missing_ok=True)
            if store is not None:
                store.remove()
            if isinstance(error, BadInputError) and streamed_audio and stop.requested():  # stopped before any audio
                raise RenderInterrupted(f"interrupted by {stop.name} before any audio came on stdin; nothing was "
                                        "written", stop.exit_code) from None  # fmt: skip
        elif isinstance(error, AvatarGenError) and not isinstance(error, PublishError) and rendered:
            error.args = (f"{error}; {kept_so_far()}",)  # what was rendered is never deleted by an error after it
        raise
    finally:
        if pacer is not None:
            pacer.discard()  # after an error: its thread ends and its queued frames are dropped
        source.close()
        if inputs.video is not None:
            inputs.video.close()
    if stats.stopped or (streamed_audio and stop.requested()):  # a stream's stop ended its input
        stop.finishing()
        try:
            partial = writer.close_partial()
        except AvatarGenError as error:  # the encoder failed as it closed: the partial still plays up to its last fragment
            warn(f"warning: closing the partial video: {error}")
            partial = writer.abort()
        if store is None:
            kept = f"the video is in '{partial}'" if partial else "the live outputs end here"
            raise RenderInterrupted(f"interrupted by {stop.name} after {stats.frames} frames ({stats.frames / fps:.2f} s); {kept}", stop.exit_code)
        where = f"'{partial}'" + (f" (earlier parts in '{store.folder}')" if store.parts else "")
        raise RenderInterrupted(
            f"interrupted by {stop.name} after {stats.frames} frames ({stats.frames / fps:.2f} s); the video of this "
            f"run is in {where}; {resume_hint}",
            stop.exit_code,
        )
    if source.damage is not None:
        what = "audio from stdin" if streamed_audio else f"audio file '{request.audio}'"
        warn(f"warning: {what} is damaged ({source.damage}); the video covers the {stats.frames / fps:.2f} s that "
             "decoded")  # fmt: skip
    encode_started = time.perf_counter()
    if store is not None and store.parts:
        writer.close_partial(trim=False)
        joined = file.with_name(f".{file.stem}.joining.mp4")
        parts = [(p.file, p.end - p.start) for p in store.parts] + [(partial, writer.frames_written)]
        join_parts(parts, output_audio(request.audio_files, request.audio_type), joined, fps)
        os.replace(joined, file)
        partial.unlink(missing_ok=True)
    else:
        writer.close()
    if store is not None:
        store.remove()
    if config.output.save_config and file is not None:
        _write_text_atomic(config_path_for(file), to_yaml(cfg))
    wall = time.perf_counter() - started
    duration = stats.frames / config.model.fps
    stage_s = dict(stats.stage_s)
    if isinstance(sink, CompositingSink):  # publish held the compositing: reported apart from the encoder's pipe
        stage_s["composite"], stage_s["idle_motion"] = sink.paste_s, sink.move_s
        stage_s["publish"] -= sink.paste_s + sink.move_s
    stage_s["encode_finish"] = time.perf_counter() - encode_started
    ttff = (writer.first_frame_time - started) if writer.first_frame_time else None
    return {
        "output": str(request.output) if request.output is not None else None,
        "weights": weights,
        "frames": stats.frames,
        "fps": config.model.fps,
        "duration_s": round(duration, 4),
        "chunks": stats.n_chunks,
        "i_chunks": stats.i_chunks,
        "motion_frames": pipeline.schedule.motion_frames,
        "ttff_s": round(ttff, 4) if ttff is not None else None,
        "wall_s": round(wall, 4),
        "gen_fps": round(stats.frames / wall, 3) if wall > 0 else None,
        "rtf": round(wall / duration, 4) if duration > 0 else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "rss_end_mb": round(rss_end, 1) if rss_end is not None else None,
        "device": str(device),
        "dtype": models.precision.name,  # what the stage forwards computed in (runtime.dtype resolved)
        "dtype_choice": models.precision.describe(),
        "overlap": pipeline.overlap,  # segments emitted on a second thread (runtime.overlap)
        "parallel": parallel.layout.report(),  # how torchrun's ranks shared the render (docs/distributed.md)
        "stage_s": {k: round(v, 4) for k, v in stage_s.items()},
        "seams": stats.seams,
        "resumed_from": stats.resumed_from,
        "publish": [{"target": o.label, "kind": o.kind, "dropped": o.label in writer.dropped,
                     "reason": writer.dropped.get(o.label)} for o in live],  # fmt: skip
        "realtime": pacer.stats.as_dict() if pacer is not None else None,
        "offload": models.monitor.report(),
    }
