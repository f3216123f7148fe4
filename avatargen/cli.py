"""The ``avatargen`` command line (Typer): parse, call, report. Also runs under ``torchrun -m avatargen``."""

from __future__ import annotations

import atexit
import json
import os
import shlex
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable, List, Optional

import typer
from typer._click import exceptions as click_errors  # the Click that Typer parses with
from typer.core import TyperCommand

from avatargen.interrupts import Interrupted, catch_signals, exit_code_of, received, record_signals, signal_of
from avatargen.io.console import guard_standard_streams, say, write_stdout
from avatargen.errors import (EXIT_BAD_INPUT, EXIT_FAILURE, AvatarGenError, BadInputError, ConfigError, PublishError,
                              RenderInterrupted)

EXIT_CODES = (
    "Exit codes: 0 ok; 2 bad input or bad config (a wrong option too), a file at the output's names that avatargen did "
    "not write (--overwrite replaces it), or a stdout that cannot take a command's text; 3 a live output failed "
    "(output.on_publish_failure=stop), the video on stdout (-o -) too: closed by its reader, or full; "
    "130 interrupted (SIGINT), 143 terminated (SIGTERM); 1 ffmpeg or object storage failed (try again; the line says "
    "what is kept) or anything else (a bug: rerun with --debug)."
)

app = typer.Typer(
    name="avatargen",
    help=f"Render talking-avatar videos of any length from a reference image and an audio track.\n\n{EXIT_CODES}",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

OVERWRITE_HELP = (
    "Replace what is at OUTPUT's names (OUT.mp4, .yaml, .partial.mp4, .lock, .resume/) even if avatargen did not write "
    "it; without it such a file, folder or link is refused (exit 2). avatargen's own earlier output is always replaced."
)
OVERRIDES_HELP = (
    "Hydra-style config overrides: group=option (model=tiny), key=value (pipeline.n_chunk_frames=32), "
    "+key=value adds a key. See `avatargen config` and docs/configuration.md."
)


def _print_version(value: bool) -> None:
    if value:
        from avatargen import __version__

        write_stdout(f"avatargen {__version__}\n", "the version")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Render talking-avatar videos of any length from a reference image and an audio track."""


def _fail(message: str) -> None:
    say(f"error: {message}")  # dropped if stderr cannot take it: the exit code still says it


_STARTING = " while starting; nothing was written"
_interrupt_said = False  # the line of a SIGINT/SIGTERM the command did not handle itself was printed


def _interrupted(signum: int, tail: str = _STARTING) -> int:
    """Say that ``signum`` interrupted the command (``tail``: what it left); its exit code (130, 143)."""
    global _interrupt_said
    _interrupt_said = True
    _fail(f"interrupted by {signal.Signals(signum).name}{tail}")
    return exit_code_of(signum)


def _run(action: Callable[[], None], debug: bool, interrupted: Callable[[], str] = lambda: "") -> None:
    """Run a command body, turning errors into one line and a documented exit code; ``interrupted()`` says what a
    SIGINT or SIGTERM the body did not handle itself leaves behind (the end of its line)."""
    try:
        action()
    except AvatarGenError as error:
        global _interrupt_said
        if isinstance(error, RenderInterrupted):
            _interrupt_said = True  # its line says the signal (a batch worker's stop between jobs among them)
            # The render stopped on a signal and its work is closed: the process is on its way out with 130/143. A
            # further Ctrl-C now would raise KeyboardInterrupt inside this handler and kill the process by SIGINT
            # instead (SIGKILL still ends it).
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
        if debug:
            traceback.print_exc()
        _fail(str(error))
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt as error:
        raise typer.Exit(_interrupted(signal_of(error), interrupted())) from None
    except typer.Exit:
        raise
    except Exception as error:  # a bug: say so in one line, the traceback is one flag away
        if debug:
            traceback.print_exc()
        _fail(f"unexpected {error.__class__.__name__}: {error} (rerun with --debug for the traceback)")
        raise typer.Exit(EXIT_FAILURE) from None


@app.command(epilog=EXIT_CODES)
def render(
    image_text: Optional[str] = typer.Option(None, "--image", "-i", help="Reference image (PNG, JPEG, WebP; any size and mode); a file or s3://BUCKET/KEY.", show_default=False),
    video_text: Optional[str] = typer.Option(None, "--video", help="Instead of --image: a source video to dub with the audio (its head and body motion followed, its audio replaced; models that follow a video: docs/models.md).", show_default=False),
    audio_text: List[str] = typer.Option(..., "--audio", "-a", help="Driving audio (wav, flac, mp3, ogg, m4a; any rate, mono or stereo), a file or s3://BUCKET/KEY; - reads WAV (or raw PCM, see --audio-rate) from stdin until it ends. Twice for two speakers (left first; docs/models.md)."),
    person_box: Optional[List[str]] = typer.Option(None, "--person-box", help="Two speakers: X0,Y0,X1,Y1 (pixels of the picture) of each speaker, in the order of the -a files; default: found in the picture.", show_default=False),
    audio_type: str = typer.Option("para", "--audio-type", help="Two speakers: para (they talk at once) or add (the first file, then the second)."),
    output_text: Optional[str] = typer.Option(None, "--output", "-o", help="Output MP4 (H.264 + AAC); its config is saved as OUT.yaml. s3://BUCKET/KEY.mp4 uploads it when finished (docs/batch.md). - writes MPEG-TS to stdout (| ffplay -).", show_default=False),
    publish: Optional[List[str]] = typer.Option(None, "--publish", help="Also publish live while rendering (repeatable): DIR/NAME.m3u8 (HLS), rtmp://HOST[:PORT]/APP/KEY, or webrtc://127.0.0.1:PORT (a viewer page and WHEP; with --realtime; docs/live.md). Same encode as the file.", show_default=False),
    realtime: bool = typer.Option(False, "--realtime/--no-realtime", help="Pace the output to the wall clock (live sessions); underruns are counted and reported.", show_default=True),
    audio_rate: Optional[int] = typer.Option(None, "--audio-rate", help="With --audio -: the stream is raw s16le PCM at this sample rate (not WAV).", show_default=False),
    audio_channels: Optional[int] = typer.Option(None, "--audio-channels", help="With --audio-rate: channels of the raw PCM \\[default: 1].", show_default=False),
    prompt: str = typer.Option("", "--prompt", "-p", help="Text prompt (scene, style) for the models that read one (docs/models.md); the bundled model shows no visible style (docs/model-card.md, Prompts).", show_default="none"),
    face: Optional[int] = typer.Option(None, "--face", help="Which face of the image to animate, counted left to right from 1 (pipeline.face) \\[default: the largest].", show_default=False),
    json_out: bool = typer.Option(False, "--json/--no-json", help="Print one JSON object with frames, timing, RTF and memory.", show_default=True),
    evaluate: bool = typer.Option(False, "--eval/--no-eval", help="Measure the finished video (lip sync, identity, seams, flicker) and add it to the report.", show_default=True),
    quiet: bool = typer.Option(False, "--quiet/--no-quiet", "-q", help="No progress bar.", show_default=True),
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors.", show_default=True),
    resume: bool = typer.Option(False, "--resume/--no-resume", help="Continue a stopped or killed render of OUTPUT from its last checkpoint (same inputs and config).", show_default=True),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Render IMAGE speaking AUDIO into OUTPUT, chunk by chunk, writing the MP4 while generating (or dub VIDEO).

    Ctrl-C (SIGINT) or SIGTERM finishes the current chunk, keeps OUTPUT's stem + .partial.mp4 and prints the command
    that resumes the render.
    """

    from avatargen.bulk.locations import ObjectUrl, where
    from avatargen.io import image_prefetch as prefetch

    def located(text: str | None) -> Path | ObjectUrl | None:
        return None if text is None else where(text)

    phase = {"kept": _STARTING}  # what a signal the render did not handle itself leaves behind

    def kept() -> str:
        return phase["kept"]

    def action() -> None:
        nonlocal image, video, output, audio, local_image
        image, video, output = located(image_text), located(video_text), located(output_text)
        audio = [where(text) for text in audio_text]
        local_image = image if isinstance(image, Path) and video is None else None
        # The picture's face search starts now, in a process of its own, while this one imports torch.
        with prefetch.beside(local_image):
            render_action()

    image = video = output = local_image = None
    audio: list = []

    def render_action() -> None:
        from avatargen.config.loader import load_config, to_config
        from avatargen.io.audio_stream import RawPcm
        from avatargen.io.ffmpeg import read_input_info_ahead
        from avatargen.render.request import RenderRequest, check_before_reading, parse_box

        cfg = load_config(overrides or [], live=realtime and str(audio[0]) == "-")  # docs/live.md
        if publish:
            cfg.output.publish = [*cfg.output.publish, *publish]
        if realtime:
            cfg.output.realtime = True
        if face is not None:
            cfg.pipeline.face = face
        if local_image is not None and cfg.pipeline.image_fit.value == "face":
            prefetch.frame(local_image, cfg.model.image_size, cfg.pipeline.face)  # the search's second step, under way
        if audio_channels is not None and audio_rate is None:
            raise BadInputError("--audio-channels describes raw PCM on stdin: give --audio-rate with it")
        raw = RawPcm(audio_rate, audio_channels if audio_channels is not None else 1) if audio_rate is not None else None
        boxes = tuple(parse_box(box) for box in person_box or [])
        request = RenderRequest(image=image, audio=audio[0], output=output, prompt=prompt, raw_audio=raw, video=video,
                                extra_audio=tuple(audio[1:]), person_boxes=boxes, audio_type=audio_type)  # fmt: skip
        if evaluate and (request.output_file is None or str(audio[0]) == "-" or len(audio) > 1
                         or any(isinstance(x, ObjectUrl) for x in (output, audio[0], image))):  # fmt: skip
            raise BadInputError("--eval measures a local MP4 file against one speaker's local audio file; give "
                                "--output OUT.mp4 and one --audio FILE")  # fmt: skip
        if evaluate:
            from avatargen.face.detector import INSTALL_HINT, face_networks_installed

            if not face_networks_installed():
                raise BadInputError(f"--eval needs the face networks: {INSTALL_HINT}")
        # With --output - stdout carries the video: every word for people goes to stderr.
        out = sys.stderr if str(output) == "-" else sys.stdout
        if str(output) == "-" and _STDOUT_CLOSED:
            raise PublishError("--output - writes MPEG-TS to stdout, but stdout is closed; pipe it into a program "
                               "(| ffplay -) or give --output OUT.mp4")  # fmt: skip
        if str(output) == "-" and sys.stdout.isatty():  # binary video would scroll over the terminal
            raise BadInputError("--output - writes MPEG-TS to stdout, but stdout is a terminal; pipe it into a program "
                                "(| ffplay -), redirect it (> talk.ts), or give --output OUT.mp4")  # fmt: skip
        if not any(isinstance(x, ObjectUrl) for x in (image, video, output, *audio)):
            # said now, before torch is imported (~2 s); the render checks again, with its model family's engine
            check_before_reading(request, to_config(cfg), None, resume, overwrite)
            for path in (*audio, video):  # their headers read by ffmpeg on another core while torch is imported
                if isinstance(path, Path) and str(path) != "-":
                    read_input_info_ahead(path)
        from avatargen.bulk.remote_render import render_anywhere
        from avatargen.progress import RenderProgress

        def progress(fps: int, total: int | None) -> RenderProgress:
            # Only on a terminal: in logs and bulk scripts a bar is noise, and an error must stay one line.
            return RenderProgress(fps, total, enabled=not quiet and sys.stderr.isatty())

        phase["kept"] = ""  # the render reports its own stops from here on
        report = render_anywhere(
            request, cfg, progress_factory=progress, record_seams=evaluate, resume=resume, resume_command=_resume_command(),
            overwrite=overwrite,
        )
        if request.output_file is not None:
            phase["kept"] = f" after the video was written to '{request.output_file}'"
        from avatargen.runtime.distributed import world_info

        if not world_info().is_primary:
            return  # under torchrun only rank 0 reports, like only rank 0 writes
        if evaluate:
            from avatargen.eval import evaluate_video, format_report

            metrics = evaluate_video(output, audio[0], reference=image, seams=report["seams"] or None,
                                     face=cfg.pipeline.face)  # the face the render animated
            report.update({k: v for k, v in metrics.items() if k not in report and k != "video"})
            if not json_out and not quiet:
                say(format_report(metrics))
        if json_out:
            if out is sys.stdout:
                where = f"to '{report['output']}'" if report["output"] not in (None, "-") else "to its live outputs"
                write_stdout(json.dumps(report) + "\n", f"the video is written {where}, but its report")
            else:
                say(json.dumps(report))
        elif not quiet:
            where = {None: "the live outputs", "-": "MPEG-TS to stdout"}.get(report["output"], report["output"])
            say(f"wrote {where}: {report['frames']} frames, {report['duration_s']:.2f} s, "
                f"{report['gen_fps']} fps generated, RTF {report['rtf']}")  # fmt: skip

    _run(action, debug, kept)


def _resume_command() -> str:
    """This very command line with ``--resume`` (what to run to continue it), quoted for a POSIX shell; under
    torchrun, torchrun's own command line (``torchrun --nproc-per-node 2 -m avatargen render ... --resume``)."""
    args = [a for a in sys.argv[1:] if a not in ("--resume", "--no-resume")]
    return shlex.join([*_launcher(), *args, "--resume"])


def _launcher() -> list[str]:
    """What ran this command before its arguments: ``avatargen``, or for a rank of torchrun (which sets
    TORCHELASTIC_RUN_ID) torchrun's command line up to ``-m avatargen``, read from the parent process, torchrun's
    agent: a resume must be launched as the stopped render was."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return ["avatargen"]
    fallback = ["torchrun", f"--nproc-per-node={os.environ.get('LOCAL_WORLD_SIZE', '1')}", "-m", "avatargen"]
    try:
        words = [os.fsdecode(w) for w in Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")[:-1]]
    except OSError:
        return fallback
    ours = sys.argv[1:]
    head = words[: len(words) - len(ours)]
    through_ours = "avatargen.torchrun" in head  # python -m avatargen.torchrun OPTIONS COMMAND ...
    if not ours or words[len(head) :] != ours or not (through_ours or head[-2:] == ["-m", "avatargen"]):
        return fallback
    if len(head) > 1 and Path(head[1]).name == "torchrun":  # python running the torchrun script: as typed
        head = ["torchrun", *head[2:]]
    return head


@app.command(epilog=EXIT_CODES)
def config(
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors.", show_default=True),
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Print the fully resolved config (defaults list + overrides) as YAML."""

    def action() -> None:
        from avatargen.config.loader import load_config, to_yaml

        write_stdout(to_yaml(load_config(overrides or [])), "the config")

    _run(action, debug)


@app.command("eval", epilog=EXIT_CODES)
def eval_command(
    video: Path = typer.Argument(..., help="Talking-head video to measure (ours or anybody's)."),
    audio: Path = typer.Option(..., "--audio", "-a", help="The driving audio of the video."),
    reference: Optional[Path] = typer.Option(None, "--reference", "-r", help="Reference image: identity and sharpness are measured against its face (default: the video's first face, drift only)."),
    seams: str = typer.Option("", "--seams", help="Comma-separated frame indices of known chunk seams, e.g. 14,30,46 (seams are also searched for without them).", show_default="none"),
    sheet: Optional[Path] = typer.Option(None, "--sheet", help="Also draw a contact sheet and a plot of sync, identity and seams over time to this PNG.", show_default=False),
    mouth_sheet: Optional[Path] = typer.Option(None, "--mouth-sheet", help="Also draw the mouths of the 10 loudest syllables, cropped and enlarged 2x, to this PNG.", show_default=False),
    json_out: bool = typer.Option(False, "--json/--no-json", help="Print one JSON object."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a file or link at a sheet's name even if avatargen did not write it; without it such a file is refused (exit 2). avatargen's own earlier sheet is always replaced."),
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors."),
) -> None:
    """Measure face presence, identity, lip sync, sharpness, seams, flicker, head motion and blinks of a video.

    Needs the face networks: pip install 'avatargen\\[eval]' (docs/eval.md).
    """

    def action() -> None:
        from avatargen.errors import BadInputError
        from avatargen.eval import evaluate_video, format_report

        try:
            seam_list = [int(s) for s in seams.split(",") if s.strip()] or None
        except ValueError:
            raise BadInputError(f"--seams '{seams}' must be comma-separated frame numbers, e.g. 14,30,46") from None
        from avatargen.io.targets import make_folders

        sheets = {"--sheet": sheet, "--mouth-sheet": mouth_sheet}
        _check_sheets({flag: path for flag, path in sheets.items() if path is not None},
                      [video, audio, *([reference] if reference is not None else [])], overwrite)  # fmt: skip
        wants_curves = sheet is not None or mouth_sheet is not None
        result = evaluate_video(video, audio, reference=reference, seams=seam_list, curves=wants_curves)
        if sheet is not None:
            from avatargen.eval.sheet import write_sheet

            make_folders(sheet.parent)
            write_sheet(sheet, video, result, reference)
            result["sheet"] = str(sheet)
        if mouth_sheet is not None:
            from avatargen.eval.sheet import write_mouth_sheet

            make_folders(mouth_sheet.parent)
            write_mouth_sheet(mouth_sheet, video, result)
            result["mouth_sheet"] = str(mouth_sheet)
        result.pop("curves", None)
        write_stdout((json.dumps(result) if json_out else format_report(result)) + "\n", "the measurements")

    _run(action, debug)


def _check_sheets(sheets: dict[str, Path], inputs: list[Path], overwrite: bool) -> None:
    """Before anything is measured: each sheet is a PNG in a folder that takes it, none is an input (by file
    identity: links count), the two are not one file, and what is at their names is avatargen's (or ``overwrite``:
    docs/owned-names.md)."""
    from avatargen.io.owned_names import check_owned_names
    from avatargen.io.targets import refuse_writing_inputs, write_problem

    for flag, path in sheets.items():
        if path.suffix.lower() != ".png":
            raise BadInputError(f"{flag} '{path}' must end in .png (the sheet is a PNG image)")
        problem = write_problem(path)
        if problem is not None:
            raise BadInputError(f"cannot write {flag} '{path}' ({problem}); choose a writable folder")
    refuse_writing_inputs(sheets.values(), inputs, fix="give the sheet another name")
    if len(sheets) == 2 and len({os.path.realpath(p) for p in sheets.values()}) == 1:
        raise BadInputError("--sheet and --mouth-sheet name the same file; give each its own name")
    check_owned_names([(path, "png") for path in sheets.values()], overwrite, writer="eval")


@app.command(epilog=EXIT_CODES)
def train(
    out: Path = typer.Option(..., "--out", help="Folder for the trained checkpoint (five .safetensors + model.yaml); a new or empty one."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Train into a folder that is not empty, replacing what is at the checkpoint's names; without it such a folder is refused (exit 2)."),
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors."),
    family: Optional[str] = typer.Option(None, "--family", help="The model family whose recipe runs \\[default: the default model's, the bundled one].", show_default=False),
    overrides: Optional[List[str]] = typer.Argument(None, help="Recipe overrides key=value (see avatargen/families/tiny/train/config.py).", show_default=False),
) -> None:
    """Train a family's models on generated talking-avatar data (the bundled family: deterministic for a seed; CPU or GPU)."""

    def action() -> None:
        from avatargen.config.families import family_named, load_object
        from avatargen.config.loader import load_config

        name = family or str(load_config([]).model.family)  # the default model's family: the bundled one
        chosen = family_named(name)  # an unknown family, and a bad recipe key, are said before torch is imported
        if chosen.recipe is None:
            raise ConfigError(f"the '{name}' family has no training recipe here; train the default model's family: "
                              "leave --family out")  # fmt: skip
        recipe = load_object(chosen.recipe)(overrides or [])
        _check_train_folder(out, overwrite)
        from avatargen.pipeline.family import load_engine

        print(json.dumps(load_engine(chosen).train(recipe, out)))

    _run(action, debug)


def _check_train_folder(out: Path, overwrite: bool) -> None:
    """Before any training: ``out`` is a folder that can be made, and empty unless ``overwrite`` (a run replaces its
    checkpoint files and starts its log afresh at once: a user's files there, or an earlier checkpoint, would go)."""
    from avatargen.io.targets import nearest_existing

    if out.exists() and not out.is_dir():
        raise BadInputError(f"--out '{out}' is a file; give a folder for the checkpoint")
    if not out.exists() and not nearest_existing(out).is_dir():
        raise BadInputError(f"--out '{out}' cannot be made: '{nearest_existing(out)}' is a file; give a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise BadInputError(f"--out '{out}' is not empty; a run writes its checkpoint there (model.yaml, five "
                            ".safetensors, train_log.jsonl, summary.json, recipe.yaml) and replaces what is at those "
                            "names: give a new or empty folder, or pass --overwrite")  # fmt: skip


@app.command(epilog=EXIT_CODES)
def synth(
    out: Path = typer.Option(..., "--out", help="Folder for the generated examples."),
    count: int = typer.Option(4, "--count", help="Number of examples."),
    seconds: float = typer.Option(6.0, "--seconds", help="Length of each example."),
    seed: int = typer.Option(1_000_000, "--seed", help="First identity seed (>= 1,000,000: identities never trained on)."),
    size: int = typer.Option(256, "--size", help="Frame size in pixels."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace files or links at the examples' names even if avatargen did not write them; without it such a file is refused (exit 2). avatargen's own earlier examples are always replaced."),
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors."),
) -> None:
    """Generate synthetic talking-avatar examples: reference PNG, speech WAV, ground-truth MP4 and JSON."""

    def action() -> None:
        from avatargen.data.cli import synth_main

        synth_main(out, count, seconds, seed, size, overwrite=overwrite)

    _run(action, debug)


class _BatchStatusForm(TyperCommand):
    """``avatargen batch status``'s help: a form of ``batch`` (JOBS the word status), not a command of its own."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return ["DIR", "[--json]", "[storage.KEY=VALUE ...]"]


_batch_status = typer.Typer(add_completion=False)


@_batch_status.command(cls=_BatchStatusForm, epilog="Exit codes: 0 shown; 2 DIR does not exist (a bucket prefix with "
                       "no object under it) or a setting is wrong; 1 object storage failed (try again).")  # fmt: skip
def _batch_status_help(
    out_dir: str = typer.Argument(..., metavar="DIR", show_default=False,
                                  help="The --out-dir of a batch: a folder or s3://BUCKET/PREFIX."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: the counts and every job."),
    storage: Optional[List[str]] = typer.Argument(None, metavar="storage.KEY=VALUE", show_default=False, help=(
        "How to reach a bucket (storage.endpoint_url=..., storage.region=...; docs/batch.md, \"Object storage\").")),
) -> None:
    """Show every job of the batch in DIR as done, running (host, pid), failed (why) or pending, and which resume
    from a checkpoint, read from DIR/batch_jobs.json and the files beside each output; nothing is changed. Any
    worker's out-dir, at any moment (docs/batch.md)."""


class _BatchCommand(TyperCommand):
    """``avatargen batch``: ``batch status ... --help`` shows the status form's help, not the jobs form's."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        head = args[: args.index("--")] if "--" in args else args
        valued = {name for param in self.params if not getattr(param, "is_flag", True) for name in param.opts}
        words = [word for i, word in enumerate(head)
                 if not word.startswith("-") and (i == 0 or head[i - 1] not in valued)]  # fmt: skip
        if words[:1] == ["status"] and not Path("status").is_file() and set(head) & set(ctx.help_option_names):
            form = typer.main.get_command(_batch_status)
            shown = type(ctx)(form, info_name=f"{ctx.info_name} status", parent=ctx.parent)  # avatargen batch status
            typer.echo(shown.get_help(), color=ctx.color)  # as --help does: Rich prints it and returns ''
            ctx.exit()
        return super().parse_args(ctx, args)


@app.command(epilog=EXIT_CODES, cls=_BatchCommand)
def batch(
    jobs: str = typer.Argument(..., help="Jobs file: JSONL (one object a line) or CSV, a file or s3://BUCKET/KEY; keys image, audio, output (under --out-dir), optional prompt and overrides. Input paths are relative to the jobs file's folder. Or the word status: show the state of the out-dir given after it."),
    out_dir: Optional[str] = typer.Option(None, "--out-dir", help="Folder (or s3://BUCKET/PREFIX) for the outputs and batch_report.json (shared by every worker).", show_default=False),
    ray: bool = typer.Option(False, "--ray/--no-ray", help="Run the jobs on a Ray cluster (batch.engine=ray): long-lived worker actors keep the model loaded; a lost node's job resumes on another (pip install 'avatargen\\[ray]'; docs/batch.md).", show_default=True),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="With --ray: the cluster to join (HOST:PORT, ray://HOST:10001, auto; batch.ray.address) \\[default: RAY_ADDRESS, else a local Ray on this machine].", show_default=False),
    retry_failed: bool = typer.Option(False, "--retry-failed/--no-retry-failed", help="Try again the jobs that failed for good (OUT.failed.json) before this worker started.", show_default=True),
    allow_outside_out_dir: bool = typer.Option(False, "--allow-outside-out-dir/--no-allow-outside-out-dir", help="Let jobs write outside --out-dir (absolute or ../ outputs, output.publish elsewhere); refused by default.", show_default=True),
    json_out: bool = typer.Option(False, "--json/--no-json", help="With status: print one JSON object.", show_default=True),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP.replace("OUTPUT's", "each job's output's") + " Also the batch's own side files (batch_report.json, batch_jobs.json, OUT.failed.json). A job whose OUT.mp4 avatargen finished is still skipped: delete it to render it again."),
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors.", show_default=True),
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP + " Applied to every job, before its own overrides.", show_default=False),
) -> None:
    """Work through the jobs of JOBS into --out-dir as one worker among any number (several processes, machines, a
    Slurm array, torchrun ranks), or as the driver of Ray workers (--ray); `avatargen batch status DIR [--json]`
    shows done / running / failed / pending (`avatargen batch status --help`).

    Each worker takes the next job that is neither finished (OUT.mp4), nor claimed by a live worker (OUT.lock), nor
    failed for good (OUT.failed.json), renders it, and waits for the jobs others hold until every job is finished or
    failed; a job whose worker died is resumed from its last checkpoint. JOBS, the inputs and --out-dir may be in
    S3-compatible storage (s3://...). Under torchrun, runtime.batch_mode=spread makes every rank such a worker;
    shard renders each job with all ranks. Exit code: 0 if every job is finished, 2 if the failures were all bad
    input or config, 1 otherwise (130/143 when stopped: rerun the same command to continue); details per job in
    DIR/batch_report.json (docs/batch.md).
    """
    code = EXIT_FAILURE

    def action() -> None:
        nonlocal code
        from avatargen.bulk.locations import is_url, where

        if jobs == "status" and not Path(jobs).is_file():
            from avatargen.bulk.status import print_status
            from avatargen.bulk.batch_files import open_out_dir
            from avatargen.config.loader import load_config, to_config

            folder = out_dir if out_dir is not None else (overrides[0] if overrides else None)
            rest = (overrides or [])[0 if out_dir is not None else 1:]
            if folder is None or any("=" not in word for word in rest):
                raise BadInputError("give one out-dir: avatargen batch status DIR [--json] [storage.KEY=VALUE ...]")
            config = to_config(load_config(rest))
            location = where(folder)
            if not is_url(folder) and not Path(folder).is_dir():
                raise BadInputError(f"out-dir '{folder}' does not exist; give the --out-dir of a batch")
            print_status(open_out_dir(location, config).states(), folder, json_out)
            code = 0
            return
        if out_dir is None:
            raise BadInputError("give --out-dir DIR: the folder for the outputs (shared by every worker)")
        from avatargen.bulk.batch import run_batch

        extra = (["batch.engine=ray"] if ray or ray_address else []) + ([f"batch.ray.address={ray_address}"] if ray_address else [])
        # A job stopped mid-render is resumed by the next worker that claims it: running this command again does it.
        again = shlex.join(["avatargen", *sys.argv[1:]])
        code = run_batch(where(jobs), where(out_dir), [*(overrides or []), *extra], warn=say,
                         allow_outside=allow_outside_out_dir, retry_failed=retry_failed, resume_command=again,
                         overwrite=overwrite)  # fmt: skip

    _run(action, debug)
    raise typer.Exit(code)


@app.command(epilog=EXIT_CODES)
def doctor(
    output_dir: Path = typer.Option(Path("."), "--output-dir", help="Where videos will be written: its free disk and write permission are checked."),
    as_json: bool = typer.Option(False, "--json/--no-json", help="Print one JSON object with everything found."),
    debug: bool = typer.Option(False, "--debug/--no-debug", help="Show tracebacks on errors."),
) -> None:
    """What avatargen sees here: versions (torch and its CUDA, ffmpeg), CPU and GPUs, bf16/fp16 speed measured,
    ffmpeg's libx264 and aac encoders, the optional extras (with the pip command for those missing), NUMA nodes,
    cache folders, free disk at --output-dir. Exit 0 when a default render will work here, 2 (one line per reason)
    when it will not."""
    result: dict = {}

    def action() -> None:
        from avatargen.doctor import diagnose, format_report

        report = diagnose(output_dir)
        write_stdout((json.dumps(report.to_json(), indent=2) if as_json else format_report(report)) + "\n", "the report")
        for problem in report.problems:
            _fail(problem)
        result["ok"] = report.ok

    _run(action, debug)
    if not result.get("ok", False):
        raise typer.Exit(EXIT_BAD_INPUT)


_STDOUT_CLOSED = False  # set by main(): the process started with file descriptor 1 closed (`>&-`)


def _cover_closed_standard_fds() -> None:
    """Open /dev/null on standard descriptors the process started without, so that no file avatargen opens later
    lands on descriptor 1 and receives what is meant for stdout; remember whether stdout was one of them."""
    global _STDOUT_CLOSED
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _STDOUT_CLOSED = _STDOUT_CLOSED or fd == 1
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # the lowest free descriptor is this one unless a lower one was closed too
                os.dup2(null, fd)
                os.close(null)




weights_app = typer.Typer(name="weights", help="Check downloaded model weights before rendering.", no_args_is_help=True)


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"


@weights_app.command("check")
def check(
    folder: Path = typer.Argument(..., help="The weights folder: weights/ as InfiniteTalk's README lays it out (docs/models.md), or LiveAvatar's ckpt/ (docs/liveavatar.md)."),
    overrides: Optional[List[str]] = typer.Argument(None, help="Config overrides naming the model and its files, e.g. model=multitalk"),
    as_json: bool = typer.Option(False, "--json", help="Print the whole report as JSON."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Every missing file, missing / unexpected / mis-shaped tensor, the stored dtypes, and the parameter count and
    bytes of each module, from the file headers alone (no tensor data is read). Exit 2 on any problem, one line each."""
    result: dict = {}

    def action() -> None:
        from avatargen.config.loader import load_config, to_config

        config = to_config(load_config([*(overrides or []), f"model.checkpoint={folder}", "model.weights=checkpoint"]))
        if not folder.is_dir():  # said before the engine (and torch) is imported: a typo costs half a second
            layout = "the ckpt/ folder (docs/liveavatar.md)" if config.model.family == "liveavatar" else \
                "the weights/ folder (docs/models.md)"  # fmt: skip
            raise ConfigError(f"'{folder}' is not a folder; give {layout}")
        from avatargen.pipeline.family import engine_for

        family = engine_for(config)
        if family.check_weights is None:
            raise ConfigError(f"weights check reads downloaded weights folders; model={config.model.name} loads its "
                              "own checkpoint, checked as it loads: choose the model you downloaded (e.g. "
                              "model=infinitetalk)")  # fmt: skip
        report = family.check_weights(config, folder)
        result["ok"] = report.ok
        if as_json:
            print(json.dumps(report.to_json(), indent=2))
        else:
            for module in report.modules:
                dtypes = ", ".join(f"{dtype} x {count}" for dtype, count in sorted(module.dtypes.items())) or "no tensors"
                print(f"{module.module}: {module.parameters:,} parameters, {_gib(module.stored_bytes)} stored ({dtypes})")
        for line in report.problems():
            say(f"problem: {line}")
        if not report.ok:
            say(f"error: {len(report.problems())} problem(s) in '{folder}' for model={config.model.name}")

    _run(action, debug)
    if not result.get("ok", False):
        raise typer.Exit(EXIT_BAD_INPUT)


app.add_typer(weights_app)


def main() -> None:
    _cover_closed_standard_fds()
    # stdout that cannot take the output, or was closed: exit 2, one line; stderr: dropped (io.console)
    guard_standard_streams(stdout_closed=_STDOUT_CLOSED)
    code = _main()
    record_signals()  # the command is over: a signal now (torchrun ending the other ranks) only waits for the exit
    _exit_without_teardown(code)
    sys.exit(code)


def _main() -> int:
    """Run the command line; its exit code. A mistake on the command line (an unknown option, a value of the wrong
    type, a missing one) is one ``error:`` line and exit 2, like every other bad input."""
    try:
        catch_signals()  # SIGINT/SIGTERM before a render's own handlers: one line, 130/143 (avatargen/interrupts.py)
        result = app(standalone_mode=False)
    except Interrupted as error:  # before Click ran
        return _interrupted(error.signum)
    except click_errors.NoArgsIsHelpError:  # the command alone: its help, printed as it was made
        return EXIT_BAD_INPUT
    except click_errors.UsageError as error:
        command = error.ctx.command_path if error.ctx is not None else "avatargen"
        _fail(f"{error.format_message().rstrip('.')}; see '{command} --help'")
        return EXIT_BAD_INPUT
    except click_errors.ClickException as error:
        _fail(error.format_message())
        return error.exit_code
    except AvatarGenError as error:  # raised outside a command's body (--version to a stdout that cannot take it)
        _fail(str(error))
        return error.exit_code
    except typer.Abort:
        return _interrupted(received() or signal.SIGINT)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else EXIT_FAILURE)
    if received() is not None and not _interrupt_said:  # Typer makes one while it parsed a silent exit 130
        return _interrupted(received())
    return result if isinstance(result, int) else 0


def _exit_without_teardown(code: object) -> None:
    """End the process with exit ``code`` as any exit does (atexit handlers run, standard streams flushed) but
    without the interpreter's teardown of every module and object: 0.1-0.25 s once torch is imported, the slowest
    part of ending a short render. Returns instead, for the ordinary exit, where that teardown may still have work:
    a thread that is not a daemon still running, a code that is not a number, a standard stream that cannot be
    flushed (a closed pipe: Python's own exit reports it)."""
    code = 0 if code is None else code
    if not isinstance(code, int) or any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
                                        if thread is not threading.main_thread()):  # fmt: skip
        return
    if not _flushed():
        return
    atexit._run_exitfuncs()  # they run once: the list is empty afterwards, for an ordinary exit too
    if _flushed():  # again: a handler may have written
        os._exit(code)


def _flushed() -> bool:
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: the process started with that descriptor closed
                stream.flush()
    except (OSError, ValueError):
        return False
    return True
