"""The outputs of one render, opened and closed in one place: the encoder (one ffmpeg for the MP4 file, the live
targets and stdout), the real-time pacer in front of it (``--realtime``), the reference compositor in front of both,
and the frame sinks registered beside the encoder (avatargen/io/sink.py: a new sink is one file). A finished render
publishes ``OUT.mp4`` (its earlier parts joined after a resume); a stopped one closes its partial MP4; a failed one
aborts, its audio cut to its video."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from avatargen.compose.composite import CompositingSink, ReferenceCompositor
from avatargen.config.schema import Config, OutputConfig, PublishFailure
from avatargen.errors import AvatarGenError
from avatargen.io.catch_up import LIVE_BACKLOG_S, InputGate
from avatargen.io.encoder import ENCODER_AUDIO_RATE, Encoder, publish_finished
from avatargen.io.mp4_join import join_parts
from avatargen.io.no_encoder import NoEncoder
from avatargen.io.outputs import Output
from avatargen.io.pacing import CatchUp, RealtimePacer
from avatargen.io.sink import FrameSink, RenderSink, SinkContext, scheme_of, sink_plugins, sink_schemes
from avatargen.io.sink_feed import FileAudioReader, SinkFeed
from avatargen.pipeline.schedule import CheckpointGrid


@dataclass(frozen=True)
class OutputPlan:
    """Where one render's frames go and how: the MP4 file (None: none), the ffmpeg outputs beside it (live targets,
    stdout), the frames' size and rate, the audio the encoder muxes (a file or mix; None with ``streamed_audio``,
    whose audio comes through the pipe) and the ``output`` section of the config."""

    file: Path | None
    outputs: list[Output]
    width: int
    height: int
    fps: int
    audio: Any
    streamed_audio: bool
    settings: OutputConfig
    part_id: str | None = None  # the run's part id, tagged in its partial MP4 (a resume splices only its own)


class RenderOutputs:
    """One render's outputs, from the encoder's start to the published file (or the kept partial).

    ``open`` starts ffmpeg; ``front(...)`` is the sink the pipeline writes into (the compositor, the pacer, the
    encoder and the registered sinks behind it); then exactly one ending: ``publish`` (finished), ``close_stopped``
    (a stop: the partial kept) or ``abort`` (an error). ``config`` and ``start_frame`` are told to sink factories."""

    def __init__(self, plan: OutputPlan, grid: CheckpointGrid, start_frame: int, compositor: ReferenceCompositor | None,
                 config: Config, warn: Callable[[str], None], hold_fds: tuple[int, ...] = ()):  # fmt: skip
        self.plan, self.start_frame, self.compositor, self.config, self.warn = plan, start_frame, compositor, config, warn
        settings = plan.settings

        def dropped(output: Output, reason: str) -> None:
            warn(f"warning: publish target '{output.label}' failed ({reason}); dropped it, the other outputs go on "
                 "(output.on_publish_failure=drop)")  # fmt: skip

        # A render whose only outputs are sinks (webrtc://, an agent's frames) encodes nothing here.
        self.writer = NoEncoder() if plan.file is None and not plan.outputs else Encoder(
            plan.file, plan.width, plan.height, plan.fps, plan.audio,
            crf=settings.crf, preset=settings.preset, gop_seconds=settings.gop_seconds,
            start_frame=start_frame, keyframe_period=grid.period, keyframe_shift=grid.shift,
            outputs=plan.outputs, drop_failed_live=settings.on_publish_failure == PublishFailure.drop,
            on_dropped=dropped, audio_pipe=plan.streamed_audio,
            hold_fds=hold_fds,  # the locks live while ffmpeg does
            part_id=plan.part_id,
        )  # fmt: skip
        self.pacer: RealtimePacer | None = None
        self.gate: InputGate | None = None
        self.sinks: list[RenderSink] = []  # the registered sinks opened for this render
        self.sink_targets: list[str] = []  # the --publish targets they serve (webrtc://), for the report
        self.feed: SinkFeed | None = None
        self.compositing: CompositingSink | None = None
        self._sinks_closed = False

    @property
    def frames_written(self) -> int:
        return self.writer.frames_written

    def front(self, audio: Any, on_stop: Callable[[Callable[[], None]], None]) -> list[FrameSink]:
        """The sinks the pipeline writes into: the compositor in front of the pacer (``--realtime``), the pacer in
        front of the encoder and the registered sinks (``SinkFeed``: frames and their audio to each). A streamed
        ``audio`` goes to them through the pacer in live mode (which can then drop silence to catch up);
        ``on_stop(callback)`` ends its input on a stop."""
        settings, fps, live = self.plan.settings, self.plan.fps, self.plan.streamed_audio
        on_stop(self.writer.hurry)  # a stop never waits long on an encoder that stopped reading
        self.sinks = self._open_sinks()
        file_audio = None
        if self.sinks and not live and self.plan.audio is not None:
            file_audio = FileAudioReader(self.plan.audio, self.start_frame / fps)
        self.feed = SinkFeed(self.writer, self.sinks, fps, file_audio)
        if live:
            audio.encoder_audio = self.feed.write_audio
            # A stop ends a stream's input, even one stalled: the render makes the video of all the audio that came.
            on_stop(audio.end_input)
        if settings.realtime:
            target = settings.realtime_target_s
            catching_up = live and target > 0
            warn = self.warn

            def underrun(count: int) -> None:
                if count == 1 and not catching_up:  # catching up holds frames in pauses by design (docs/live.md)
                    warn("warning: --realtime: generation fell behind the clock, the live output stalled; a faster "
                         "device, more runtime.threads or pipeline=preview avoids it (underruns are counted in the "
                         "report)")  # fmt: skip

            # Seconds of late input are left out before they are generated (avatargen/io/catch_up.py).
            self.gate = InputGate(backlog_s=max(2 * target, LIVE_BACKLOG_S)) if catching_up else None
            self.pacer = RealtimePacer(self.feed, fps, settings.realtime_buffer_s, on_underrun=underrun,
                                       audio_rate=ENCODER_AUDIO_RATE if live else None,
                                       catch_up=CatchUp(target) if catching_up else None,
                                       on_position=self.gate.shown if self.gate is not None else None)  # fmt: skip
            if live:
                audio.encoder_audio = self.pacer.write_audio
                audio.gate = self.gate
        behind = [self.pacer if self.pacer is not None else self.feed]
        if self.compositor is not None:  # the family's square frames become the picture with their mouth
            self.compositing = CompositingSink(self.compositor, behind, first_frame=self.start_frame)
            return [self.compositing]
        return behind

    def _open_sinks(self) -> list[RenderSink]:
        """Each registered sink's for this render: those of no scheme always, the others for their ``--publish``
        targets (avatargen/io/sink.py)."""
        plan, publish = self.plan, list(self.plan.settings.publish)
        sinks: list[RenderSink] = []
        for plugin in sink_plugins(publish):
            targets = tuple(t for t in publish if scheme_of(t) in plugin.schemes)
            if plugin.schemes and not targets:
                continue
            context = SinkContext(plan.width, plan.height, plan.fps, self.start_frame, plan.file, self.config,
                                  paced=plan.settings.realtime, targets=targets)  # fmt: skip
            if (sink := plugin.open(context)) is not None:
                sinks.append(sink)
                self.sink_targets += targets
        return sinks

    def generated(self, stopped: bool) -> None:
        """Every frame is in: the pacer lets its last frames out on the clock (at once after a stop)."""
        if self.pacer is not None:
            self.pacer.close(hurry=stopped)

    def discard(self) -> None:
        """The pacer's thread ends and its queued frames are dropped (after an error; a no-op once it closed)."""
        if self.pacer is not None:
            self.pacer.discard()

    def abort(self, trim: bool = True) -> Path | None:
        """An error: the encoder stops, its audio cut to its video (``trim``); the partial MP4, if any."""
        self._close_sinks(finished=False)
        return self.writer.abort(trim=trim)

    def close_stopped(self) -> Path | None:
        """A stop: the partial MP4 closed with what was emitted (None: no file). An encoder that fails as it closes
        leaves the partial playable up to its last fragment, with one warning."""
        self._close_sinks(finished=False)
        try:
            return self.writer.close_partial()
        except AvatarGenError as error:
            self.warn(f"warning: closing the partial video: {error}")
            return self.writer.abort()

    def publish(self, earlier_parts: list[tuple[Path, int]], partial: Path | None,
                before_publish: Callable[[], None]) -> None:  # fmt: skip
        """A finished render becomes ``OUT.mp4``, ``before_publish`` run first (the config beside it): the encoder's
        file, or, after a resume, the ``earlier_parts`` (file, frames) and this run's ``partial`` joined, with the
        plan's audio."""
        self._close_sinks(finished=True)
        file = self.plan.file
        if not earlier_parts:
            self.writer.close(before_publish=before_publish)  # the config first: OUT.mp4 never comes without it
            return
        self.writer.close_partial(trim=False)
        joined = file.with_name(f".{file.stem}.joining.mp4")
        join_parts([*earlier_parts, (partial, self.writer.frames_written)], self.plan.audio, joined, self.plan.fps)
        publish_finished(joined, file, before_publish)
        partial.unlink(missing_ok=True)

    def _close_sinks(self, finished: bool) -> None:
        if self._sinks_closed:
            return
        self._sinks_closed = True
        if self.feed is not None:
            self.feed.close()
        for sink in self.sinks:
            sink.close(finished)

    # -- what the report says of them ------------------------------------------------------------------------------

    def split_stage_times(self, stage_s: dict[str, float]) -> None:
        """The compositing the publish step held, reported apart from the sinks' own writes."""
        if self.compositing is not None:
            sink = self.compositing
            stage_s["composite"], stage_s["idle_motion"] = sink.paste_s, sink.move_s
            stage_s["publish"] -= sink.paste_s + sink.move_s

    def publish_report(self, live: list[Output]) -> list[dict]:
        """What each ``--publish`` target did (dropped after a failure, and why), in the order given: ``live`` are the
        encoder's (in that order), the others a sink's (``webrtc://``: its scheme is its kind; a sink drops nothing)."""
        publish = list(self.plan.settings.publish)
        dropped, encoder_outputs, served = self.writer.dropped, iter(live), sink_schemes(publish)
        report = []
        for target in publish:
            if scheme_of(target) in served:  # a sink's target: listed when its sink opened
                if target in self.sink_targets:
                    report.append({"target": target, "kind": scheme_of(target), "dropped": False, "reason": None})
            elif (o := next(encoder_outputs, None)) is not None:
                report.append({"target": o.label, "kind": o.kind, "dropped": o.label in dropped,
                               "reason": dropped.get(o.label)})  # fmt: skip
        return report

    def realtime_report(self) -> dict | None:
        """The pacer's figures, and the silence left out at the input in live mode (``input_dropped_s``)."""
        if self.pacer is None:
            return None
        report = self.pacer.stats.as_dict()
        if self.gate is not None:
            report["input_dropped_s"] = round(self.gate.dropped_s, 3)
        return report

