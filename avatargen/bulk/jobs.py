"""The jobs of a batch: rows of a JSONL or CSV file, read one at a time, each resolved into a ``Job``.

A jobs file may be a local file or an object (``s3://...``); either way it is streamed, never read whole, so a file
of millions of rows costs the memory of one row, plus about 100 bytes a job (a digest of each output, to find two
rows with one output): 1,000,000 rows streamed in 53 s, 117 MB more at the end, on a 2-core VM. Inputs are relative
to the jobs file's folder (or prefix), outputs to the out-dir; each may also be an ``s3://`` URL. A row that cannot
run gets a ``problem`` (its job fails alone, with its line number); so does a line longer than ``MAX_LINE_BYTES`` or
nested deeper than JSON can be read. A jobs file with no row at all (empty, blank or ``#`` lines only, a CSV header
alone) is refused as a whole (``BadInputError``): a batch of nothing is a mistake, not a success."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from avatargen.bulk.locations import ObjectUrl, Where, identity, inside, mp4_name_problem, resolve_against
from avatargen.errors import BadInputError

JOB_KEYS = ("image", "video", "audio", "prompt", "output", "overrides", "person_boxes", "audio_type")
MAX_LINE_BYTES = 1 << 20  # a row longer than this is no job: it fails alone, and no more of it is held


@dataclass
class Job:
    """One row of the jobs file, locations resolved: inputs against the jobs file's folder, output against the
    out-dir. A field the row does not give is None (its job cannot run: ``problem`` says why)."""

    index: int
    image: Where | None  # None: the job dubs ``video`` (or the row gives neither)
    audio: Where | None  # the first speaker's file
    output: Where | None
    prompt: str = ""
    overrides: list[str] = field(default_factory=list)
    video: Where | None = None
    extra_audio: tuple[Where, ...] = ()  # the further speakers' files (``audio`` a list)
    person_boxes: tuple[tuple[float, float, float, float], ...] = ()
    audio_type: str = "para"
    problem: str | None = None  # a row that cannot run (reported as failed, the others still run)
    claim: Where | None = None  # what workers claim and mark failed for it: its output, or a bad row's hidden name
    overwrite: bool = False  # --overwrite: replace a user's file at the output's names (io.owned_names)

    @property
    def claimed_as(self) -> Where:
        return self.claim if self.claim is not None else self.output

    @property
    def audio_files(self) -> list[Where]:
        return [a for a in (self.audio, *self.extra_audio) if a is not None]

    def inputs_text(self) -> str:
        """The inputs and output a failure line names: ``image 'a.png', audio 'a.wav', output 'out/a.mp4'``."""
        audio = ";".join(str(a) for a in self.audio_files) or None
        named = (("image", self.image), ("video", self.video), ("audio", audio), ("output", self.output))
        return ", ".join(f"{name} '{value}'" for name, value in named if value is not None)


def bad_row_claim(out_dir: Where, index: int, problem: str) -> Where:
    """The name a row that cannot run is claimed and failed under (``.bad-row-N-HASH`` in ``out_dir``); a row whose
    problem changed is a new claim, so it is reported again."""
    digest = hashlib.sha1(problem.encode("utf-8")).hexdigest()[:12]
    return out_dir / f".bad-row-{index}-{digest}.mp4"


def bad_row_number(claim: Where) -> int | None:
    """N of a ``bad_row_claim`` name (``.bad-row-N-HASH.mp4``), or None for a job's own output."""
    parts = claim.name.split("-")
    if claim.name.startswith(".bad-row-") and len(parts) == 4 and parts[2].isdigit():
        return int(parts[2])
    return None


# -- reading the file ------------------------------------------------------------------------------------------------


def check_jobs_file(jobs_file: Where, read_object: Callable[[ObjectUrl], Iterable[bytes]] | None = None) -> None:
    """Refuse, as reading it would, a jobs file (local, or an object read through ``read_object``) that cannot be
    opened, is not a regular file, or holds no job (the batch says so before it imports torch). Reads up to its first
    row."""
    rows = _rows(jobs_file, read_object)
    try:
        next(rows)  # opens and checks it, and reads it up to its first row (none: BadInputError)
    finally:
        rows.close()


def _local_lines(path: Path) -> Iterator[bytes]:
    """The lines of a regular file, at most ``MAX_LINE_BYTES + 1`` bytes each (a longer line is cut there and its
    rest skipped: the row fails, and memory stays bounded). A FIFO, a device or a folder is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens without a writer, then is refused
    except OSError as err:
        raise BadInputError(
            f"jobs file '{path}' could not be read ({err.strerror}); give a JSONL or CSV file"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before a file object: a folder's would fail as one
        os.close(fd)
        raise BadInputError(f"jobs file '{path}' is not a regular file (a pipe, device or folder); give a JSONL or "
                            "CSV file")  # fmt: skip
    with os.fdopen(fd, "rb") as file:
        os.set_blocking(fd, True)
        while True:
            line = file.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            yield line
            while len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):  # the rest of an over-long line
                line = file.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return


def _bounded(lines: Iterable[bytes]) -> Iterator[bytes]:
    for line in lines:
        yield line[: MAX_LINE_BYTES + 1]


def _text_lines(raw: Iterable[bytes], name: str) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of each line; text None for a line that is too long or not UTF-8 (its row fails)."""
    for number, line in enumerate(raw, start=1):
        if len(line) > MAX_LINE_BYTES:
            yield number, None
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            yield number, None
            continue
        yield number, (text.lstrip("\ufeff") if number == 1 else text)  # a byte-order mark (spreadsheets) is no column


def open_jobs(
    jobs_file: Where, read_object: Callable[[ObjectUrl], Iterable[bytes]] | None
) -> Iterator[tuple[int, str | None]]:
    """The numbered lines of ``jobs_file`` (local, or an object read through ``read_object``)."""
    if isinstance(jobs_file, ObjectUrl):
        if read_object is None:
            raise BadInputError(f"jobs file '{jobs_file}' is in a bucket; give the storage settings")
        return _text_lines(_bounded(read_object(jobs_file)), jobs_file.name)
    return _text_lines(_local_lines(jobs_file), jobs_file.name)


def iter_jobs(jobs_file: Where, out_dir: Where, allow_outside: bool = False,
              read_object: Callable[[ObjectUrl], Iterable[bytes]] | None = None) -> Iterator[Job]:  # fmt: skip
    """The jobs of a ``.jsonl`` (one JSON object a line, ``#`` lines skipped) or ``.csv`` (a header row) file, one at
    a time. A row that cannot run is a job with a ``problem`` naming its line; an unreadable jobs file raises
    ``BadInputError``. Outputs must lie inside ``out_dir`` unless ``allow_outside``."""
    base = jobs_file.parent if isinstance(jobs_file, ObjectUrl) else jobs_file.resolve().parent
    seen: dict[int, int] = {}  # an 8-byte digest of each output's identity -> the first job that names it
    for index, (row, where, problem) in enumerate(_rows(jobs_file, read_object)):
        job = row_to_job(index, row, base, out_dir, where, allow_outside)
        job.problem = problem or job.problem
        if job.problem is None:
            digest = int.from_bytes(
                hashlib.blake2b(identity(job.output).encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big"
            )
            if digest in seen:  # x.mp4, d/../x.mp4 and link/x.mp4 are one file
                job.problem = (f"{where}: output '{job.output}' is also the output of job {seen[digest]}; give each "
                               "job its own output")  # fmt: skip
            seen.setdefault(digest, index)
        job.claim = job.output if job.problem is None else bad_row_claim(out_dir, index, job.problem)
        yield job


def read_jobs(jobs_file: Where, out_dir: Where, allow_outside: bool = False,
              read_object: Callable[[ObjectUrl], Iterable[bytes]] | None = None) -> list[Job]:  # fmt: skip
    """Every job of ``jobs_file`` at once (for a small file; ``iter_jobs`` streams)."""
    return list(iter_jobs(jobs_file, out_dir, allow_outside, read_object))


def _rows(jobs_file: Where, read_object: Callable[[ObjectUrl], Iterable[bytes]] | None,
          ) -> Iterator[tuple[dict, str, str | None]]:  # fmt: skip
    """(row, where, problem) of each row of ``jobs_file``, a bad one's included; ``BadInputError`` when it has none."""
    lines = open_jobs(jobs_file, read_object)
    csv_file = jobs_file.suffix.lower() == ".csv"
    rows = _csv_rows(lines, jobs_file.name) if csv_file else _jsonl_rows(lines, jobs_file.name)
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        what, fix = (("a header and no row under it", "one row per job under the header") if csv_file
                     else ("only blank and # lines", "one JSON object a line, one per job"))  # fmt: skip
        raise BadInputError(f"jobs file '{jobs_file}' holds no jobs (empty, or {what}); give {fix} (docs/batch.md)")


def _jsonl_rows(lines: Iterator[tuple[int, str | None]], name: str) -> Iterator[tuple[dict, str, str | None]]:
    for number, text in lines:
        where = f"{name} line {number}"
        if text is None:
            yield {}, where, f"{where}: longer than {MAX_LINE_BYTES >> 20} MiB or not UTF-8 text; fix the row"
            continue
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            yield {}, where, f"{where}: not valid JSON ({err.msg})"
            continue
        except RecursionError:
            yield {}, where, f"{where}: nested too deep to read; a row is one flat JSON object"
            continue
        yield (row, where, None) if isinstance(row, dict) else ({}, where, f"{where}: each line must be a JSON object")


def _csv_rows(lines: Iterator[tuple[int, str | None]], name: str) -> Iterator[tuple[dict, str, str | None]]:
    numbers: list[int] = []

    def texts() -> Iterator[str]:
        for number, text in lines:
            numbers.append(number)
            del numbers[:-1]
            yield text if text is not None else "\x00\n"  # a row csv reads as one odd field: reported below

    reader = csv.DictReader(texts())
    for row in reader:
        where = f"{name} line {numbers[-1]}"
        if any("\x00" in (v or "") for v in row.values() if isinstance(v, str)):
            yield {}, where, f"{where}: longer than {MAX_LINE_BYTES >> 20} MiB or not UTF-8 text; fix the row"
            continue
        if None in row:  # more fields than the header names: an unquoted comma, most likely
            yield {}, where, (f"{where}: {len(reader.fieldnames or []) + len(row[None])} fields under a header of "
                              f"{len(reader.fieldnames or [])}; quote a field that holds a comma")  # fmt: skip
            continue
        yield (
            {
                k.strip(): (v or "").strip()
                for k, v in row.items()
                if k is not None and isinstance(v, str) and v.strip()
            },
            where,
            None,
        )


# -- one row ---------------------------------------------------------------------------------------------------------


def row_to_job(index: int, row: dict[str, Any], base: Where, out_dir: Where, where: str, allow_outside: bool) -> Job:
    """One row as a job; a row that cannot run gets a ``problem`` (its job fails alone, with that reason)."""
    problems: list[str] = []
    unknown = sorted(str(k) for k in set(row) - set(JOB_KEYS))
    if unknown:
        problems.append(f"unknown column(s) {', '.join(unknown)[:200]}; valid: {', '.join(JOB_KEYS)}")
    fields: dict[str, str] = {}
    missing = []
    audio = _audio_files(row.get("audio"), problems)  # one file, or a list (CSV: ';' between) for two speakers
    row = {**row, "audio": audio[0] if audio else ""}
    for key in ("image", "video", "audio", "output", "prompt", "audio_type"):
        value = row.get(key)
        if value is None or value == "":
            missing += [key] if key in ("audio", "output") else []
            value = ""
        elif not isinstance(value, str):
            problems.append(f"{key} must be a string, not {type(value).__name__} ({json.dumps(value)[:80]})")
            value = ""
        fields[key] = value
    if not fields["image"] and not fields["video"]:
        missing.insert(0, "image (or video)")
    if missing:
        problems.insert(0, f"missing {', '.join(missing)} (every job needs image or video, audio and output)")
    boxes = _person_boxes(row.get("person_boxes"), problems)
    overrides = row.get("overrides") or []
    if isinstance(overrides, str):
        try:
            overrides = shlex.split(overrides)  # CSV: one space-separated string
        except ValueError as err:  # an unclosed quote: this row fails, the others run
            problems.append(
                f"overrides '{overrides[:80]}' cannot be split into key=value words ({err}); close the quote"
            )
            overrides = []
    elif not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        problems.append(f"overrides must be a list of key=value strings, not {json.dumps(overrides)[:80]}")
        overrides = []
    output = image = video = first_audio = None
    extra: tuple[Where, ...] = ()
    try:
        output = resolve_against(out_dir, fields["output"]) if fields["output"] else None
        image = resolve_against(base, fields["image"]) if fields["image"] else None
        video = resolve_against(base, fields["video"]) if fields["video"] else None
        first_audio = resolve_against(base, fields["audio"]) if fields["audio"] else None
        extra = tuple(resolve_against(base, a) for a in audio[1:])
    except BadInputError as err:
        problems.append(str(err))
    name_problem = mp4_name_problem(output) if output is not None else None
    if name_problem is not None:
        problems.append(f"output '{fields['output']}' {name_problem}")
    elif output is not None and not allow_outside and not inside(output, out_dir):
        problems.append(f"output '{fields['output']}' is outside --out-dir '{out_dir}'; give a path inside it, or pass "
                        "--allow-outside-out-dir")  # fmt: skip
    job = Job(index, image, first_audio, output, fields["prompt"], list(overrides), video=video, extra_audio=extra,
              person_boxes=boxes, audio_type=fields["audio_type"] or "para")  # fmt: skip
    job.problem = f"{where}: {'; '.join(problems)}" if problems else None
    return job


def _audio_files(value: Any, problems: list[str]) -> list[str]:
    """A row's ``audio``: one path, a list of paths (JSONL) or paths joined by ';' (CSV)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(";") if part.strip()]
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    if value not in (None, "", []):
        problems.append(f"audio must be a path or a list of paths (one per speaker), not {json.dumps(value)[:80]}")
    return []


def _person_boxes(value: Any, problems: list[str]) -> tuple[tuple[float, float, float, float], ...]:
    """A row's ``person_boxes``: [[x0, y0, x1, y1], ...] (JSONL) or 'x0,y0,x1,y1;...' (CSV)."""
    if value in (None, "", []):
        return ()
    parts = value.split(";") if isinstance(value, str) else value
    try:
        boxes = tuple(tuple(float(v) for v in (part.split(",") if isinstance(part, str) else part)) for part in parts)
        if all(len(box) == 4 for box in boxes):
            return boxes  # type: ignore[return-value]
    except (TypeError, ValueError):
        pass
    problems.append(
        f"person_boxes must be [[x0, y0, x1, y1], ...] in pixels (CSV: x0,y0,x1,y1;...), not {json.dumps(value)[:80]}"
    )
    return ()
