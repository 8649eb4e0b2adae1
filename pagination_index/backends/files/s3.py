"""Generations in S3: immutable objects plus a small manifest per group naming the current one.

    <prefix>g/<32 hex of sha256(group)>/gen-<generation, 20 digits>-<16 random hex>   header + records
    <prefix>g/<32 hex of sha256(group)>/manifest          JSON: group, generation, key, header

A generation is written to a local file first (in the journal's folder), then uploaded whole with
one PUT under a name no other upload uses, so a half-written upload is never an object anyone reads
(one PUT takes up to 5 GB: a group of 200 million entries). It is published by replacing the
manifest conditionally on the manifest the commit was built on (If-Match: the ETag of the view the
new generation was merged from; If-None-Match: * for a group's first): that condition is the one
arbiter between committers, and a committer that loses deletes its upload. A generation's name is
never reused, so an upload left unpublished (a committer killed between the two PUTs, or botocore
retrying a PUT that had landed) blocks nothing: the next publish deletes it. Reads are ranged GETs
of the generation object; readers re-read the manifest at most every MANIFEST_SECONDS. The
generation before the current one is kept, so a reader whose manifest is that stale can still finish.

Permissions (S3's GetObject reference, "Permissions"): a GetObject of a key that does not exist is
answered 404 only to a caller with s3:ListBucket on the bucket, and 403 AccessDenied otherwise. A
group without a manifest is normal (a product with no comments yet), so every role that reads the
index needs s3:ListBucket as well as s3:GetObject; a 403 on a manifest is reported as that
configuration error (MissingPermission), never read as "no group".
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import ClientError

from pagination_index import aws

from .format import HEADER_READ, Header, decode_header
from .storage import GenerationFile, Opened

logger = logging.getLogger(__name__)

GENERATION_NAME = re.compile(r"gen-(\d{20})(?:-[0-9a-f]+)?$")
# Manifests of one page's groups (a product and its rating groups) fetched at once.
MANIFEST_FETCHERS = 8


class MissingPermission(PermissionError):
    """S3 answered 403 AccessDenied: the role lacks a permission the index needs (an OSError, so the
    index reports it as unavailable, with this message)."""


class ManifestMoved(Exception):
    """The manifest is no longer the one the commit was built on: another committer published first
    (this commit's upload is deleted; the next commit reads the group again)."""


class S3Generation:
    def __init__(self, storage: "S3Storage", key: str, header: Header, stamp: str):
        self.storage = storage
        self.key = key
        self.header = header
        self.stamp = stamp

    def read_records(self, first: int, count: int) -> bytes:
        size = self.header.record_size
        start = self.header.data_offset + first * size
        if count <= 0:
            return b""
        return self.storage.get_range(self.key, start, start + count * size - 1)


class S3Storage:
    """OPTIONS: S3_BUCKET, S3_PREFIX, S3_ENDPOINT_URL, S3_REGION, MANIFEST_SECONDS. Credentials come
    from boto3's default chain, as every AWS client's (pagination_index/aws/)."""

    def __init__(self, options: dict):
        self.bucket = options["S3_BUCKET"]
        self.prefix = options.get("S3_PREFIX", "pagination-index/")
        self.manifest_seconds = float(options.get("MANIFEST_SECONDS", 1))
        # Page use: a page's at() is a ranged GET, so a failing S3 must become a quick 503.
        self.client = aws.client("s3", aws.PAGE, region_name=options.get("S3_REGION") or None,
                                 endpoint=options.get("S3_ENDPOINT_URL") or None,
                                 connect_timeout=options.get("S3_CONNECT_TIMEOUT", 2),
                                 read_timeout=options.get("S3_READ_TIMEOUT", 10), attempts=3)
        self._manifests: dict[str, tuple[float, str | None, dict | None]] = {}
        self._lock = threading.Lock()

    # --- keys and calls --------------------------------------------------------------------------
    def folder(self, group: str) -> str:
        return f"{self.prefix}g/{hashlib.sha256(group.encode()).hexdigest()[:32]}/"

    def _call(self, method: str, **kwargs):
        return getattr(self.client, method)(Bucket=self.bucket, **kwargs)

    def get_range(self, key: str, first: int, last: int) -> bytes:
        return self._call("get_object", Key=key, Range=f"bytes={first}-{last}")["Body"].read()

    def _fetch_manifest(self, group: str) -> tuple[str | None, dict | None]:
        key = self.folder(group) + "manifest"
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in ("NoSuchKey", "404"):
                return None, None
            if code in ("AccessDenied", "403"):
                message = (f"S3 answered 403 AccessDenied to GetObject s3://{self.bucket}/{key} (the manifest of "
                           f"group {group!r}). A missing key is answered 403 instead of 404 to a caller without "
                           f"s3:ListBucket: grant s3:ListBucket on arn:aws:s3:::{self.bucket} (and s3:GetObject on "
                           f"arn:aws:s3:::{self.bucket}/{self.prefix}*) to this process's role")
                logger.error("%s", message)
                raise MissingPermission(message) from exc
            raise
        return response["ETag"], json.loads(response["Body"].read())

    def prefetch(self, groups) -> None:
        """Read the manifests of these groups at once (a page counts a product and its rating groups:
        one after another that is one S3 round trip each); what the next MANIFEST_SECONDS read uses."""
        due = [group for group in dict.fromkeys(groups)
               if (cached := self._manifests.get(group)) is None or time.monotonic() - cached[0] >= self.manifest_seconds]
        if len(due) < 2:
            return
        with ThreadPoolExecutor(max_workers=min(len(due), MANIFEST_FETCHERS)) as pool:
            list(pool.map(self._manifest, due))

    def _manifest(self, group: str) -> tuple[str | None, dict | None]:
        cached = self._manifests.get(group)
        if cached is not None and time.monotonic() - cached[0] < self.manifest_seconds:
            return cached[1], cached[2]
        etag, manifest = self._fetch_manifest(group)
        with self._lock:
            self._manifests[group] = (time.monotonic(), etag, manifest)
        return etag, manifest

    # --- the storage interface -------------------------------------------------------------------
    def stamp(self, group: str):
        return self._manifest(group)[0]

    def open(self, group: str) -> Opened:
        etag, manifest = self._manifest(group)
        if manifest is None:
            return Opened(etag, None)
        return Opened(etag, S3Generation(self, manifest["key"], decode_header(base64.b64decode(manifest["header"])), etag))

    def forget(self, group: str) -> None:
        with self._lock:
            self._manifests.pop(group, None)

    def publish(self, group: str, generation: int, written: GenerationFile, *, expected: str | None,
                previous: str | None) -> None:
        """Upload a finished generation file (written locally, in the journal's folder) with one PUT,
        then point the manifest at it if the manifest is still `expected` (the ETag of the view the
        generation was built from; None: the group had none). `previous`: the key that manifest
        named, kept for readers still holding it. ManifestMoved when another committer won."""
        header = os.pread(written.fd, HEADER_READ, 0)
        folder = self.folder(group)
        key = f"{folder}gen-{generation:020d}-{secrets.token_hex(8)}"
        with open(written.path, "rb") as body:  # streamed from the file, never whole in memory
            # No condition: nobody else writes this name, and botocore re-sending a PUT that landed
            # (a read timeout) writes the same bytes again.
            self._call("put_object", Key=key, Body=body)
        manifest = json.dumps({"group": group, "generation": generation, "key": key,
                               "header": base64.b64encode(header[:decode_header(header).data_offset]).decode()})
        condition = {"IfMatch": expected} if expected else {"IfNoneMatch": "*"}
        try:
            self._call("put_object", Key=folder + "manifest", Body=manifest.encode(), ContentType="application/json",
                       **condition)
        except ClientError as exc:
            # 412 PreconditionFailed: the manifest changed since the view; 409 ConditionalRequestConflict:
            # a conditional write to it in flight (S3 "Conditional writes").
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                raise
            self.forget(group)
            _, current = self._fetch_manifest(group)
            if not current or current.get("key") != key:  # (else: botocore re-sent our PUT, which had landed)
                self._delete([key])
                raise ManifestMoved(f"group {group!r}: its manifest changed since generation {generation - 1} "
                                    f"was read (another committer published first)") from exc
        self._tidy(folder, generation, keep={key, previous})

    def _tidy(self, folder: str, generation: int, keep: set) -> None:
        """Delete the group's generations up to this one but `keep`: those replaced, and uploads never
        published (a committer killed between its two PUTs, or one that lost). A higher number may be
        another committer's upload in flight (it read the manifest just published): left to it."""
        doomed = []
        for item in self._list(folder + "gen-"):
            match = GENERATION_NAME.search(item["Key"])
            if item["Key"] not in keep and match and int(match.group(1)) <= generation:
                doomed.append(item["Key"])
        self._delete(doomed)

    def _list(self, prefix: str):
        token = None
        while True:
            kwargs = {"Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            response = self._call("list_objects_v2", **kwargs)
            yield from response.get("Contents", [])
            token = response.get("NextContinuationToken")
            if not token:
                return

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            self._call("delete_objects", Delete={"Objects": [{"Key": key} for key in keys[start : start + 1000]]})

    def names(self):
        for item in self._list(self.prefix + "g/"):
            if item["Key"].endswith("/manifest"):
                body = self._call("get_object", Key=item["Key"])["Body"].read()
                yield json.loads(body)["group"]

    def clear(self) -> None:
        self._delete([item["Key"] for item in self._list(self.prefix)])
        with self._lock:
            self._manifests.clear()
