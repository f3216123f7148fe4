"""Where time to first frame goes: the phases of a fresh ``avatargen render``, from the start of the render
(``RenderSession.run``) to the first frame the MP4 encoder receives, median of N runs per image and source tree.

Each run is a fresh ``python -m avatargen render ... --json`` process, as a user starts it, in which the functions of
each phase are wrapped with ``time.perf_counter`` timers as the CLI imports their modules (the code path itself is
unchanged, torch is imported inside the CLI as for a user, and a phase a tree does not have shows ``-``); the table ends
with the time from the process's start to the render's and to its first frame (what a user waits for; each tree's
modules are compiled to bytecode first, as an installed package has them). The runs of the trees and images are
interleaved so that the machine's noise hits them alike. ``--digest`` also decodes each MP4 and
prints the SHA-256 of its frames (rgb24), so two trees can be shown to render the same video bit for bit.
``--first-frame-only`` stops each render at its first frame (SIGINT, as Ctrl-C: the render ends after its current step),
for TTFF where whole renders are slow. ``--new-pictures`` gives every run a cache folder without the pictures framed
before (a picture's first render); without it, each tree gets a copy of this machine's cache folder and one untimed
render of each picture first, so every timed run reads what the picture's first render kept
(avatargen/face/picture_cache.py, avatargen/stages/reference_cache.py). Work done in a worker thread beside the main one
is listed apart, outside the main thread's sum.

    python benchmarks/speed/ttff.py [--image PATH ...] [--audio PATH] [--runs 3] [--tree PATH ...] [--digest]
                              [--first-frame-only] [--new-pictures] [KEY=VALUE ...]

Defaults: examples/avatar_1.png and skimage's astronaut (a 512x512 photograph), examples/speech_1.flac (8 s), this
checkout; KEY=VALUE are config overrides (e.g. runtime.threads=1).
"""

from __future__ import annotations

import argparse
import builtins
import functools
import gc
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.speed.first_byte import compile_tree  # noqa: E402  (one way to compile a tree)

# (label, [(module, attribute path), ...]): each target is wrapped with a timer; a label's calls are summed. The
# labels are indented by how they nest; the top-level ones cover the render from its start to the first frame.
PHASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("config + request checks", [("avatargen.render.session", "to_config"), ("avatargen.render.session", "check_request"),
                                 ("avatargen.render.session", "check_outputs_spare_inputs")]),
    ("load reference", [("avatargen.render.inputs", "load_reference"), ("avatargen.render.inputs", "read_picture"),
                        ("avatargen.render.inputs", "reference_from_rgb")]),
    ("  face detector built", [("avatargen.face.detector", "FaceDetector.__init__")]),
    ("  face networks loaded", [("avatargen.face.detector", "FaceDetector._networks")]),
    ("  face mesh built (LipFinder)", [("avatargen.face.lips", "LipFinder.__init__")]),
    ("  face search (FaceDetector.find)", [("avatargen.face.detector", "FaceDetector.find")]),
    ("compositor", [("avatargen.render.session", "compositor_for")]),
    ("  photo check (square_is_photo)", [("avatargen.render.session", "square_is_photo"),
                                         ("avatargen.render.compositing", "square_is_photo")]),
    ("  mouth warp set-up", [("avatargen.compose.mouth_warp", "MouthWarp.__init__")]),
    ("  idle motion set-up", [("avatargen.compose.idle_motion", "IdleMotion.__init__")]),
    ("photo warning (warn_if_out_of_domain)", [("avatargen.render.session", "warn_if_out_of_domain")]),
    ("audio source opened", [("avatargen.render.inputs", "AudioFileSource.__init__")]),
    ("device, parallel context, lock", [("avatargen.pipeline.build", "resolve_device"),
                                        ("avatargen.render.session", "start_parallel"),
                                        ("avatargen.render.session", "OutputLock.acquire")]),
    ("build pipeline", [("avatargen.pipeline.build", "build_pipeline"), ("avatargen.pipeline.blank", "blank_pipeline")]),
    ("  precision (runtime.dtype=auto probe)", [("avatargen.pipeline.build", "choose_precision")]),
    ("  models built and loaded", [("avatargen.pipeline.build", "place_models")]),
    ("resume fingerprint + store", [("avatargen.render.session", "fingerprint"),
                                    ("avatargen.render.session", "ResumeStore.reset"),
                                    ("avatargen.render.session", "ResumeStore.begin_run")]),
    ("ffmpeg started (Encoder)", [("avatargen.render.session", "Encoder.__init__")]),
    ("pipeline.render until the first frame", [("avatargen.pipeline.pipeline", "Pipeline.render")]),
    ("  reference + prompt encode", [("avatargen.families.tiny.stages.context", "ContextGenStage.encode_reference")]),
    ("  audio features", [("avatargen.families.tiny.stages.context", "ContextGenStage.audio_features")]),
    ("  A2V (first N chunk)", [("avatargen.families.tiny.stages.a2v", "A2VStage.generate")]),
    ("  SR", [("avatargen.families.tiny.stages.sr", "SRStage.upscale")]),
    ("  VAE decode (first micro-batch)", [("avatargen.families.tiny.models.vae", "VAE.decode"), ("avatargen.families.tiny.models.vae", "VAE.still_cache")]),
    ("  composite (paste)", [("avatargen.compose.composite", "ReferenceCompositor.paste")]),
    ("  idle motion (move)", [("avatargen.compose.composite", "ReferenceCompositor.move")]),
]


# -- the child: one render with timers ---------------------------------------------------------------------------


def _child(record: Path, argv: list[str]) -> None:
    events: list[tuple[str, float, float]] = []  # (label, start, end), perf_counter seconds
    marks: dict[str, float] = {}
    imports: list[tuple[str, float, float]] = []
    collections: list[tuple[int, float, float]] = []

    def timed(label: str, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                beside = threading.current_thread() is not threading.main_thread()
                name = f"{label.strip()} [worker thread, beside the main one]" if beside else label
                events.append((name, start, time.perf_counter()))  # the parent keeps what precedes the first frame

        return wrapper

    # A target's module is patched once imported: importing it here would move its import out of the render.
    pending = [(label, module_name, path) for label, targets in PHASES for module_name, path in targets]

    def patch_loaded() -> None:
        for target in list(pending):
            label, module_name, path = target
            if module_name not in sys.modules:
                continue
            owner = sys.modules[module_name]
            *parents, name = path.split(".")
            try:
                for part in parents:
                    owner = getattr(owner, part)
                setattr(owner, name, timed(label, getattr(owner, name)))
            except AttributeError:
                continue  # not (yet) there: a tree without it, or a module still executing
            pending.remove(target)

    # Modules first imported inside the render, before its first frame (outermost imports only: their own time).
    original_import, depth = builtins.__import__, [0]

    def timed_import(name, globals=None, locals=None, fromlist=(), level=0):
        known = len(sys.modules)
        depth[0] += 1
        start = time.perf_counter()
        try:
            return original_import(name, globals, locals, fromlist, level)
        finally:
            depth[0] -= 1
            if depth[0] == 0 and len(sys.modules) != known:
                if "render_start" in marks and "first_frame" not in marks:
                    imports.append((name, start, time.perf_counter()))
                patch_loaded()

    stop_at_first_frame = os.environ.get("TTFF_STOP_AT_FIRST_FRAME") == "1"

    def mark_start(original):
        def render_with_start(*args, **kwargs):
            marks["render_start"] = time.perf_counter()
            return original(*args, **kwargs)

        return render_with_start

    def mark_first_frame(original):
        def write_with_mark(self, frames):
            if "first_frame" not in marks:
                marks["first_frame"] = time.perf_counter()
                if stop_at_first_frame:  # as Ctrl-C: the render ends after its current step, exit code 130
                    signal.raise_signal(signal.SIGINT)
            return original(self, frames)

        return write_with_mark

    # The render's start and its first frame are marked once the CLI has imported their modules, as a user's process
    # imports them (the CLI's own start: torch and the models' code are imported inside it, as they are for a user).
    unmarked = {("avatargen.render.session", "RenderSession", "run"): mark_start,
                ("avatargen.io.encoder", "Encoder", "write"): mark_first_frame}  # fmt: skip

    def mark_loaded() -> None:
        for (module_name, class_name, method), wrap in list(unmarked.items()):
            owner = getattr(sys.modules.get(module_name), class_name, None)
            if owner is not None:
                setattr(owner, method, wrap(getattr(owner, method)))
                del unmarked[module_name, class_name, method]

    def timed_import_and_marks(*args, **kwargs):
        try:
            return timed_import(*args, **kwargs)
        finally:
            if depth[0] == 0:
                mark_loaded()

    builtins.__import__ = timed_import_and_marks

    def gc_timer(phase: str, info: dict) -> None:  # collections of the garbage collector, by generation
        if phase == "start":
            marks["gc_start"] = time.perf_counter()
        else:
            collections.append((info["generation"], marks.pop("gc_start"), time.perf_counter()))

    gc.callbacks.append(gc_timer)
    import avatargen.cli
    from avatargen.cli import main

    if hasattr(avatargen.cli, "_exit_without_teardown"):  # the record below is written after the CLI's end
        avatargen.cli._exit_without_teardown = lambda code: None
    sys.argv = ["avatargen", *argv]
    code = 0
    try:
        main()
    except SystemExit as exit:
        code = exit.code or 0
    builtins.__import__ = original_import
    missing = [f"{module_name}.{path}" for _, module_name, path in pending]
    record.write_text(json.dumps({"events": events, "marks": marks, "imports": imports, "missing": missing, "code": code,
                                  "collections": collections}))
    raise SystemExit(code)


# -- the parent: runs, medians, table ------------------------------------------------------------------------------


def _astronaut(folder: Path) -> Path:
    import imageio.v3 as iio
    import skimage.data

    path = folder / "astronaut.png"
    iio.imwrite(path, skimage.data.astronaut())
    return path


def frames_digest(video: Path) -> str:
    """SHA-256 of every decoded frame of ``video`` as rgb24."""
    from avatargen.io.ffmpeg import ffmpeg_exe

    decode = subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(video), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                            check=True, capture_output=True)  # fmt: skip
    return hashlib.sha256(decode.stdout).hexdigest()


def one_run(tree: Path, image: Path, audio: Path, out: Path, overrides: list[str], first_frame_only: bool,
            cache_home: Path | None = None) -> dict:  # fmt: skip
    """One fresh render process with timers -> its phases (seconds), TTFF and report (``first_frame_only``: the
    render is stopped at its first frame, as by Ctrl-C, and has no report; ``cache_home``: its XDG_CACHE_HOME)."""
    record = out.with_suffix(".timing.json")
    argv = ["render", "-i", str(image), "-a", str(audio), "-o", str(out), "--json", "--quiet", *overrides]
    env = {**os.environ, "PYTHONPATH": str(tree), "TTFF_STOP_AT_FIRST_FRAME": "1" if first_frame_only else "0"}
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = str(cache_home)
    launched = time.perf_counter()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(record), "--", *argv],
                          cwd=tree, env=env, capture_output=True, text=True)  # fmt: skip
    if done.returncode != (130 if first_frame_only else 0):
        raise SystemExit(f"render failed ({tree}, {image}): {done.stderr.strip()[-2000:]}")
    report = {} if first_frame_only else json.loads(done.stdout.strip().splitlines()[-1])
    timing = json.loads(record.read_text())
    start, first = timing["marks"]["render_start"], timing["marks"]["first_frame"]
    phases = {label: 0.0 for label, _ in PHASES}
    for label, t0, t1 in timing["events"]:
        if t0 < first:
            phases[label] = phases.get(label, 0.0) + min(t1, first) - t0
    for label, targets in PHASES:
        if all(f"{m}.{p}" in timing["missing"] for m, p in targets):
            phases[label] = None
    top = sum(phases[label] or 0.0 for label, _ in PHASES if not label.startswith(" "))
    phases["other (between phases)"] = (first - start) - top
    for generation in range(3):
        phases[f"  (garbage collection, generation {generation})"] = sum(
            min(t1, first) - t0 for g, t0, t1 in timing["collections"] if g == generation and start <= t0 < first)
    imports = {}
    for name, t0, t1 in timing["imports"]:
        imports[name] = imports.get(name, 0.0) + (t1 - t0)
    return {"phases": phases, "ttff": first - start, "ttff_reported": report.get("ttff_s"), "startup": start - launched,
            "command_to_first_frame": first - launched,
            "imports": imports, "wall": report.get("wall_s"), "dtype": report.get("dtype_choice")}  # fmt: skip


def _cache_without_pictures(home: Path) -> Path:
    """An XDG_CACHE_HOME holding this machine's saved face detector (``avatargen.face.hog_cache``) and nothing else."""
    from avatargen.face.hog_cache import cache_folder

    kept = home / "avatargen"
    kept.mkdir(parents=True)
    for saved in cache_folder().glob("*.svm"):
        shutil.copy2(saved, kept / saved.name)
    return home


def _remove_outputs(out: Path) -> None:
    """What a run left of ``out``: the video, or the partial video and its resume folder."""
    for leftover in out.parent.glob(f"{out.stem}*"):
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()


def _copy_of_cache(home: Path) -> Path:
    """An XDG_CACHE_HOME holding a copy of this machine's cache folder."""
    from avatargen.face.hog_cache import cache_folder

    if cache_folder().is_dir():
        shutil.copytree(cache_folder(), home / "avatargen")
    return home


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(Path(sys.argv[2]), sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, action="append", help="reference image (repeatable)")
    parser.add_argument("--audio", type=Path, default=REPO / "examples" / "speech_1.flac")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append", help="source tree to time (repeatable)")
    parser.add_argument("--digest", action="store_true", help="print the SHA-256 of each video's decoded frames")
    parser.add_argument("--first-frame-only", action="store_true",
                        help="stop each render at its first frame (as Ctrl-C does): TTFF only, no report, no digest")
    parser.add_argument("--new-pictures", action="store_true",
                        help="each render sees its picture for the first time: a cache folder with dlib's detector "
                             "but no picture framed before (avatargen/face/picture_cache.py)")  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. runtime.threads=1")
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [REPO])]
    for tree in trees:
        compile_tree(tree)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        images = [i.resolve() for i in args.image] if args.image else [REPO / "examples" / "avatar_1.png", _astronaut(folder)]
        results: dict[tuple[int, int], list[dict]] = {(t, i): [] for t in range(len(trees)) for i in range(len(images))}
        digests: dict[tuple[int, int], set[str]] = {key: set() for key in results}
        # Each tree keeps what it derives in its own cache folder (another tree's code makes other entries, and
        # trees run in turn would replace each other's), seeded with this machine's and warmed by one untimed run.
        if not args.new_pictures:
            homes = [_copy_of_cache(folder / f"tree{t}_home") for t in range(len(trees))]
            for i, image in enumerate(images):
                for t, tree in enumerate(trees):
                    out = folder / f"tree{t}_image{i}_warm-up.mp4"
                    one_run(tree, image, args.audio.resolve(), out, args.overrides, True, homes[t])
                    _remove_outputs(out)
        for run in range(args.runs):
            for i, image in enumerate(images):
                for t, tree in enumerate(trees):
                    out = folder / f"tree{t}_image{i}_run{run}.mp4"
                    cache_home = _cache_without_pictures(folder / f"{out.stem}_cache") if args.new_pictures else homes[t]
                    results[t, i].append(one_run(tree, image, args.audio.resolve(), out, args.overrides,
                                                 args.first_frame_only, cache_home))  # fmt: skip
                    if args.digest and not args.first_frame_only:
                        digests[t, i].add(frames_digest(out))
                    _remove_outputs(out)
    for i, image in enumerate(images):
        print(f"\n## {image.name}  (audio {args.audio.name}; {' '.join(args.overrides) or 'default config'}; "
              f"median of {args.runs} runs; seconds)")  # fmt: skip
        header = "| phase | " + " | ".join(f"tree {t}" for t in range(len(trees))) + " |"
        print(header + "\n" + "|---" * (len(trees) + 1) + "|")
        labels = [label for label, _ in PHASES]
        labels += sorted({k for t in range(len(trees)) for r in results[t, i] for k in r["phases"]} - set(labels)
                         - {"other (between phases)"} - {f"  (garbage collection, generation {g})" for g in range(3)})
        labels += ["other (between phases)"]
        labels += [f"  (garbage collection, generation {g})" for g in range(3)]
        for label in labels:
            cells = [median([r["phases"].get(label) for r in results[t, i]]) for t in range(len(trees))]
            print(f"| {label} | " + " | ".join(_seconds(c) for c in cells) + " |")
        for key, name in (("ttff", "**TTFF** (render start -> first frame)"), ("ttff_reported", "ttff_s reported"),
                          ("startup", "process start -> render start (not TTFF)"),
                          ("command_to_first_frame", "process start -> first frame (start-up + TTFF)"),
                          ("wall", "render wall_s")):  # fmt: skip
            cells = []
            for t in range(len(trees)):
                values = [r[key] for r in results[t, i]]
                runs = f" ({' '.join(_seconds(v) for v in values)})" if key == "ttff" else ""
                cells.append(_seconds(median(values)) + runs)
            print(f"| {name} | " + " | ".join(cells) + " |")
        for t, tree in enumerate(trees):
            print(f"\ntree {t}: {tree}; dtype {results[t, i][0]['dtype']}")
            names = sorted({n for r in results[t, i] for n in r["imports"]},
                           key=lambda n: -median([r["imports"].get(n, 0.0) for r in results[t, i]]))  # fmt: skip
            lazy = [f"{n} {median([r['imports'].get(n, 0.0) for r in results[t, i]]):.3f}" for n in names[:8]]
            print(f"  first imported during TTFF (inside the phases above): {', '.join(lazy) or 'none'}")
            if args.digest:
                print(f"  decoded frames sha256: {', '.join(sorted(digests[t, i]))}")
        if args.digest and len(trees) > 1:
            same = len(set().union(*(digests[t, i] for t in range(len(trees))))) == 1
            print(f"\nframes identical across trees and runs: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
