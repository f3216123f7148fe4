"""Live latency as a viewer sees it: how long after a burst of speech starts the mouth moves in the decoded stream.

``avatargen render -a - --realtime -o -`` is started, and from that moment audio is written into its stdin at real
time, as a microphone would (WAV, 16 kHz mono, 20 ms pieces): quiet room noise, and a 1.5-s burst of speech (cut
from examples/speech_*.flac at a word's onset) every ``--period`` seconds from ``--first-burst`` on. Stdout is decoded
as it arrives (MPEG-TS -> ffmpeg -> gray frames); each frame's arrival time is noted with its mouth region (the box
below the nose of the face found in the reference picture), and the stream's audio. Each burst is found in that
audio (its frame in the stream: dropped silence moves it earlier); the latency of a burst is the arrival of the
first frame from there on whose mouth moved (``mouth_motion``) minus the time the burst's first sample was written.

With ``--stall-burst N`` the render process is stopped (SIGSTOP) for ``--stall-s`` (1 s) as burst N starts: the
report gives that burst's latency and how long after the stall began a burst was seen within 0.8 s again. The
median latency of the session's first and last minute shows drift. HLS and RTMP outputs (``--publish``): the time
from the first sample written to the first playable output of each.

    python benchmarks/live/live_latency.py                        # 10-minute session, stall at burst 3
    python benchmarks/live/live_latency.py --seconds 60           # a quick run
    python benchmarks/live/live_latency.py --seconds 60 --publish pipeline=default output.realtime_target_s=0  # before
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from avatargen.io.encoder import widen_pipe  # noqa: E402
from tests.live.harness import RtmpIngest  # noqa: E402
from tests.live.speech_feed import PIECE, RATE, mouth_box, mouth_motion, session_audio, wav_header  # noqa: E402

FPS = 25


def feed(stdin, samples: np.ndarray, launched: float, starts: list[float], written: dict[int, float],
         stall: tuple[int, float] | None, pid: int, stalled: list[float]) -> None:  # fmt: skip
    """Write the header, then the samples at real time from ``launched``; note when each burst's first piece was
    written (after the write returned: it is in the pipe). At burst ``stall[0]`` the render is stopped for
    ``stall[1]`` s."""
    burst_pieces = {int(round(t * RATE)) // PIECE: b for b, t in enumerate(starts)}
    stdin.write(wav_header())
    stdin.flush()
    raw = samples.tobytes()
    try:
        for i in range(0, len(samples) // PIECE):
            delay = launched + i * PIECE / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            burst = burst_pieces.get(i)
            if stall is not None and burst == stall[0]:
                threading.Thread(target=pause, args=(pid, stall[1], stalled), daemon=True).start()
            stdin.write(raw[i * PIECE * 2 : (i + 1) * PIECE * 2])
            stdin.flush()
            if burst is not None:
                written[burst] = time.monotonic()
        stdin.close()
    except BrokenPipeError:
        pass


def pause(pid: int, seconds: float, stalled: list[float]) -> None:
    stalled.append(time.monotonic())
    os.kill(pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(pid, signal.SIGCONT)


def decode(stdout, size: tuple[int, int], box: tuple[int, int, int, int], arrivals: list[float], crops: list[np.ndarray],
           first_bytes: list[float], audio: list[bytes]) -> None:  # fmt: skip
    """Decode the MPEG-TS on ``stdout`` as it arrives, as a low-latency viewer does (one decoding thread: frame
    threads hold each frame back by one frame per extra thread): each frame's arrival time and mouth region (gray),
    and the stream's audio (16 kHz mono s16le), which is in step with the frames."""
    import imageio_ffmpeg

    width, height = size
    read_fd, write_fd = os.pipe()
    # -fps_mode passthrough: each decoded frame once (probed this briefly, a 512-px stream's rate was guessed at 50 fps
    # and every frame written twice: a photograph's latencies read 4-17 s)
    decoder = subprocess.Popen(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-probesize", "32768", "-analyzeduration", "0",
         "-fflags", "nobuffer", "-flags", "low_delay", "-threads", "1", "-i", "pipe:0", "-map", "0:v:0", "-fps_mode", "passthrough", "-f", "rawvideo",
         "-pix_fmt", "gray", "pipe:1", "-map", "0:a:0", "-ac", "1", "-ar", str(RATE), "-f", "s16le", f"pipe:{write_fd}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(write_fd,),
    )  # fmt: skip
    os.close(write_fd)

    def pump() -> None:
        while chunk := stdout.read1(65536):
            if not first_bytes:
                first_bytes.append(time.monotonic())
            decoder.stdin.write(chunk)
            decoder.stdin.flush()
        decoder.stdin.close()

    def sound() -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            while chunk := pipe.read(65536):
                audio.append(chunk)

    threading.Thread(target=pump, daemon=True).start()
    listener = threading.Thread(target=sound, daemon=True)
    listener.start()
    y0, y1, x0, x1 = box
    frame_bytes = width * height
    while len(frame := decoder.stdout.read(frame_bytes)) == frame_bytes:
        arrivals.append(time.monotonic())
        crops.append(np.frombuffer(frame, np.uint8).reshape(height, width)[y0:y1, x0:x1].copy())
    decoder.wait()
    listener.join(timeout=10)


def burst_samples(played: np.ndarray, bursts: list[np.ndarray]) -> list[int | None]:
    """The sample of the stream's audio where each burst starts, found in order: the first place after the previous burst where its
    first 0.12 s match the stream's audio (silence may have been dropped between bursts, never speech)."""
    found, cursor, n = [], 0, int(0.12 * RATE)
    for burst in bursts:
        # The next burst starts within the silence between two (2.5 s, or less where some was dropped); the same
        # sound comes again 3 bursts later, at least 3 x 1.5 s on.
        window = played[cursor : cursor + 4 * RATE + n].astype(np.float32)
        if len(window) < n:
            found.append(None)
            continue
        probe = burst[:n].astype(np.float32)
        corr = np.correlate(window, probe, mode="valid")  # (len - n + 1,)
        energy = np.sqrt(np.convolve(window**2, np.ones(n), mode="valid")) * np.linalg.norm(probe) + 1e-9
        score = corr / energy
        matches = np.flatnonzero(score > 0.8)  # the first match (the same burst comes again, 3 bursts later)
        if len(matches) == 0:
            found.append(None)  # (the decoder may have skipped the stream's first audio: the next is looked for here)
            continue
        first = matches[0]
        start = cursor + first + int(np.argmax(score[first : first + RATE // 10]))
        found.append(start)
        cursor = start + len(burst)
    return found


def burst_latencies(written: dict[int, float], arrivals: np.ndarray, moving: np.ndarray, starts: list[int | None],
                    fps: int) -> dict[int, float | None]:  # fmt: skip
    """Burst -> seconds from its first sample written to the arrival of the first frame from its start in the
    stream on (less 2 frames: the model may open the mouth a little early) whose mouth moved, within a second."""
    result = {}
    for burst, at in sorted(written.items()):
        frame = starts[burst] if burst < len(starts) else None
        if frame is None:
            result[burst] = None
            continue
        window = np.flatnonzero(moving[max(0, frame - 2) : frame + fps]) + max(0, frame - 2)
        result[burst] = float(arrivals[window[0]] - at) if len(window) else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--period", type=float, default=4.0, help="seconds between burst starts")
    parser.add_argument("--first-burst", type=float, default=4.0, help="seconds from process start to the first burst")
    parser.add_argument("--stall-burst", type=int, default=3, help="stop the render for --stall-s as this burst starts (-1: none)")
    parser.add_argument("--stall-s", type=float, default=1.0)
    parser.add_argument("--publish", action="store_true", help="also publish HLS and RTMP (their first output is timed)")
    parser.add_argument("--dump", help="save the raw measurements (arrivals, mouth motion, bursts) to this .npz")
    parser.add_argument("--image", default=str(REPO / "examples" / "avatar_1.png"))
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args()
    load_start = os.getloadavg()
    print(f"# {date.today()} {platform.node()} {platform.processor() or platform.machine()} session={args.seconds:g}s "
          f"load={load_start[0]:.2f} overrides={args.overrides}", flush=True)  # fmt: skip
    samples, starts, burst_pieces = session_audio(args.seconds, args.first_burst, args.period)
    box = mouth_box(Path(args.image))
    from PIL import Image

    size = Image.open(args.image).size
    stall = (args.stall_burst, args.stall_s) if 0 <= args.stall_burst < len(starts) else None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        playlist = tmp / "hls" / "live.m3u8"
        with RtmpIngest(tmp / "ingest.ts") as ingest:
            publish = ["--publish", str(playlist), "--publish", ingest.url] if args.publish else []
            cmd = [sys.executable, "-m", "avatargen", "render", "-i", args.image, "-a", "-", "-o", "-", "--realtime",
                   *publish, "--json", "-q", *args.overrides]  # fmt: skip
            launched = time.monotonic()
            render = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            widen_pipe(render.stdin.fileno())  # 1 MiB: a producer's writes never wait on the render
            written: dict[int, float] = {}
            arrivals: list[float] = []
            crops: list[np.ndarray] = []
            first_bytes: list[float] = []
            played_audio: list[bytes] = []
            stalled: list[float] = []
            hls_first: list[float] = []
            done = threading.Event()

            def watch_playlist() -> None:
                while not done.is_set() and not hls_first:
                    if playlist.exists() and ".ts" in playlist.read_text():
                        hls_first.append(time.monotonic())
                    time.sleep(0.01)

            threads = [
                threading.Thread(target=feed, args=(render.stdin, samples, launched, starts, written, stall, render.pid, stalled), daemon=True),
                threading.Thread(target=decode, args=(render.stdout, size, box, arrivals, crops, first_bytes, played_audio), daemon=True),
                threading.Thread(target=watch_playlist, daemon=True),
            ]  # fmt: skip
            for thread in threads:
                thread.start()
            stderr = render.stderr.read().decode(errors="replace")
            render.wait()
            done.set()
            for thread in threads:
                thread.join(timeout=10)
        if render.returncode != 0:
            sys.exit(f"render failed ({render.returncode}): {stderr.strip()[-2000:]}")
        report = json.loads(stderr.strip().splitlines()[-1])
    arrival_times, crop_stack = np.asarray(arrivals), np.stack(crops)
    played = np.frombuffer(b"".join(played_audio), "<i2")
    # The decoder may skip the stream's first audio (MPEG-TS probing): audio and frames are aligned at their end
    # (the stream ends with the last frame's audio).
    starts_in_stream = [None if n is None else len(arrivals) - round((len(played) - n) * FPS / RATE)
                        for n in burst_samples(played, burst_pieces)]  # fmt: skip
    moving = mouth_motion(crop_stack)
    latencies = burst_latencies(written, arrival_times, moving, starts_in_stream, FPS)
    if args.dump:
        np.savez(args.dump, arrivals=arrival_times - launched, moving=moving, written=np.array([written[b] - launched for b in sorted(written)]),
                 starts=np.array([-1 if f is None else f for f in starts_in_stream]), played=played)  # fmt: skip
    stalled_burst = stall[0] if stall else None
    normal = [v for b, v in latencies.items() if b != stalled_burst and v is not None]
    missed = [b for b, v in latencies.items() if v is None]
    result: dict = {
        "session_s": args.seconds, "bursts": len(latencies), "bursts_found_in_stream": sum(f is not None for f in starts_in_stream), "frames_decoded": len(arrivals),
        "first_frame_s": round(arrivals[0] - launched, 3) if arrivals else None,  # from process start
        "latency_s": {"median": round(float(np.median(normal)), 3), "p90": round(float(np.percentile(normal, 90)), 3),
                      "max": round(float(np.max(normal)), 3), "over_0.8": sum(v > 0.8 for v in normal),
                      "mouth_not_seen": missed} if normal else None,  # fmt: skip
        "per_burst_s": [None if v is None else round(v, 2) for v in latencies.values()][:30],
    }  # fmt: skip
    minute = max(1, int(60 / args.period))
    ordered = [v for v in latencies.values() if v is not None]
    if len(ordered) >= 2 * minute:
        result["drift"] = {"first_minute_median_s": round(float(np.median(ordered[:minute])), 3),
                           "last_minute_median_s": round(float(np.median(ordered[-minute:])), 3)}  # fmt: skip
    if stall is not None and stalled:
        after = [(b, v) for b, v in latencies.items() if b > stall[0] and v is not None and v <= 0.8]
        result["stall"] = {
            "stall_s": stall[1], "stalled_burst_latency_s": latencies.get(stall[0]),
            "back_under_0.8_after_s": round(written[after[0][0]] + after[0][1] - stalled[0], 2) if after else None,
        }  # fmt: skip
    if args.publish and written:
        t0 = launched
        result["first_output_s"] = {"stdout": round(first_bytes[0] - t0, 3) if first_bytes else None,
                                    "hls": round(hls_first[0] - t0, 3) if hls_first else None,
                                    "rtmp": round(ingest.first_bytes_time - t0, 3) if ingest.first_bytes_time else None}  # fmt: skip
    result.update({"realtime": report["realtime"], "rtf": report["rtf"], "rss_end_mb": report["rss_end_mb"],
                   "load_avg": [round(x, 2) for x in (load_start[0], os.getloadavg()[0])]})  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
