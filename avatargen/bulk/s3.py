"""S3-compatible object storage through boto3, the AWS SDK (``pip install 'avatargen[s3]'``).

Endpoint, credentials and region come from where every AWS tool reads them: the environment (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
``AWS_REGION``), the shared config and credentials files (``~/.aws/config``), an instance or pod role; the config
keys ``storage.endpoint_url``, ``storage.region`` and ``storage.addressing_style`` override them (docs/batch.md).

What a bucket decides for a batch -- a job's claim, "finished", "failed" -- rests on S3's conditional writes
(``If-None-Match: *`` creates an object only if there is none, ``If-Match: ETAG`` replaces or deletes only the
version read), which AWS S3 and the usual S3-compatible servers (SeaweedFS, MinIO, Ceph RGW, R2) honour.

Every failure becomes one line naming the object: a missing input or bucket and refused credentials are bad input
(``BadInputError``, exit 2); a store that cannot be reached or answers with a server error is ``StorageError``
(exit 1: a batch retries the job).
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Iterator

from avatargen.bulk.locations import ObjectUrl
from avatargen.config.schema import StorageConfig
from avatargen.errors import EXIT_FAILURE, AvatarGenError, BadInputError

INSTALL_HINT = "pip install 'avatargen[s3]'"
CREDENTIAL_FIX = ("check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE and ~/.aws/credentials) for this "
                  "endpoint")  # fmt: skip
_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken",
            "InvalidClientTokenId", "UnrecognizedClientException", "AuthorizationHeaderMalformed"}  # fmt: skip
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CHANGED = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


class StorageError(AvatarGenError):
    """Object storage could not be reached or failed on its side: worth trying again later. Exit code 1."""

    exit_code = EXIT_FAILURE


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD of an object says: its size, version tag, user metadata, when it was last written, and the
    store's clock at the answer (ages are measured on the store's clock, never against this machine's)."""

    size: int
    etag: str
    metadata: dict[str, str]
    last_modified: datetime
    server_time: datetime

    @property
    def age_s(self) -> float:
        return (self.server_time - self.last_modified).total_seconds()

    @property
    def made_by_avatargen(self) -> bool:
        """Whether a render uploaded it (``MADE_WITH``): a rerun replaces it; a user's object is refused."""
        return self.metadata.get("made-with") == MADE_WITH["made-with"]


MADE_WITH = {"made-with": "avatargen"}  # the metadata of every object a render uploads


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise BadInputError(f"s3:// locations need boto3, the AWS SDK: {INSTALL_HINT}") from None
    return boto3


class Store:
    """One S3 endpoint, its credentials and region (a boto3 client, safe to share between threads)."""

    def __init__(self, settings: StorageConfig):
        boto3 = _boto3()
        from botocore.config import Config as BotoConfig

        self.settings = settings
        session = boto3.session.Session(region_name=settings.region or None)
        region = session.region_name or "us-east-1"
        style = settings.addressing_style.value
        self.client = session.client(
            "s3", endpoint_url=settings.endpoint_url or None, region_name=region,
            config=BotoConfig(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                              s3={"addressing_style": style}),
        )  # fmt: skip
        self.endpoint = self.client.meta.endpoint_url
        self._lock = threading.Lock()
        self._checked: set[str] = set()

    # -- errors -------------------------------------------------------------------------------------------------

    def _fail(self, error: Exception, url: ObjectUrl, doing: str, missing: str | None = None) -> AvatarGenError:
        """The one-line error for ``error`` while ``doing`` on ``url``; ``missing``: the message when it is absent."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

        if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
            return BadInputError(f"no S3 credentials for '{url}' ({error}); {CREDENTIAL_FIX}")
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", "?"))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _REFUSED or status == 403:
                return BadInputError(
                    f"{self.endpoint} refused the S3 credentials for '{url}' ({code}); {CREDENTIAL_FIX}"
                )
            if code == "InvalidBucketName":
                return BadInputError(f"'{url.bucket}' is not a valid bucket name at {self.endpoint} (S3: 3-63 "
                                     "lowercase letters, digits, dots and hyphens); fix the URL")  # fmt: skip
            if code == "NoSuchBucket":
                return BadInputError(
                    f"bucket '{url.bucket}' does not exist at {self.endpoint}; create it or fix '{url}'"
                )
            if code in _MISSING and missing is not None:
                return BadInputError(missing)
            return StorageError(f"S3 {doing} '{url}' failed at {self.endpoint} ({code}: {error}); try again")
        if isinstance(error, BotoCoreError):
            return StorageError(f"S3 {doing} '{url}' failed: cannot reach {self.endpoint} ({error}); check "
                                "storage.endpoint_url / AWS_ENDPOINT_URL and the network")  # fmt: skip
        return StorageError(f"S3 {doing} '{url}' failed ({error.__class__.__name__}: {error})")

    @staticmethod
    def _code(error: Exception) -> str:
        from botocore.exceptions import ClientError

        if isinstance(error, ClientError):
            return str(error.response.get("Error", {}).get("Code", ""))
        return ""

    # -- reading ------------------------------------------------------------------------------------------------

    def check_bucket(self, url: ObjectUrl) -> None:
        """Refuse, in one line, a bucket that does not exist or credentials it does not take (once per bucket)."""
        if url.bucket in self._checked:
            return
        try:
            self.client.head_bucket(Bucket=url.bucket)
        except Exception as error:  # noqa: BLE001 - every kind becomes one line
            if self._code(error) in ("404", "NoSuchBucket", "NotFound"):
                raise BadInputError(
                    f"bucket '{url.bucket}' does not exist at {self.endpoint}; create it or fix '{url}'"
                ) from None
            raise self._fail(error, url, "access to") from None
        with self._lock:
            self._checked.add(url.bucket)

    def head(self, url: ObjectUrl) -> ObjectInfo | None:
        """The object's size, tag and metadata, or None where there is none."""
        try:
            answer = self.client.head_object(Bucket=url.bucket, Key=url.key)
        except Exception as error:  # noqa: BLE001
            if self._code(error) in _MISSING:
                return None
            raise self._fail(error, url, "HEAD of") from None
        return _info(answer)

    def read(self, url: ObjectUrl) -> tuple[bytes, str] | None:
        """The object's bytes and tag, or None where there is none."""
        try:
            answer = self.client.get_object(Bucket=url.bucket, Key=url.key)
            return answer["Body"].read(), answer["ETag"]
        except Exception as error:  # noqa: BLE001
            if self._code(error) in _MISSING:
                return None
            raise self._fail(error, url, "GET of") from None

    def lines(self, url: ObjectUrl, what: str) -> Iterator[bytes]:
        """The object's lines as they stream in (constant memory for any size); ``what`` names it when missing."""
        try:
            body = self.client.get_object(Bucket=url.bucket, Key=url.key)["Body"]
        except Exception as error:  # noqa: BLE001
            raise self._fail(
                error, url, "GET of", f"{what} '{url}' does not exist in the bucket; upload it or fix the URL"
            ) from None
        try:
            yield from body.iter_lines(keepends=True)
        finally:
            body.close()

    def download(self, url: ObjectUrl, path: Path, what: str, missing_ok: bool = False) -> bool:
        """Copy the object to ``path`` (written under a temporary name, then moved into place). Where it does not
        exist: False if ``missing_ok`` (nothing written), else an error that names ``what``."""
        tmp = path.with_name(f".{path.name}.download")
        try:
            self.client.download_file(url.bucket, url.key, str(tmp))
        except Exception as error:  # noqa: BLE001
            tmp.unlink(missing_ok=True)
            if missing_ok and self._code(error) in _MISSING:
                return False
            raise self._fail(error, url, "download of", f"{what} '{url}' does not exist in the bucket; upload it or "
                             "fix the jobs row") from None  # fmt: skip
        os.replace(tmp, path)
        return True

    def list(self, folder: ObjectUrl) -> Iterator[tuple[ObjectUrl, int]]:
        """Every object under ``folder`` (a key prefix), with its size, page by page."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=folder.bucket, Prefix=folder.prefix)
        try:
            for page in pages:
                for item in page.get("Contents", []):
                    yield ObjectUrl(folder.bucket, item["Key"]), int(item["Size"])
        except Exception as error:  # noqa: BLE001
            raise self._fail(error, folder, "listing of") from None

    # -- writing ------------------------------------------------------------------------------------------------

    def upload(self, path: Path, url: ObjectUrl, metadata: dict[str, str] | None = None) -> None:
        """Upload file ``path`` (multipart when large): the object appears only once it is complete."""
        try:
            self.client.upload_file(str(path), url.bucket, url.key, ExtraArgs={"Metadata": metadata or {}})
        except Exception as error:  # noqa: BLE001
            raise self._fail(error, url, "upload to") from None

    def put(self, url: ObjectUrl, data: bytes, *, if_none_match: bool = False, if_match: str | None = None,
            metadata: dict[str, str] | None = None) -> str | None:  # fmt: skip
        """Write ``data`` at ``url``; its new tag, or None where the condition did not hold (``if_none_match``: the
        object already exists; ``if_match``: it is no longer the version with that tag)."""
        extra: dict[str, Any] = {"Metadata": metadata} if metadata else {}
        if if_none_match:
            extra["IfNoneMatch"] = "*"
        if if_match is not None:
            extra["IfMatch"] = if_match
        try:
            return self.client.put_object(Bucket=url.bucket, Key=url.key, Body=data, **extra)["ETag"]
        except Exception as error:  # noqa: BLE001
            if self._code(error) in _CHANGED or (if_match is not None and self._code(error) in _MISSING):
                return None
            raise self._fail(error, url, "PUT of") from None

    def delete(self, url: ObjectUrl, if_match: str | None = None) -> bool:
        """Delete the object (only the version with tag ``if_match``, when given); False where that version is gone."""
        extra = {"IfMatch": if_match} if if_match is not None else {}
        try:
            self.client.delete_object(Bucket=url.bucket, Key=url.key, **extra)
            return True
        except Exception as error:  # noqa: BLE001
            if self._code(error) in _CHANGED or self._code(error) in _MISSING:
                return False
            if if_match is not None and self._code(error) in ("NotImplemented", "InvalidArgument"):
                return self.delete(url)  # a store without conditional deletes: the claim was ours a moment ago
            raise self._fail(error, url, "DELETE of") from None

    def delete_folder(self, folder: ObjectUrl) -> None:
        """Delete every object under ``folder``."""
        for url, _ in list(self.list(folder)):
            self.delete(url)


def _info(answer: dict[str, Any]) -> ObjectInfo:
    headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    try:
        now = parsedate_to_datetime(headers["date"])
    except (KeyError, TypeError, ValueError):
        now = datetime.now(timezone.utc)
    return ObjectInfo(int(answer.get("ContentLength", 0)), str(answer.get("ETag", "")),
                      {k.lower(): v for k, v in answer.get("Metadata", {}).items()}, answer["LastModified"], now)  # fmt: skip


@functools.lru_cache(maxsize=8)
def _store(settings: tuple[Any, ...]) -> Store:
    endpoint, region, style = settings
    from avatargen.config.schema import AddressingStyle

    return Store(StorageConfig(endpoint_url=endpoint, region=region, addressing_style=AddressingStyle(style)))


def store_for(settings: StorageConfig) -> Store:
    """The (per process, shared) client for the endpoint, region and addressing style of ``settings``."""
    return _store((settings.endpoint_url, settings.region, settings.addressing_style.value))
