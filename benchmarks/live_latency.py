"""Live output benchmark: time to the first playable output at each sink, and end-to-end latency of a live session.

One render, one encode, three sinks at once: MPEG-TS on stdout (decoded as it arrives), an HLS playlist, and an
RTMP push into a local ingest (tests/live/harness.py). The audio is a WAV fed into ``--audio -`` at real time (as a
microphone would), and ``--realtime`` paces the output. Printed per sink: seconds from the render's start to the
first playable output (stdout: first MPEG-TS bytes; HLS: first segment listed in the playlist; RTMP: first bytes at
the ingest). End-to-end latency of frame f: the time it was decoded from stdout minus the time the last audio sample
of frame f was fed in; median, p95 and max over the session, plus the underruns the render reported.

    python benchmarks/live_latency.py                      # 20 s session, default pipeline
    python benchmarks/live_latency.py --seconds 30 pipeline=no_interp runtime.threads=2
"""

from __future__ import annotations

import argparse
import array
import fcntl
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import termios
import threading
import time
from datetime import date
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.render_durations import speechlike  # noqa: E402
from tests.live.harness import RtmpIngest  # noqa: E402

FPS = 25
SIZE = 256


def feed_realtime(stdin, wav: bytes, rate: int, started: list[float]) -> None:
    """Write the WAV header, wait until the render reads it (its models are built: it is listening), then write the
    samples at real time in 20 ms pieces, as a microphone would; ``started`` gets the time of sample 0."""
    header = wav[:44]  # soundfile writes a canonical 44-byte header for 16-bit PCM
    stdin.write(header)
    stdin.flush()
    unread = array.array("i", [1])
    while unread[0]:
        fcntl.ioctl(stdin.fileno(), termios.FIONREAD, unread)  # bytes still in the pipe
        time.sleep(0.005)
    samples = wav[44:]
    piece = rate // 50 * 2  # 20 ms of mono s16
    t0 = time.monotonic()
    started.append(t0)
    for i in range(0, len(samples), piece):
        delay = t0 + (i // 2) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        stdin.write(samples[i : i + piece])
        stdin.flush()
    stdin.close()


def decode_stdout(stdout, arrivals: list[float], first_bytes: list[float]) -> None:
    """Decode the MPEG-TS stream on ``stdout`` with ffmpeg; record when each frame came out."""
    import imageio_ffmpeg

    decoder = subprocess.Popen(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-probesize", "32768", "-analyzeduration", "0", "-i", "pipe:0",
         "-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", "gray", "pipe:1"],  # fmt: skip
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip

    def pump() -> None:
        while chunk := stdout.read1(65536):
            if not first_bytes:
                first_bytes.append(time.monotonic())
            decoder.stdin.write(chunk)
            decoder.stdin.flush()
        decoder.stdin.close()

    threading.Thread(target=pump, daemon=True).start()
    while frame := decoder.stdout.read(SIZE * SIZE):
        if len(frame) == SIZE * SIZE:
            arrivals.append(time.monotonic())
    decoder.wait()


def first_segment_time(playlist: Path, done: threading.Event, found: list[float]) -> None:
    while not done.is_set():
        if playlist.exists() and ".ts" in playlist.read_text():
            found.append(time.monotonic())
            return
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--image", default=str(REPO / "examples" / "avatar_1.png"))
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    print(f"# {date.today()} {platform.node()} {platform.processor() or platform.machine()} "
          f"session={args.seconds:g}s overrides={args.overrides}", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        speechlike(tmp / "speech.wav", args.seconds)
        audio, rate = sf.read(tmp / "speech.wav", dtype="int16")
        buffer = io.BytesIO()
        sf.write(buffer, audio, rate, format="WAV", subtype="PCM_16")
        playlist = tmp / "hls" / "live.m3u8"
        with RtmpIngest(tmp / "ingest.ts") as ingest:
            cmd = [sys.executable, "-m", "avatargen", "render", "-i", args.image, "-a", "-", "-o", "-", "--realtime",
                   "--publish", str(playlist), "--publish", ingest.url, "--json", "-q", *args.overrides]  # fmt: skip
            launched = time.monotonic()
            render = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            fed: list[float] = []
            arrivals: list[float] = []
            first_bytes: list[float] = []
            hls_first: list[float] = []
            done = threading.Event()
            threads = [
                threading.Thread(target=feed_realtime, args=(render.stdin, buffer.getvalue(), rate, fed), daemon=True),
                threading.Thread(target=decode_stdout, args=(render.stdout, arrivals, first_bytes), daemon=True),
                threading.Thread(target=first_segment_time, args=(playlist, done, hls_first), daemon=True),
            ]
            for thread in threads:
                thread.start()
            stderr = render.stderr.read().decode(errors="replace")
            render.wait()
            done.set()
            for thread in threads:
                thread.join(timeout=10)
        if render.returncode != 0:
            sys.exit(f"render failed ({render.returncode}): {stderr.strip()}")
        report = json.loads(stderr.strip().splitlines()[-1])
    # The session starts when the first audio sample is fed (the model loads before that: reported apart).
    t0 = fed[0]
    frames = np.arange(len(arrivals))
    latency = np.asarray(arrivals) - (t0 + (frames + 1) / FPS)
    result = {
        "session_s": args.seconds, "frames": report["frames"], "decoded_frames": len(arrivals),
        "startup_s": round(t0 - launched, 3),  # process start, model build, until the render reads stdin
        "first_output_s": {
            "stdout": round(first_bytes[0] - t0, 3) if first_bytes else None,  # a player in the pipe starts here
            "hls": round(hls_first[0] - t0, 3) if hls_first else None,
            "rtmp": round(ingest.first_bytes_time - t0, 3) if ingest.first_bytes_time else None,
        },
        "latency_s": {"median": round(float(np.median(latency)), 3), "p95": round(float(np.percentile(latency, 95)), 3),
                      "max": round(float(latency.max()), 3)},  # fmt: skip
        "realtime": report["realtime"], "rtf": report["rtf"],
        "peak_rss_mb": report["peak_rss_mb"], "rss_end_mb": report["rss_end_mb"],
    }  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
