"""One render request, end to end, as a session of named steps: check the request, open its inputs, start the
runtime, claim the outputs, build the pipeline, find the resume point, start the encoder, generate, finish, report.

The outputs (file, live, stdout) are one ``Encoder``, optionally behind a real-time pacer and the reference
compositor. Signals and resume (avatargen/resume.py): a stopped render closes its partial MP4 with what was emitted;
``resume=True`` continues from the latest checkpoint, writes the rest as a new part, and joins the parts into
``OUT.mp4``. Ranks other than 0 of a torchrun render run the same steps up to the build, then follow rank 0's
generation and write nothing.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np
from omegaconf import DictConfig

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.speech_drive import SpeechDrive
from avatargen.config.loader import to_config, to_yaml
from avatargen.config.families import resolve_checkpoint
from avatargen.config.schema import Config, WeightsSource
from avatargen.errors import AvatarGenError, BadInputError, DiskFullError, PublishError, RenderInterrupted
from avatargen.face.domain import square_is_photo
from avatargen.io.audio import AudioFileSource
from avatargen.io.audio_stream import AudioStreamSource
from avatargen.io.console import RANDOM_WEIGHTS, Note, say
from avatargen.io.encoder import EncoderStalledError
from avatargen.io.output_lock import OutputLock, lock_path_for
from avatargen.io.owned_names import (YAML_HEADER, clear_playlist_names, foreign_reason, publish_lock_path, remove_name,
                                      write_text_atomic)
from avatargen.io.outputs import Output, OutputKind, stdout_output
from avatargen.io.resume_store import ResumeStore, file_digest
from avatargen.io.targets import remove_empty_folders
from avatargen.pipeline.blank import blank_pipeline
from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.family import FamilyEngine, engine_for
from avatargen.pipeline.follower import render_as_follower
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.pipeline import Pipeline
from avatargen.pipeline.run import RenderRun
from avatargen.pipeline.schedule import CheckpointGrid, checkpoint_grid
from avatargen.pipeline.stats import RenderStats
from avatargen.render.compositing import compositor_for, model_frames_likely_read
from avatargen.render.outputs import OutputPlan, RenderOutputs
from avatargen.render.inputs import input_digests, open_audio, open_picture, output_audio, render_inputs
from avatargen.render.request import (STREAM, RenderRequest, check_before_reading, config_path_for, make_output_folder,
                                      partial_path_for)
from avatargen.resume import StopRequests, checkpoint_saver, fingerprint, fingerprinted_settings, resume_point
from avatargen.runtime.distributed import ParallelContext, note_kept, rank_failures, solo_parallel, start_parallel
from avatargen.runtime.memory import current_rss_mb, peak_rss_mb
from avatargen.threads import set_torch_thread_count, torch_thread_count

if TYPE_CHECKING:  # a type only: a render that runs no model imports no torch
    import torch


def _print_to_stderr(message: str) -> None:
    say(message)  # dropped when stderr cannot take it: a warning never stops a render (io.console)


@dataclass
class RenderOptions:
    """How ``render()`` runs a request (everything but the request and its config).

    ``progress_factory(fps, total_frames_estimate)`` returns a context manager with ``update(Progress)``;
    ``record_seams`` adds the chunk seams to the report; ``resume`` continues a stopped render of the same output,
    ``resume_command`` is the command the stop message gives for it; ``output_lock`` is one the caller already holds.
    """

    progress_factory: Callable[[int, int | None], Any] | None = None
    warn: Callable[[str], None] = _print_to_stderr
    record_seams: bool = False
    resume: bool = False
    resume_command: str = ""
    output_lock: OutputLock | None = None
    overwrite: bool = False  # replace what is at the output's names even when avatargen did not write it
    after_checkpoint: Callable[[], None] | None = None  # called after each checkpoint is saved in OUT.resume/


@dataclass
class OpenedInputs:
    """A request's inputs, opened: the reference as the family reads it, its compositor (None: the family's frames
    go out as they are), the audio source and what else shapes the work (a source video, the speakers)."""

    reference: np.ndarray
    compositor: ReferenceCompositor | None
    audio: Any
    inputs: RenderInputs
    drive: SpeechDrive | None = None  # fed with the streamed audio as the pipeline reads it

    def blocks(self) -> Iterable[np.ndarray]:
        """The audio blocks the pipeline reads (a stream's also fed to the compositor's speech drive)."""
        return self.drive.tee(self.audio) if self.drive is not None else self.audio

    def close(self) -> None:
        close_inputs(self.audio, self.compositor, self.inputs.video)


def close_inputs(audio: Any, compositor: ReferenceCompositor | None, video: Any) -> None:
    """Stop every decoder a request's inputs started: the audio source's, the compositor's speech drive's (it reads
    the audio file on a thread of its own) and the source video's. Each is idempotent."""
    audio.close()
    drive = getattr(getattr(compositor, "mouth", None), "drive", None)
    if drive is not None:
        drive.close()
    if video is not None:
        video.close()


def render(
    request: RenderRequest,
    cfg: DictConfig,
    progress_factory: Callable[[int, int | None], Any] | None = None,
    warn: Callable[[str], None] = _print_to_stderr,
    record_seams: bool = False,
    resume: bool = False,
    resume_command: str = "",
    output_lock: OutputLock | None = None,
    overwrite: bool = False,
    after_checkpoint: Callable[[], None] | None = None,
    stop: StopRequests | None = None,
) -> dict[str, Any]:
    """Render ``request`` with config ``cfg``; returns the report printed by ``--json`` (``RenderOptions`` says what
    the other arguments do).

    SIGINT/SIGTERM stop it after the current step with ``RenderInterrupted`` (exit code 130/143), whose message
    names the partial MP4 and ``resume_command``; so does ``stop.request()`` from code (another thread). The output
    file is written under its lock (``OUT.lock``): a second render of it fails at once (``OutputLockedError``).
    """
    options = RenderOptions(progress_factory, warn, record_seams, resume, resume_command, output_lock, overwrite,
                            after_checkpoint)  # fmt: skip
    with stop if stop is not None else StopRequests() as stop, rank_failures():
        return RenderSession(request, cfg, options, stop).run()


def load_models_early(config: Config, family: FamilyEngine) -> None:
    """Build and place a single-process render's models into the per-process cache that ``build_pipeline`` reads,
    beside the main thread's work on the inputs (time to first frame: docs/performance.md); not where the compositor
    will likely read none of their frames (``model_frames_likely_read``: a photograph driven by its speech). A render
    over several ranks builds them in its turn (their process group comes first), and any error here is left for
    that turn, where it is raised in order."""
    try:
        parallel = solo_parallel(config, family.splittable_work(config))
        if parallel is None:
            return
        from avatargen.pipeline.build import place_models, resolve_device

        if config.runtime.threads:  # as run() set them on its thread: the precision probes time with these
            set_torch_thread_count(config.runtime.threads)
        place_models(config, family, resolve_device(config), parallel)
    except Exception:  # noqa: BLE001 - raised again, in order, when build_pipeline builds them
        pass


class RenderSession:
    """One request through its steps, in the order ``run()`` takes them; a step leaves what later steps read as the
    attributes ``__init__`` declares."""

    def __init__(self, request: RenderRequest, cfg: DictConfig, options: RenderOptions, stop: StopRequests):
        self.request, self.cfg, self.options, self.stop = request, cfg, options, stop
        self.warn = options.warn
        self.started = time.perf_counter()
        self.streamed_audio = request.audio == STREAM
        self.config: Config = to_config(cfg)
        self.family: FamilyEngine = engine_for(self.config)  # once; passed down
        self.live: list[Output] = []
        self.opened: OpenedInputs
        self.weights = "random"
        self.device: torch.device | str  # "cpu" where no model runs (the compositor works on the CPU)
        self.models_likely = True  # model_frames_likely_read: the models load beside the face search
        self.threads: int | None = None  # torch's threads, fixed before the models load (None: torch not asked)
        self.parallel: ParallelContext
        self.lock: OutputLock | None = options.output_lock
        self.playlist_locks: list[OutputLock] = []  # held while publishing to an HLS playlist
        self.pipeline: Pipeline
        self.store: ResumeStore | None = None  # checkpoints for --resume: only a file rendered from a file
        self.checkpoint: RenderCheckpoint | None = None
        self.partial: Path | None = None
        self.outputs: RenderOutputs
        self.grid: CheckpointGrid  # where checkpoints and forced keyframes fall (start_encoder)
        self.rss_end: float | None = None

    def run(self) -> dict[str, Any]:
        self.check()
        # guessed here, not on the worker: there it delayed the models' load into the first A2V window, which then ran
        # 3-10x slower beside the worker's torch threads (benchmarks/speed/ttff.py, a cartoon); a render whose
        # compositor reads none of the model's frames imports no torch (a photograph's first frame comes sooner)
        picture = self.request.image if self.request.video is None else None
        self.models_likely = not self.family.composited or model_frames_likely_read(self.config, picture)
        try:
            if self.models_likely:
                importing = time.perf_counter()
                self.family.import_models()  # torch and the models' code, here before the models load on a worker
                # start-up, not the render (as for a batch worker's later renders): ttff_s and wall_s leave it out
                self.started += time.perf_counter() - importing
                self._fix_threads()
            return self._steps()
        finally:
            if self.threads is not None:
                set_torch_thread_count(self.threads)  # as they were for this render, whatever a stage set

    def _fix_threads(self) -> None:
        """This thread's torch threads, fixed before the models load on a worker: a thread's first read of its count
        is torch's process-wide one, which that worker's probes set to 1 while they time a core. Read in that window,
        the render ran on one thread without overlapped emission (a cartoon: RTF 0.50 against 0.30)."""
        if self.threads is None:
            self.threads = self.config.runtime.threads or torch_thread_count()
            set_torch_thread_count(self.threads)

    def _steps(self) -> dict[str, Any]:
        self.open_inputs()
        try:
            self.start_runtime()
            with self.claimed_outputs():
                self.build()
                if not self.parallel.world.is_primary:
                    return self.follow()
                self.find_resume_point()
                self.start_encoder()
                stats = self.generate()
                finishing = self.finish(stats)
                return self.report(stats, finishing)
        finally:
            self.opened.close()  # the audio and video decoders stop whatever happened (again: it is idempotent)

    # -- before anything is written --------------------------------------------------------------------------------

    def check(self) -> None:
        """The request, the config and the outputs, before any input is read: no output may be an input."""
        self.live = check_before_reading(self.request, self.config, self.family, self.options.resume,
                                         self.options.overwrite)  # fmt: skip

    def open_inputs(self) -> None:
        """The reference as the family reads it, its compositor, the audio source and the ``RenderInputs``; the
        family's notes on them (``FamilyEngine.reference_notes``). ffmpeg reads the audio file's header in its own process
        (~30 ms) and the models load (``load_models_early``) while the image's face is searched; an image error still
        comes first (the audio's outcome is then not asked, a model error comes when the models are built).

        The notes and warnings said while the inputs are opened are held until all of them are known to be good: a
        request whose input is bad prints its one error line, nothing else."""
        request, config = self.request, self.config
        held: list[str] = []
        warn = held.append  # list.append is atomic: the audio's thread may add to it too
        block = max(1, int(config.pipeline.audio_block_s * config.model.sample_rate))
        with ThreadPoolExecutor(max_workers=2) as pool:
            if self.models_likely:
                pool.submit(load_models_early, config, self.family)
            audio_file = None if self.streamed_audio else pool.submit(
                open_audio, request.audio_files, request.audio_type, config, block, warn)  # fmt: skip
            opened = open_picture(request.image, request.video, config, self.family, warn, face=config.pipeline.face)
            loaded = opened.loaded
            # The compositor's mouth and the photo warning both ask whether the square is a photograph: one search.
            is_photo = cache(partial(square_is_photo, loaded.square, loaded.square_face))
            # a stream drives a photo's mouth as the render reads it (``generate``), the same as its file would
            rate, fps = config.model.sample_rate, config.model.fps
            speech = SpeechDrive(None, rate, fps) if self.streamed_audio else request.audio_files[0]
            # a family whose frames are not the reference's square goes out as it makes them (FamilyEngine.composited)
            compositor = compositor_for(loaded, config, is_photo, warn, speech) if self.family.composited else None
            notes = self.family.reference_notes
            if notes is not None:
                notes(config, picture=str(request.picture), square=loaded.square, prompt=request.prompt,
                      composited=compositor is not None, warped=compositor is not None and compositor.mouth is not None,
                      is_photo=is_photo, warn=warn)  # fmt: skip
            if audio_file is None:
                audio = AudioStreamSource(config.model.sample_rate, block, request.raw_audio, stream=request.stdin)
            else:
                audio = audio_file.result()
        try:
            inputs = render_inputs(opened, request.audio_files, request.audio_type, list(request.person_boxes), config, warn)
            if isinstance(audio, AudioFileSource):
                audio.start_decoding()  # its first blocks wait for the first chunk (on this thread: it outlives the pool's)
        except BaseException:
            close_inputs(audio, compositor, opened.video)  # with the error, not when the garbage collector gets to them
            raise
        for line in held:  # the inputs are good: what was said while they opened, in order
            self.warn(line)
        fed = isinstance(speech, SpeechDrive) and getattr(getattr(compositor, "mouth", None), "drive", None) is speech
        self.opened = OpenedInputs(opened.reference, compositor, audio, inputs, speech if fed else None)

    def start_runtime(self) -> None:
        """The device, and this process's place among torchrun's ranks (alone, or one rank of a render); the threads
        were set at the start of ``run``."""
        config = self.config
        if config.model.weights == WeightsSource.random:
            self.warn(Note(RANDOM_WEIGHTS, "note: model.weights=random: untrained weights, the video is noise (for tests "
                           "and benchmarks only)"))  # fmt: skip
        else:
            self.weights = str(resolve_checkpoint(config, self.family.shipped_checkpoints))
        work = self.family.splittable_work(config)
        solo = solo_parallel(config, work)
        if solo is not None and not self.runs_models:
            self.device, self.parallel = "cpu", solo  # nothing runs on a device: no torch to ask which
        else:
            from avatargen.pipeline.build import resolve_device

            self.device = resolve_device(config)
            self.parallel = start_parallel(config, self.device, work)
        if self.streamed_audio and self.parallel.world.world_size > 1:
            raise BadInputError("--audio - (stdin) works for one process only; render the audio from a file under torchrun")

    @contextmanager
    def claimed_outputs(self) -> Iterator[None]:
        """Rank 0 makes the output folders and holds the output's lock (before anything of it is written or removed;
        the models load after it); folders it made and left empty are removed again, whatever happens."""
        created: list[Path] = []
        file = self.request.output_file if self.parallel.world.is_primary else None  # only rank 0 touches the output
        try:
            if self.parallel.world.is_primary:
                for target in [file] if file is not None else []:
                    created += make_output_folder(target)
                for output in self.live:
                    if output.kind is OutputKind.HLS:
                        created += make_output_folder(Path(output.target))
            if file is not None and self.lock is None:
                if self.options.overwrite and foreign_reason(lock_path_for(file), "lock") is not None:
                    remove_name(lock_path_for(file))  # --overwrite: a user's file or link there goes (a link as a link)
                self.lock = OutputLock(file)
                self.lock.acquire()
            try:
                if self.parallel.world.is_primary:
                    self._claim_playlists()
                yield
            finally:
                for lock in self.playlist_locks:
                    lock.release()
                if self.lock is not None and self.lock is not self.options.output_lock:
                    self.lock.release()
        finally:
            remove_empty_folders(created)

    def _claim_playlists(self) -> None:
        """Each HLS playlist's lock (a second render publishing to it is refused), then what an earlier publish left
        there removed: the muxer writes every name afresh."""
        for output in self.live:
            if output.kind is OutputKind.HLS:
                playlist = Path(output.target)
                if self.options.overwrite and foreign_reason(publish_lock_path(playlist), "lock") is not None:
                    remove_name(publish_lock_path(playlist))
                lock = OutputLock(playlist, publish_lock_path(playlist))
                lock.acquire()
                self.playlist_locks.append(lock)
                clear_playlist_names(playlist)

    # -- the models and where the render starts --------------------------------------------------------------------

    def build(self) -> None:
        """The family's placed models (cached per process) and its steps on the engine; the family may choose its
        defaults by whether its frames are composited (the bundled one: its motion frames). Where the compositor
        reads none of the model's frames, no model: the engine over blank steps (avatargen/pipeline/blank.py)."""
        compositor = self.opened.compositor
        if not self.runs_models:
            self.pipeline = blank_pipeline(self.config, self.family, compositor.model_size)
            return
        from avatargen.pipeline.build import build_pipeline

        self._fix_threads()  # where the guess said no model: now, before they load
        self.pipeline = build_pipeline(self.config, self.family, self.device, self.parallel,
                                       composited=compositor is not None)  # fmt: skip

    @property
    def runs_models(self) -> bool:
        """Whether the render builds and runs the family's models: not where its compositor reads none of their
        frames (a photograph whose speech drives its mouth)."""
        compositor = self.opened.compositor
        return compositor is None or compositor.reads_model()

    def _run(self, resume: RenderCheckpoint | None) -> RenderRun:
        """What shapes the work on every rank: a source video, the speakers, the part of each frame the compositor
        reads (only that is decoded), the resume point."""
        compositor = self.opened.compositor
        return RenderRun(inputs=self.opened.inputs, read_box=compositor.model_box() if compositor is not None else None,
                         resume=resume, record_seams=self.options.record_seams)  # fmt: skip

    def follow(self) -> dict[str, Any]:
        """A rank other than 0: its share of what rank 0 computes, from rank 0's resume point; nothing written."""
        checkpoint = self.parallel.from_primary(None) if self.options.resume else None
        run = self._run(checkpoint).followed(self.parallel.agreed(self.stop.requested))
        return render_as_follower(self.pipeline, self.opened.reference, self.opened.audio, self.request.prompt, run)

    def find_resume_point(self) -> None:
        """With ``--resume``, the latest checkpoint the saved video covers (None: from the start); the resume folder
        of this render, reset unless it resumes. The other ranks continue from the same point."""
        request, file = self.request, self.request.output_file
        self.partial = partial_path_for(file) if file is not None else None
        if file is not None and not self.streamed_audio:
            self.store = ResumeStore(file)
            config = self.config
            weights = [] if config.model.weights == WeightsSource.random else self.family.weight_files(config)
            threads = None if self.runs_models else config.runtime.threads or 1  # None: torch's; no model: one
            settings = fingerprinted_settings(self.cfg, self.device, self.pipeline.models.precision.signature,
                                              self.parallel.layout, threads)  # fmt: skip
            found = fingerprint(request.picture, request.audio, request.prompt, settings, weights)
            found.update(input_digests(request.video, request.audio_files, list(request.person_boxes),
                                       request.audio_type, file_digest))  # fmt: skip
            self.checkpoint = (resume_point(self.store, found, self.partial, self.warn, settings)
                               if self.options.resume else None)  # fmt: skip
            if self.checkpoint is None:
                self.store.reset(found, settings)
        if self.options.resume:
            self.checkpoint = self.parallel.from_primary(self.checkpoint)
        if self.store is not None:
            self.store.begin_run(self.start_frame)

    @property
    def start_frame(self) -> int:
        return self.checkpoint.frames if self.checkpoint is not None else 0

    # -- output ----------------------------------------------------------------------------------------------------

    def start_encoder(self) -> None:
        """The outputs (``RenderOutputs``): one ffmpeg for every output (the MP4 file, live targets, stdout), started
        here; the pacer, the compositor and the registered sinks come in front of it when the generation starts."""
        request, config = self.request, self.config
        compositor = self.opened.compositor
        height, width = compositor.size if compositor is not None else self.opened.reference.shape[:2]
        self.grid = checkpoint_grid(self.pipeline.schedule, max(1, round(config.model.fps * config.output.gop_seconds)))
        plan = OutputPlan(
            request.output_file, self.live + ([stdout_output()] if request.output == STREAM else []), width, height,
            config.model.fps, None if self.streamed_audio else output_audio(request.audio_files, request.audio_type),
            self.streamed_audio, config.output, self.store.part_id if self.store is not None else None,
        )  # fmt: skip
        locks = ([self.lock] if self.lock is not None else []) + self.playlist_locks
        hold = tuple(lock.fileno() for lock in locks)  # the locks live while ffmpeg does
        self.outputs = RenderOutputs(plan, self.grid, self.start_frame, compositor, config, self.warn, hold)

    def _nothing_to_resume(self) -> bool:
        """Stopped before its first checkpoint: a resume would render from the start."""
        store = self.store
        return store is not None and not store.parts and store.choose(self.outputs.frames_written) is None

    def _resume_hint(self) -> str:
        if self._nothing_to_resume():
            return ("it stopped before its first checkpoint was saved, so there is nothing to resume: run the command "
                    "again to start over")  # fmt: skip
        return f"resume with: {self.options.resume_command or '--resume'}"

    def _kept_so_far(self) -> str:
        """Where the video rendered so far is, and how to continue it (for the message of an error)."""
        if self.partial is None:
            return "the live outputs end here"
        store = self.store
        where = f"the video so far is in '{self.partial}'" + (f" (earlier parts in '{store.folder}')" if store and store.parts else "")
        return f"{where}; {self._resume_hint()}" if store is not None else where

    # -- generation ------------------------------------------------------------------------------------------------

    def generate(self) -> RenderStats:
        """The pipeline over the whole audio into the sinks. On an error what was rendered is kept (the partial MP4,
        its audio cut to its video) and the message says how to resume; what failed before a frame leaves nothing."""
        fps, pipeline, store = self.config.model.fps, self.pipeline, self.store
        try:
            audio = self.opened.audio
            sinks = self.outputs.front(audio, self.stop.on_request)
            estimate = round(audio.duration_hint * fps) if audio.duration_hint else None
            progress_cm = self.options.progress_factory(fps, estimate) if self.options.progress_factory else None
            should_stop = None if self.streamed_audio else self.parallel.agreed(self.stop.requested)  # a stream stops at its end
            run = replace(self._run(self.checkpoint), should_stop=should_stop)
            if store is not None:
                saver = checkpoint_saver(store, self.options.after_checkpoint, lambda: self.outputs.frames_written)
                run = replace(run, checkpoints=self.grid, on_checkpoint=saver)
            pipeline.models.monitor.reset()  # the modules outlive a render (batch reuses them); their costs do not
            args = (self.opened.reference, self.opened.blocks(), sinks, self.request.prompt)
            if progress_cm is not None:
                with progress_cm as bar:
                    stats = pipeline.render(*args, replace(run, on_progress=bar.update))
            else:
                stats = pipeline.render(*args, run)
            self.rss_end = current_rss_mb()  # after the last segment: what a render holds once it runs (flat)
            self.outputs.generated(stats.stopped)  # the last frames go out on the clock too
            return stats
        except KeyboardInterrupt:  # a second signal: stop at once, keep what the encoder has, its audio cut to its video
            self.stop.finishing()
            self.outputs.abort(trim=True)
            raise RenderInterrupted(f"interrupted by {self.stop.name}; {self._kept_so_far()}", self.stop.exit_code) from None
        except BaseException as error:
            self._keep_what_was_rendered(error)
            if isinstance(error, EncoderStalledError) and self.stop.requested():  # the stop asked for, ended in time
                raise RenderInterrupted(f"interrupted by {self.stop.name}; {error}", self.stop.exit_code) from None
            raise
        finally:
            self.outputs.discard()  # after an error: the pacer's thread ends and its queued frames are dropped
            self.opened.close()

    def _keep_what_was_rendered(self, error: BaseException) -> None:
        """After ``error``: the encoder stopped with its audio cut to its video; nothing left where no frame was
        made; the message of an error after frames were made names where they are."""
        self.outputs.abort(trim=True)
        store = self.store
        rendered = self.outputs.frames_written > 0 or (store is not None and bool(store.parts))
        if not isinstance(error, DiskFullError) and not rendered:
            # Failed before a frame was made (a broken checkpoint's NaN in chunk 0, a model that cannot run): an empty
            # partial and a state without a checkpoint are nothing to resume.
            if self.partial is not None:
                self.partial.unlink(missing_ok=True)
            if store is not None:
                store.remove()
            if isinstance(error, BadInputError) and self.streamed_audio and self.stop.requested():  # before any audio
                raise RenderInterrupted(f"interrupted by {self.stop.name} before any audio came on stdin; nothing was "
                                        "written", self.stop.exit_code) from None  # fmt: skip
        elif isinstance(error, AvatarGenError) and not isinstance(error, PublishError) and rendered:
            error.args = (f"{error}; {self._kept_so_far()}",)  # what was rendered is never deleted by an error after it
        elif rendered:  # another rank's failure (rank_failures puts that rank's message in its place) or a bug
            note_kept(error, self._kept_so_far())

    # -- the end ---------------------------------------------------------------------------------------------------

    def finish(self, stats: RenderStats) -> float:
        """A stopped render closes its partial and raises ``RenderInterrupted`` with the resume line; a finished one
        becomes ``OUT.mp4`` (its parts joined after a resume) with its config beside it. Returns when the encoder
        began to finish (the report times it)."""
        request, store, fps = self.request, self.store, self.config.model.fps
        if stats.stopped or (self.streamed_audio and self.stop.requested()):  # a stream's stop ended its input
            self._close_stopped(stats)
        if self.opened.audio.damage is not None:
            what = "audio from stdin" if self.streamed_audio else f"audio file '{request.audio}'"
            self.warn(f"warning: {what} is damaged ({self.opened.audio.damage}); the video covers what decoded "
                      f"({stats.frames} frames, {stats.frames / fps:.2f} s)")  # fmt: skip
        finishing = time.perf_counter()
        earlier = [(p.file, p.end - p.start) for p in store.parts] if store is not None else []
        self.outputs.publish(earlier, self.partial, before_publish=self._save_config)  # the config first: OUT.mp4 never comes without it
        if store is not None:
            store.remove()
        return finishing

    def _save_config(self) -> None:
        """``OUT.yaml``, written atomically under avatargen's header (a rerun knows it as its own)."""
        file = self.request.output_file
        if self.config.output.save_config and file is not None:
            write_text_atomic(config_path_for(file), f"{YAML_HEADER}\n{to_yaml(self.cfg)}")

    def _close_stopped(self, stats: RenderStats) -> None:
        stop, store, fps = self.stop, self.store, self.config.model.fps
        stop.finishing()
        partial = self.outputs.close_stopped()
        done = f"interrupted by {stop.name} after {stats.frames} frames ({stats.frames / fps:.2f} s)"
        if self.outputs.frames_written == 0 and self.partial is not None:  # stopped before this run's first frame
            self.partial.unlink(missing_ok=True)  # an empty partial is nothing to keep
            if store is None or not store.parts:
                if store is not None:
                    store.remove()
                raise RenderInterrupted(f"interrupted by {stop.name} before the first frame; nothing was written",
                                        stop.exit_code)  # fmt: skip
            raise RenderInterrupted(f"{done}; the video so far is in the parts in '{store.folder}'; "
                                    f"{self._resume_hint()}", stop.exit_code)  # fmt: skip
        if store is None:
            kept = f"the video is in '{partial}'" if partial else "the live outputs end here"
            raise RenderInterrupted(f"{done}; {kept}", stop.exit_code)
        hint = self._resume_hint()
        if self._nothing_to_resume():
            store.remove()  # no checkpoint in it: a batch must not count the job as resumable
        where = f"'{partial}'" + (f" (earlier parts in '{store.folder}')" if store.parts else "")
        raise RenderInterrupted(f"{done}; the video of this run is in {where}; {hint}", stop.exit_code)

    def report(self, stats: RenderStats, finishing: float) -> dict[str, Any]:
        """What ``--json`` prints: counts, times, memory, where the work ran and what each output did."""
        config, pipeline, writer = self.config, self.pipeline, self.outputs.writer
        models = pipeline.models
        wall = time.perf_counter() - self.started
        duration = stats.frames / config.model.fps
        stage_s = dict(stats.stage_s)
        self.outputs.split_stage_times(stage_s)  # publish held the compositing: reported apart from the pipe
        stage_s["encode_finish"] = time.perf_counter() - finishing
        ttff = (writer.first_frame_time - self.started) if writer.first_frame_time else None
        return {
            "output": str(self.request.output) if self.request.output is not None else None,
            "weights": self.weights,
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
            "rss_end_mb": round(self.rss_end, 1) if self.rss_end is not None else None,
            "device": str(self.device),
            "dtype": models.precision.name,  # what the stage forwards computed in (runtime.dtype resolved)
            "dtype_choice": models.precision.describe(),
            "quantize": models.precision.quantization.describe(),  # int8 linear layers (runtime.quantize resolved)
            "overlap": pipeline.overlap,  # segments emitted on a second thread (runtime.overlap)
            "parallel": self.parallel.layout.report(),  # how torchrun's ranks shared the render (docs/distributed.md)
            "stage_s": {k: round(v, 4) for k, v in stage_s.items()},
            "stages_run": dict(stats.stage_runs),  # how often each of the pipeline's stages ran (none: not run)
            "seams": stats.seams,
            "resumed_from": stats.resumed_from,
            "publish": self.outputs.publish_report(self.live),
            "realtime": self.outputs.realtime_report(),
            "offload": models.monitor.report(),
        }

