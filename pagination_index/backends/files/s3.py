"""Generations in S3: immutable objects plus a small manifest per group naming the current one.

    <prefix>g/<32 hex of sha256(group)>/gen-<generation, 20 digits>   header + records, never overwritten
    <prefix>g/<32 hex of sha256(group)>/manifest                      JSON: group, generation, key, header

A generation is written to a local file first (in the journal's folder), then uploaded whole with
one PUT (If-None-Match: *), so a half-written upload is never an object anyone can read (one PUT
takes up to 5 GB: a group of 200 million entries); it is published by replacing the manifest, conditionally on the manifest
it replaces (If-Match: its ETag), so two committers cannot both win. Reads are ranged GETs of the
generation object; readers re-read the manifest at most every MANIFEST_SECONDS. The generation
before the current one is kept, so a reader whose manifest is that stale can still finish.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import time

from botocore.exceptions import ClientError

from pagination_index import aws

from .format import HEADER_READ, Header, decode_header
from .storage import GenerationFile, Opened


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
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.folder(group) + "manifest")
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return None, None
            raise
        return response["ETag"], json.loads(response["Body"].read())

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

    def publish(self, group: str, generation: int, written: GenerationFile) -> None:
        """Upload a finished generation file (written locally, in the journal's folder) with one PUT,
        then point the manifest at it."""
        header = os.pread(written.fd, HEADER_READ, 0)
        folder = self.folder(group)
        key = f"{folder}gen-{generation:020d}"
        with open(written.path, "rb") as body:  # streamed from the file, never whole in memory
            self._call("put_object", Key=key, Body=body, IfNoneMatch="*")
        etag, _ = self._fetch_manifest(group)
        manifest = json.dumps({"group": group, "generation": generation, "key": key,
                               "header": base64.b64encode(header[:decode_header(header).data_offset]).decode()})
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        self._call("put_object", Key=folder + "manifest", Body=manifest.encode(), ContentType="application/json", **condition)
        # Older generations go, and orphans (uploaded, never published: a committer that died
        # between the two PUTs); the one before is kept, for stale readers.
        keep = {key, f"{folder}gen-{generation - 1:020d}"}
        old = [item["Key"] for item in self._list(folder + "gen-") if item["Key"] not in keep]
        self._delete(old)

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
