"""Fixtures of the bulk tests: one SeaweedFS per test process, a bucket per test, Ray clusters on loopback.

Every test module here marks itself ``xdist_group("bulk")``: one test process runs them all, sharing the servers."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from tests.bulk.servers import RayCluster, S3Server, start_s3
from tests.conftest import FAST, REPO, write_face_png, write_speechlike_wav

BULK = FAST  # the bulk tests' render settings: one thread, untrained weights
_names = itertools.count()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> S3Server:
    pytest.importorskip("boto3")
    server = start_s3(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def bucket(s3_server) -> str:
    name = f"t{os.getpid()}-{next(_names)}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_env(s3_server) -> dict[str, str]:
    """The environment a CLI run needs to reach the store (and import this checkout)."""
    return {**os.environ, "PYTHONPATH": str(REPO), **s3_server.env}


def upload_jobs(s3_server: S3Server, bucket: str, folder: Path, seconds: list[float], missing: set[int] = frozenset(),
                bad_rows: int = 0) -> list[dict]:  # fmt: skip
    """A face, one speech-like WAV per job, and ``jobs.jsonl`` in ``s3://bucket/in/`` (also kept in ``folder``)."""
    client = s3_server.client()
    folder.mkdir(parents=True, exist_ok=True)
    write_face_png(folder / "face.png")
    client.upload_file(str(folder / "face.png"), bucket, "in/face.png")
    rows = []
    for index, length in enumerate(seconds):
        name = f"a{index}.wav"
        write_speechlike_wav(folder / name, length)
        if index not in missing:
            client.upload_file(str(folder / name), bucket, f"in/{name}")
        rows.append({"image": "face.png", "audio": name, "output": f"v{index}.mp4"})
    rows += [{"image": "face.png", "output": f"bad{n}.mp4"} for n in range(bad_rows)]  # no audio: cannot run
    client.put_object(Bucket=bucket, Key="in/jobs.jsonl", Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    return rows


@pytest.fixture(scope="module")
def ray_cluster(s3_server) -> RayCluster:
    saved = dict(os.environ)  # before Ray is imported: its import sets RAY_CLIENT_MODE
    pytest.importorskip("ray")
    cluster = RayCluster(2, {"PYTHONPATH": str(REPO), **s3_server.env})
    yield cluster
    cluster.shutdown()
    os.environ.clear()
    os.environ.update(saved)


def store_of(s3_server: S3Server):
    """avatargen's own S3 ``Store`` on the test server (its credentials set only while it is made)."""
    from avatargen.bulk.s3 import Store
    from avatargen.config.schema import StorageConfig

    saved = dict(os.environ)
    os.environ.update(s3_server.env)
    try:
        return Store(StorageConfig())
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bucket_resume_point(s3_server: S3Server, output: str, scratch: Path) -> int | None:
    """The frame a render of ``output`` (an s3:// URL) resumed on another machine would continue from now: the
    bucket's copy of its resume state restored into ``scratch`` and chosen from as ``--resume`` does (None: from the
    start). A test waits on it instead of guessing how long the copy of the video takes."""
    from avatargen.bulk.locations import ObjectUrl
    from avatargen.bulk.mirror import ResumeMirror
    from avatargen.io.mp4_join import salvage_part
    from avatargen.io.resume_store import ResumeStore

    local = scratch / Path(output).name
    mirror = ResumeMirror(store_of(s3_server), ObjectUrl.parse(output), local)
    if not mirror.restore():  # (a checkpoint the running render's copy deletes meanwhile is left out, as on a resume)
        return None
    store = ResumeStore(local)
    store.load()
    partial = mirror.partial
    chosen = store.choose(salvage_part(partial) if partial.is_file() and partial.stat().st_size else 0)
    return None if chosen is None else chosen["frames"]
