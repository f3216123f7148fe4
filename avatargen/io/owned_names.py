"""The names a render of ``OUT.mp4`` (and a publish to ``DIR/NAME.m3u8``) owns, and how it tells its own files from a
user's.

A render writes ``OUT.mp4``, ``OUT.yaml``, ``OUT.partial.mp4``, ``OUT.lock`` and ``OUT.resume/`` (and hidden
temporary names, ``.OUT.*``). Each carries a mark of avatargen: the MP4s a ``comment`` tag in their header
(``MP4_TAG``), the YAML a first comment line (``YAML_HEADER``), the lock its holder's JSON, the resume folder a
marker file (``RESUME_MARKER``). A rerun replaces what carries the mark (and empty files: nothing in them to lose);
anything else at those names -- a user's file or folder, a symbolic link -- is refused before the first frame
(``check_owned_names``, exit 2 naming ``--overwrite``), unless ``--overwrite`` says to replace it. Links are never
followed: they are replaced as links, their targets untouched. No output is another output's side name
(``another_renders_name``). A publish owns its playlist, its segments (marked in their MPEG-TS service description),
their temporary names and a lock (``playlist_names``). The policy: docs/owned-names.md.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from avatargen.errors import BadInputError
from avatargen.io.mp4_boxes import top_level_boxes

MP4_TAG = "made with avatargen"  # the MP4 'comment' tag of every file avatargen writes
YAML_HEADER = "# avatargen: the config this video was rendered with (avatargen config prints the defaults)"
RESUME_MARKER = ".avatargen-resume"  # inside OUT.resume/: avatargen made this folder
OVERWRITE_FIX = "move it away, choose another output name, or pass --overwrite to replace it"
_MOOV_LIMIT = 64 << 20  # a header larger than this is no header avatargen wrote
_JSON_LIMIT = 64 << 20  # a JSON file larger than this is none avatargen wrote
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def resume_folder_for(output: Path) -> Path:
    """The resume folder of output ``OUT.mp4``: ``OUT.resume/`` beside it."""
    return output.with_name(f"{output.stem}.resume")


def metadata_args(part_id: str | None = None) -> list[str]:
    """ffmpeg output options that mark an MP4 as avatargen's (``part_id``: as the partial video of that run of a
    render, ``part_id_of``)."""
    return ["-metadata", f"comment={MP4_TAG}" + (f"; part {part_id}" if part_id else "")]


@contextmanager
def _regular_file(path: Path) -> Iterator[BinaryIO | None]:
    """``path`` open for reading if it is a regular file, else None: a link is not followed, a FIFO not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        yield None
        return
    with os.fdopen(fd, "rb") as file:
        yield file if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _mp4_header(path: Path) -> bytes | None:
    """The header (``moov`` box) of MP4 ``path`` (not followed if a link), or None: none yet (a partial killed before
    its first fragment), not a regular file, not an MP4 avatargen could have written."""
    with _regular_file(path) as file:
        if file is None:
            return None
        for kind, offset, length in top_level_boxes(file, os.fstat(file.fileno()).st_size):
            if kind == b"moov":
                if length > _MOOV_LIMIT:
                    return None
                file.seek(offset)
                return file.read(length)
    return None


def is_avatargen_mp4(path: Path) -> bool:
    """Whether MP4 ``path`` (not followed if a link) carries avatargen's tag in its header (``moov`` box)."""
    header = _mp4_header(path)
    return header is not None and MP4_TAG.encode() in header


def png_mark() -> dict[str, str]:
    """The PNG text chunk that marks a PNG as avatargen's (Pillow's ``PngInfo.add_text``, matplotlib's ``metadata``)."""
    return {"Software": MP4_TAG}


def pil_png_mark():
    """``png_mark`` as Pillow's ``PngInfo`` (``Image.save(..., pnginfo=pil_png_mark())``)."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    for key, value in png_mark().items():
        info.add_text(key, value)
    return info


def _is_avatargen_png(path: Path) -> bool:
    """Whether PNG ``path`` (a link not followed) has ``png_mark``'s text chunk."""
    wanted = b"Software\x00" + MP4_TAG.encode()
    with _regular_file(path) as file:
        if file is None or file.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
            return False
        while len(head := file.read(8)) == 8:  # each chunk: length, type, data, CRC
            length, kind = struct.unpack(">I4s", head)
            if kind == b"IEND":
                return False
            if kind == b"tEXt" and length == len(wanted):
                if file.read(length) == wanted:
                    return True
                length = 0
            file.seek(length + 4, os.SEEK_CUR)
    return False


def _is_avatargen_wav(path: Path) -> bool:
    """Whether WAV ``path`` (a link not followed) names avatargen as its software (``LIST``/``INFO``/``ISFT``, what
    soundfile writes for ``SoundFile.software``)."""
    with _regular_file(path) as file:
        if file is None or (riff := file.read(12))[:4] != b"RIFF" or riff[8:] != b"WAVE":
            return False
        while len(head := file.read(8)) == 8:
            kind, length = head[:4], struct.unpack("<I", head[4:])[0]
            if kind == b"LIST" and length < (1 << 16):
                data = file.read(length)
                if data[:4] == b"INFO" and b"ISFT" in data and MP4_TAG.encode() in data:
                    return True
                length = len(data)
            else:
                file.seek(length, os.SEEK_CUR)
            file.seek(length % 2, os.SEEK_CUR)  # chunks are padded to an even length
    return False


def _is_avatargen_json(path: Path) -> bool:
    """Whether ``path`` (a link not followed) is a JSON object whose ``made_by`` names avatargen."""
    with _regular_file(path) as file:
        data = file.read(_JSON_LIMIT + 1) if file is not None else b""
    try:
        loaded = json.loads(data) if 0 < len(data) <= _JSON_LIMIT else None
    except ValueError:
        return False
    return isinstance(loaded, dict) and str(loaded.get("made_by", "")).startswith("avatargen")


def part_id_of(path: Path) -> str | None:
    """The part id in the header of partial MP4 ``path`` (``metadata_args``): "" for a header without one (another
    MP4, a finished video), None for a file without a header."""
    header = _mp4_header(path)
    if header is None:
        return None
    found = re.search(re.escape(MP4_TAG).encode() + rb"; part ([0-9a-f]{16})", header)
    return found.group(1).decode() if found else ""


def _regular_size(path: Path) -> int | None:
    """Size of ``path`` if it is a regular file (links not followed), else None."""
    info = os.lstat(path)
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _is_avatargen_yaml(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(YAML_HEADER)).decode(errors="replace") == YAML_HEADER
    except OSError:
        return False


def _is_lock_file(path: Path) -> bool:
    try:
        data = json.loads(Path(path).read_bytes()[:4096])
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"pid", "host", "started"} <= set(data)


def is_avatargen_resume_folder(folder: Path) -> bool:
    """A real folder (not a link) that avatargen made: its marker, or (earlier versions) a ``resume.json``."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    if (folder / RESUME_MARKER).is_file():
        return True
    try:
        data = json.loads((folder / "resume.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "fingerprint" in data


def foreign_reason(path: Path, kind: str, resume_folder: Path | None = None) -> str | None:
    """Why ``path`` (of ``kind`` mp4, partial, yaml, lock, resume, temp, join; a publish's playlist, segment; an eval
    sheet's or a synth example's png, wav, json) is not avatargen's own, or None when it is free or avatargen's (a
    rerun may replace it)."""
    if not os.path.lexists(path):
        return None
    if kind == "temp":  # a hidden temporary name: a file or link there is a killed render's, a folder is not
        return "is a folder" if path.is_dir() and not path.is_symlink() else None
    if kind == "join":
        try:
            clear_link_folder(path, dry_run=True)
        except BadInputError:
            return "is a folder avatargen did not make"
        return None
    if os.path.islink(path):
        return "is a symbolic link"
    if kind == "resume":
        if path.is_dir():
            if not any(path.iterdir()):
                return None  # an empty folder: nothing in it to lose
            return None if is_avatargen_resume_folder(path) else "is a folder avatargen did not make"
        return "is a file, not avatargen's resume folder"
    size = _regular_size(path)
    if size is None:
        return "is a folder" if path.is_dir() else "is not a regular file"
    if size == 0:
        return None
    if kind == "mp4" and is_avatargen_mp4(path):
        return None
    if kind == "partial" and (is_avatargen_mp4(path) or (resume_folder is not None and is_avatargen_resume_folder(resume_folder))):
        return None  # killed before its header was written: the resume folder beside it says it is avatargen's
    if kind == "yaml" and _is_avatargen_yaml(path):
        return None
    if kind == "lock" and _is_lock_file(path):
        return None
    if kind == "segment" and is_avatargen_segment(path):
        return None
    if kind == "playlist" and _is_avatargen_playlist(path):
        return None
    if (kind == "png" and _is_avatargen_png(path)) or (kind == "wav" and _is_avatargen_wav(path)):
        return None
    if kind == "json" and _is_avatargen_json(path):
        return None
    return "is a file avatargen did not write"


# --- a publish target's names: DIR/NAME.m3u8 and its segments ------------------------------------------------------

_TS_PACKET = 188
_TS_HEAD = 4 * _TS_PACKET  # the SDT that names the provider comes in the first packets of every segment


def ts_metadata_args() -> list[str]:
    """ffmpeg output options that mark MPEG-TS (an HLS segment, stdout's stream) as avatargen's: the provider in the
    service description each segment starts with."""
    return ["-metadata", f"service_provider={MP4_TAG}"]


def is_avatargen_segment(path: Path) -> bool:
    """Whether ``path`` (a link not followed) is MPEG-TS that names avatargen as its provider."""
    with _regular_file(path) as file:
        head = file.read(_TS_HEAD) if file is not None else b""
    return head[:1] == b"\x47" and MP4_TAG.encode() in head


def segment_pattern(playlist: Path) -> re.Pattern[str]:
    """The names of ``playlist``'s segments (``NAME_00000.ts``, ...: ``io.outputs.hls_output``)."""
    return re.compile(re.escape(playlist.stem) + r"_\d{5,}\.ts")


def _is_avatargen_playlist(path: Path) -> bool:
    """A playlist avatargen wrote: it lists only its own segment names, and those of them still there are
    avatargen's (one at least: a playlist's text carries no mark of its own)."""
    try:
        with open(path, "rb") as file:
            text = file.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return False
    if not text.startswith("#EXTM3U"):
        return False
    pattern = segment_pattern(path)
    listed = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not listed or not all(pattern.fullmatch(name) for name in listed):
        return False
    present = [path.with_name(name) for name in listed if os.path.lexists(path.with_name(name))]
    return bool(present) and all(is_avatargen_segment(segment) for segment in present)


def publish_lock_path(playlist: Path) -> Path:
    """The lock a render holds while it publishes to ``playlist``: ``NAME.m3u8.lock`` beside it."""
    return playlist.with_name(f"{playlist.name}.lock")


def playlist_names(playlist: Path) -> list[tuple[Path, str]]:
    """The names a publish to ``playlist`` writes and replaces, each with its kind (``foreign_reason``): the playlist,
    its lock, the segments already there, and the temporary names the HLS muxer writes before it renames them
    (``NAME.m3u8.tmp``, ``NAME_00000.ts.tmp``)."""
    names = [(playlist, "playlist"), (publish_lock_path(playlist), "lock")]
    names.append((playlist.with_name(f"{playlist.name}.tmp"), "temp"))
    pattern = segment_pattern(playlist)
    try:
        entries = sorted(os.listdir(playlist.parent if str(playlist.parent) else "."))
    except OSError:
        entries = []  # the folder is made later; nothing in it yet
    for name in entries:
        if pattern.fullmatch(name):
            names.append((playlist.with_name(name), "segment"))
        elif name.endswith(".tmp") and pattern.fullmatch(name.removesuffix(".tmp")):
            names.append((playlist.with_name(name), "temp"))
    return names


def clear_playlist_names(playlist: Path) -> None:
    """Remove what an earlier publish to ``playlist`` left (checked by ``check_owned_names``, or replaced by
    ``--overwrite``): the playlist, its segments and temporary files, links as links. The HLS muxer then creates
    every name afresh: a link left at a temporary name would be written through."""
    for path, kind in playlist_names(playlist):
        if kind != "lock":
            remove_name(path)


def another_renders_name(path: Path, what: str = "output") -> str | None:
    """Why ``path`` (an output or a publish target) is a name a render of another output writes or removes, or None.

    Every render of ``X.mp4`` owns ``X.partial.mp4``, hidden temporary names (``.X.joining.mp4``,
    ``.X.partial.mp4.trim.mp4``, ``..X.joining.mp4.join/``) and everything inside ``X.resume/``, which it removes when
    it ends. A render whose own output were one of those would destroy the other's work or have its own destroyed
    (two renders of ``a.mp4`` and ``a.partial.mp4``), whichever ran first: refused by name, so no order of starting
    them matters. Folders are compared as they resolve (a link to ``a.resume/`` counts)."""
    name = Path(path).name
    shown = f"{what} '{path}'"
    if name.endswith(".partial.mp4") and name != ".partial.mp4":
        owner = f"{name.removesuffix('.partial.mp4')}.mp4"
        return (f"{shown} is the name a render of '{owner}' writes its video to until it is complete; two renders "
                "must not share a name: choose a name that does not end in .partial.mp4")  # fmt: skip
    if name.startswith(".") and name.endswith((".joining.mp4", ".partial.mp4.trim.mp4")):
        return f"{shown} is a hidden temporary name of a render of another output; choose another name"
    resolved = Path(os.path.realpath(Path(path).parent))
    for folder in [resolved, *resolved.parents]:
        if folder.name.endswith(".resume") and folder.name != ".resume":
            owner = f"{folder.name.removesuffix('.resume')}.mp4"
            return (f"{shown} is inside '{folder}', the folder where a render of '{owner}' keeps its resume state "
                    "and which it removes when it ends; choose another folder")  # fmt: skip
        if folder.name.startswith("..") and folder.name.endswith(".joining.mp4.join"):
            return f"{shown} is inside '{folder}', a temporary folder of another render; choose another folder"
    return None


def check_owned_names(names: list[tuple[Path, str]], overwrite: bool, resume_folder: Path | None = None,
                      writer: str = "this render") -> None:  # fmt: skip
    """Refuse (``BadInputError``, exit 2) a render (or another ``writer``) whose names hold something that is not
    avatargen's, before anything is written. With ``overwrite`` files and links are replaced (a link as a link),
    folders still refused at file names (a folder at the resume folder's name is replaced)."""
    for path, kind in names:
        reason = foreign_reason(path, kind, resume_folder)
        if reason is None:
            continue
        is_folder = path.is_dir() and not path.is_symlink()
        if overwrite and (kind == "resume" or not is_folder) and kind not in ("temp", "join"):
            continue
        if is_folder and kind != "resume" and kind != "join":
            raise BadInputError(f"'{path}' {reason}, where {writer} writes a file; move it away or choose another "
                                "output name")  # fmt: skip
        raise BadInputError(f"'{path}' {reason}; {writer} would replace it: {OVERWRITE_FIX}")


def remove_name(path: Path) -> None:
    """Remove what is at ``path`` without following a link: a link or file is unlinked, a folder removed with its
    contents (callers only remove what ``check_owned_names`` let through, or their own temporary names)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def create_fresh(path: Path) -> int:
    """A new, empty file at ``path`` (a file or link there removed first, a link as a link; a folder refused), opened
    for writing; the descriptor. ``O_EXCL | O_NOFOLLOW``: a link planted at the name in the meantime fails here, never
    written through."""
    if path.is_dir() and not path.is_symlink():
        raise BadInputError(f"'{path}' is a folder, where this render writes a file; move it away or choose another "
                            "output name")  # fmt: skip
    remove_name(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def clear_link_folder(folder: Path, dry_run: bool = False) -> None:
    """Remove ``folder`` if it holds only what ``join_parts`` puts there (links ``N.mp4``, ``parts.ffconcat``: a
    killed join leaves them); a link at its name is removed as a link; a folder holding anything else is refused."""
    if folder.is_dir() and not folder.is_symlink():
        def ours(entry: Path) -> bool:
            return entry.name == "parts.ffconcat" or (entry.is_symlink() and entry.name.removesuffix(".mp4").isdigit())

        if not all(ours(entry) for entry in folder.iterdir()):
            raise BadInputError(f"'{folder}' is a folder avatargen did not make, at a name a render uses for its "
                                "temporary files; move it away")  # fmt: skip
    if not dry_run:
        remove_name(folder)


def fd_url(fd: int) -> str:
    """How a child process that inherits ``fd`` (same number) opens that very file, whatever its name names now."""
    return f"file:/proc/self/fd/{fd}"


@contextmanager
def fresh_file(path: Path) -> Iterator[BinaryIO]:
    """A file open for writing that becomes ``path`` when the block ends without an error: a fresh hidden temporary
    file beside it (never a link's target), synced, then renamed over ``path`` (a link there is replaced, not
    followed). On an error the temporary file is removed and ``path`` is untouched."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = create_fresh(tmp)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_name(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``fresh_file``)."""
    with fresh_file(path) as file:
        file.write(text.encode())


def open_no_follow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a link at ``path`` and a folder: one line (``BadInputError``) instead of ``OSError``."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise BadInputError(f"'{path}' is a symbolic link; this render would replace it: {OVERWRITE_FIX}") from None
        if err.errno == errno.EISDIR:
            raise BadInputError(f"'{path}' is a folder, where this render writes a file; move it away or choose "
                                "another output name") from None  # fmt: skip
        raise
