"""A render whose inputs or output are in object storage: ``avatargen render -i s3://... -a s3://... -o s3://...``
and every job of a batch whose files are in a bucket.

Inputs are downloaded into a scratch folder of their own (``storage.scratch_dir``), the video is rendered there as
any render is, and the finished ``OUT.yaml`` then ``OUT.mp4`` are uploaded (an upload is all or nothing: a reader of
the bucket never sees a partial MP4 under the output's name). While it renders, the output's claim in the bucket
(``OUT.lock``, ``bulk.bucket_dir``) keeps a second render of it away, and its resume state is copied to
``OUT.resume/`` in the bucket after every checkpoint (``bulk.mirror``), so ``--resume`` -- on this machine or any
other -- continues a render stopped or killed with its machine. The scratch folder is removed when the render ends,
whatever happened.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from avatargen.bulk.bucket_dir import BucketClaim
from avatargen.bulk.locations import ObjectUrl
from avatargen.bulk.mirror import ResumeMirror
from avatargen.bulk.s3 import MADE_WITH, Store, store_for
from avatargen.config.loader import to_config
from avatargen.config.schema import StorageConfig
from avatargen.errors import AvatarGenError, BadInputError
from avatargen.io.console import say
from avatargen.io.owned_names import OVERWRITE_FIX
from avatargen.render import RenderRequest, render
from avatargen.render.request import config_path_for
from avatargen.resume import StopRequests
from avatargen.runtime.world import world_info

_KEPT_MARKERS = ("; the video so far is in ", "; the video of this run is in ", "; the video is in ")


class ClaimLostError(AvatarGenError):
    """Another worker took over this render's claim (this one was thought dead): it stopped and wrote nothing
    more. Exit code 1; a batch counts the job as the other worker's."""


def scratch_root(settings: StorageConfig) -> Path:
    """Where renders of objects keep their files meanwhile: ``storage.scratch_dir``, else the temp folder."""
    base = Path(settings.scratch_dir).expanduser() if settings.scratch_dir else Path(tempfile.gettempdir())
    return base / f"avatargen-scratch-{os.getuid()}"


def default_owner() -> str:
    """Who a claim names when a process claims for itself: host, pid and a random token."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def is_remote(request: RenderRequest) -> bool:
    return any(isinstance(x, ObjectUrl) for x in (request.image, request.video, request.output, *request.audio_files))


def render_anywhere(request: RenderRequest, cfg: DictConfig, *, claim: BucketClaim | None = None,
                    owner: str | None = None, stop: StopRequests | None = None, **options: Any) -> dict[str, Any]:  # fmt: skip
    """``render.render(request, cfg, **options)`` where ``request``'s image, video, audio and output may be objects
    (``ObjectUrl``). ``claim``: the output's claim, already held (a batch job); else one is taken for ``owner``.
    ``stop``: stop requests from code (a batch worker's). Returns the render's report, its output the object's URL."""
    if not is_remote(request):
        return render(request, cfg, stop=stop, **options)
    settings = to_config(cfg).storage
    store = store_for(settings)
    root = scratch_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="render-", dir=root))
    try:
        local = _fetch_inputs(store, request, folder / "in")
        if not isinstance(request.output, ObjectUrl):
            return render(local, cfg, stop=stop, **options)
        if not world_info().is_primary:  # a torchrun rank that follows rank 0's render: it writes nothing
            return render(replace(local, output=folder / request.output.name), cfg, stop=stop, **options)
        return _render_to_bucket(store, local, request.output, cfg, folder / "out", claim, owner, stop, options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _fetch_inputs(store: Store, request: RenderRequest, folder: Path) -> RenderRequest:
    """``request`` with each object input downloaded into ``folder`` (its name kept: ffmpeg reads the extension)."""
    folder.mkdir(parents=True)
    fetched: dict[ObjectUrl, Path] = {}

    def local(where: Any, what: str) -> Any:
        if not isinstance(where, ObjectUrl):
            return where
        if where not in fetched:
            store.check_bucket(where)
            path = folder / f"{len(fetched)}-{where.name}"
            store.download(where, path, what)
            fetched[where] = path
        return fetched[where]

    return replace(request, image=local(request.image, "image"), video=local(request.video, "video"),
                   audio=local(request.audio, "audio"), extra_audio=tuple(local(a, "audio") for a in request.extra_audio))  # fmt: skip


def _render_to_bucket(store: Store, request: RenderRequest, output: ObjectUrl, cfg: DictConfig, folder: Path,
                      claim: BucketClaim | None, owner: str | None, stop: StopRequests | None,
                      options: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    settings = to_config(cfg)
    store.check_bucket(output)
    taken = claim is None
    if claim is None:
        claim = BucketClaim(store, output, owner or default_owner(), settings.storage.lease_s)
        claim.acquire()
    stop = stop if stop is not None else StopRequests()
    claim.on_lost(lambda: stop.request(signal.SIGTERM))  # another worker has the job now: stop at the next chunk
    try:
        _refuse_foreign_objects(store, output, settings.output.save_config, bool(options.get("overwrite")))
        folder.mkdir(parents=True)
        local_output = folder / output.name
        told = options.get("warn", say)  # a note names the object, not the scratch file it is made in
        options = {**options, "warn": lambda message: told(message.replace(str(local_output), str(output)))}
        mirror = ResumeMirror(store, output, local_output, verify=claim.verify)
        if options.get("resume"):
            mirror.restore()
        try:
            report = render(replace(request, output=local_output), cfg, stop=stop, after_checkpoint=mirror.snapshot,
                            **options)  # fmt: skip
        except BaseException as error:
            _keep_in_bucket(error, mirror, claim, output, options.get("resume_command", ""))
            raise
        finally:
            mirror.close()
        if not claim.verify():
            raise ClaimLostError(f"another worker took over '{output}' while this one rendered it; it renders it now")
        saved = config_path_for(local_output)
        if saved.is_file():  # the config first: OUT.mp4 never comes without it
            store.upload(saved, output.with_name(saved.name), MADE_WITH)
        store.upload(local_output, output, MADE_WITH)
        mirror.remove()
        return {**report, "output": str(output)}
    finally:
        if taken:
            claim.release()


def _refuse_foreign_objects(store: Store, output: ObjectUrl, save_config: bool, overwrite: bool) -> None:
    """An object at the output's names that avatargen did not upload is a user's: refused unless ``overwrite``."""
    names = [output] + ([output.with_name(f"{output.stem}.yaml")] if save_config else [])
    for url in [] if overwrite else names:
        info = store.head(url)
        if info is not None and not info.made_by_avatargen:
            raise BadInputError(
                f"'{url}' is an object avatargen did not write; this render would replace it: {OVERWRITE_FIX}"
            )


def _keep_in_bucket(error: BaseException, mirror: ResumeMirror, claim: BucketClaim, output: ObjectUrl,
                    resume_command: str) -> None:  # fmt: skip
    """After ``error``: copy what was rendered to the bucket (unless the claim went to another worker) and make the
    message name where it is kept there, not the scratch folder that is about to go."""
    if claim.lost:
        raise ClaimLostError(
            f"another worker took over '{output}' while this one rendered it; it renders it now"
        ) from None
    if not isinstance(error, AvatarGenError):
        return
    message = str(error)
    cut = min((message.find(marker) for marker in _KEPT_MARKERS if marker in message), default=-1)
    if cut < 0:
        return
    try:
        mirror.sync()
    except AvatarGenError as copy_error:
        error.args = (f"{message[:cut]}; what was rendered could not be copied to '{mirror.remote}' ({copy_error})",)
        return
    try:
        kept = mirror.holds_state
    except AvatarGenError:  # the store went down meanwhile: say where the state would be
        kept = True
    if not kept:  # stopped before its first checkpoint: the bucket holds nothing to resume from
        error.args = (f"{message[:cut]}; it stopped before its first checkpoint: a rerun renders it from the start",)
        return
    hint = f"; resume with: {resume_command}" if resume_command else "; resume with --resume"
    error.args = (f"{message[:cut]}; what was rendered is kept in '{mirror.remote}'{hint}",)
