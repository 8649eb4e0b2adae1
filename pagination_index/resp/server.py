"""serve_index: the files index (PAGINATION_INDEX_PATH) served over the Redis protocol (docs/backends-resp.md).

One process owns the files. Its threads:
- the event loop (uvloop where installed): connections, hiredis's parser, and every read, straight
  from the files (a read takes no lock: a generation is immutable, a log append-only);
- the writer: every connection's writes, in arrival order, a batch at a time: each command's reply is
  computed against the entries as the batch's earlier commands leave them (WriteState), then the
  batch is one append to each group's log and, with `appendfsync always`, one syncfs(2) before any of
  its replies is sent (Redis's group commit of its AOF); with `everysec`, a sync once a second;
- the committer: folds a group's log into its file once the files backend's policy says so
  (COMMIT_ENTRIES changes or COMMIT_SECONDS old), after the reply, or at once on ZCOMMIT;
- readers: the few slow reads (a pass over a group's file for ZSCORE, a listing of every group);
- a loader per ZLOAD in progress, which writes the group's next file as the entries come.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import itertools
import logging
import os
import queue
import signal
import ssl
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import hiredis

from pagination_index.backends.files import FileIndex
from pagination_index.backends.files import format as fmt
from pagination_index.backends.files.storage import sync_batch
from pagination_index.sortkeys import sort_key_micros

from . import commands as cmd
from .commands import COMMANDS, CommandError, Deferred, Write, WriteState
from .replies import Resp2, Resp3

logger = logging.getLogger("pagination_index.resp")

APPENDFSYNC = ("always", "everysec")
# Writes of one pipeline gathered into one job of the writer, at most.
PIPELINED_WRITES = 1000
PLAIN_WRITES = frozenset({b"zadd", b"zrem", b"zremifscore"})


@dataclass
class Settings:
    path: str
    host: str = "127.0.0.1"
    port: int = 6380
    password: str = ""  # requirepass: empty, no authentication
    maxclients: int = 10000
    max_request_bytes: int = 8 << 20  # proto-max-bulk-len, applied to a whole request
    appendfsync: str = "always"
    tls_cert_file: str = ""
    tls_key_file: str = ""
    commit_entries: int = 1000
    commit_seconds: float = 60
    index_options: dict = field(default_factory=dict)  # the rest of the files backend's OPTIONS

    def __post_init__(self):
        if self.appendfsync not in APPENDFSYNC:
            raise ValueError(f"appendfsync must be one of {', '.join(APPENDFSYNC)}, not {self.appendfsync!r}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("TLS needs both a certificate file and its key file")


class ServedIndex(FileIndex):
    """The files index as the server drives it.

    - Reads on the event loop take a group's view from a cache of this process's own, without the
      files backend's look at the pack and the log (two or three stat(2) calls a read): this process
      owns the files, and every change goes through a method below that counts a new version of the
      group once the change is on disk. A read keeps the view it made under the version it saw before
      reading, so a view read while a change was landing is taken again next time. Writers, the
      committer and every other thread always look at the files.
    - Commits a write makes due go to the committer thread (after the reply); with appendfsync
      everysec, a write's sync is left to the once-a-second sync.
    """

    CACHED_VIEWS = 4096

    def __init__(self, options, server: "Server"):
        super().__init__(options)
        self.server = server
        self.loop_thread: int | None = None
        self._served: dict[str, tuple[int, object]] = {}
        self._versions: dict[str, int] = {}
        self._epoch = 0

    def _view(self, group):
        if threading.get_ident() != self.loop_thread:
            return super()._view(group)
        version = (self._epoch, self._versions.get(group, 0))
        cached = self._served.get(group)
        if cached is not None and cached[0] == version:
            return cached[1]
        view = super()._view(group)
        self._served.pop(group, None)
        self._served[group] = (version, view)
        if len(self._served) > self.CACHED_VIEWS:
            self._served.pop(next(iter(self._served)))
        return view

    def _changed(self, groups) -> None:
        for group in groups:
            self._versions[group] = self._versions.get(group, 0) + 1

    def apply_net(self, adds, removes):
        try:
            super().apply_net(adds, removes)
        finally:
            self._changed(set(adds) | set(removes))

    def commit(self, group):
        try:
            return super().commit(group)
        finally:
            self._changed([group])

    def replace(self, group, entries):
        try:
            super().replace(group, entries)
        finally:
            self._changed([group])

    def replace_records(self, group, *parts):
        try:
            super().replace_records(group, *parts)
        finally:
            self._changed([group])

    def clear(self):
        try:
            super().clear()
        finally:
            self._epoch += 1

    def rank_range(self, group: str, start: int, stop: int, reverse: bool) -> list[tuple[bytes, float]]:
        """ZRANGE's ranks start..stop (Redis's rules: negative from the end, clamped; ZREVRANGE's
        order with `reverse`) as (member, score) pairs, from one view of the group."""
        view = self._view(group)
        length = view.count()
        if start < 0:
            start += length
        if stop < 0:
            stop += length
        start = max(start, 0)
        if start > stop or start >= length:
            return []
        stop = min(stop, length - 1)
        if reverse:
            return self._scored(view, group, start, stop + 1)
        return self._scored(view, group, length - 1 - stop, length - start)[::-1]

    def scored_range(self, group: str, start: int, stop: int) -> list[tuple[bytes, float]]:
        """range() as (member, score) pairs."""
        return self._scored(self._view(group), group, start, stop)

    def _scored(self, view, group: str, start: int, stop: int) -> list[tuple[bytes, float]]:
        """A generation without pending changes is decoded here straight to scores (the hot path:
        ZREVRANGE g r r WITHSCORES); otherwise range() merges the log in."""
        if not view.overlay and view.base is not None and view.base.header.layout == fmt.UUID24:
            stop = min(stop, view.base_count)
            if start >= stop:
                return []
            data = view.base.read_records(start, stop - start)
            return [(data[offset + 8:offset + 24].hex().encode(), float(_MICROS.unpack_from(data, offset)[0]))
                    for offset in range(0, len(data), 24)]
        return [(member.encode(), float(sort_key_micros(sort_key))) for member, sort_key in self.range(group, start, stop)]

    def _sync(self, written):
        if self.server.settings.appendfsync == "always":
            super()._sync(written)
        else:
            self.server.unsynced = True

    def _commit_due(self, groups):
        for group in groups:
            self.server.commit_later(group)


_MICROS = struct.Struct(">q")


class Stats:
    def __init__(self):
        self.started = time.time()
        self.connections_received = 0
        self.rejected_connections = 0
        self.commands = 0
        self.calls: dict[bytes, list[int]] = {}  # name -> [calls, microseconds, failed]
        self.commits = 0
        self.commit_seconds_total = 0.0
        self.commit_seconds_last = 0.0
        self.commit_seconds_max = 0.0
        self.commit_failures = 0
        self.write_batches = 0
        self.syncs = 0
        self.last_sync = time.time()


class Session:
    """One connection's state: protocol, authentication, name, its MULTI queue and ZLOADs."""

    ids = itertools.count(1)

    def __init__(self, server: "Server", address):
        self.server = server
        self.index = server.index
        self.id = next(self.ids)
        self.address = address
        self.reply = Resp2
        self.authenticated = not server.settings.password
        self.name = b""
        self.library: dict[str, bytes] = {}
        self.multi: list | None = None
        self.multi_failed = False
        self.loads: dict[str, "Loader"] = {}

    def authenticate(self, user: bytes, password: bytes) -> None:
        configured = self.server.settings.password
        if not configured:
            raise CommandError("ERR AUTH <password> called without any password configured for the default user. "
                               "Are you sure your configuration is correct?")
        if user != b"default" or not hmac.compare_digest(password, configured.encode()):
            raise CommandError("WRONGPASS invalid username-password pair or user is disabled.")
        self.authenticated = True

    def set_name(self, name: bytes) -> None:
        if any(byte < 33 or byte > 126 for byte in name):
            raise CommandError("ERR Client names cannot contain spaces, newlines or special characters.")
        self.name = name

    def set_protocol(self, version: int) -> None:
        self.reply = Resp3 if version == 3 else Resp2


class Connection(asyncio.Protocol):
    """A client: requests parsed by hiredis, run in order; replies of a pipeline written at once. While
    a command waits for a thread, reading pauses (the next commands wait in the socket)."""

    def __init__(self, server: "Server"):
        self.server = server
        self.transport = None
        self.session = None
        self.reader = hiredis.Reader()
        self.unparsed = 0  # bytes fed since the last whole request
        self.waiting = False
        self.closing = False
        self.held = None  # a request read ahead while gathering a pipeline's writes

    # --- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        server = self.server
        server.stats.connections_received += 1
        if len(server.connections) >= server.settings.maxclients or server.stopping:
            server.stats.rejected_connections += 1
            transport.write(Resp2.error("ERR max number of clients reached"))
            transport.close()
            return
        server.connections.add(self)
        self.session = Session(server, transport.get_extra_info("peername"))

    def connection_lost(self, exc):
        self.server.connections.discard(self)
        if self.session is not None:
            for loader in self.session.loads.values():
                loader.abort()
            self.session.loads.clear()

    def data_received(self, data):
        if self.session is None or self.closing:
            return
        self.reader.feed(data)
        self.unparsed += len(data)
        self.process()

    # --- running requests -----------------------------------------------------------------------
    def next_request(self):
        """The next whole request (a list), False when none is whole yet, or bytes: a protocol error's
        reply, after which the connection closes."""
        if self.held is not None:
            request, self.held = self.held, None
            return request
        try:
            request = self.reader.gets()
        except hiredis.ProtocolError as exc:
            return Resp2.error(f"ERR Protocol error: {exc}")
        if request is False:
            if self.unparsed > self.server.settings.max_request_bytes:
                return Resp2.error("ERR Protocol error: invalid bulk length (a request larger than "
                                   f"{self.server.settings.max_request_bytes} bytes)")
            return False
        self.unparsed = 0
        if type(request) is not list or {*map(type, request)} - {bytes}:
            return Resp2.error("ERR Protocol error: expected an array of bulk strings")
        return request

    def process(self):
        out = []
        while not self.waiting and not self.closing:
            request = self.next_request()
            if request is False:
                break
            if isinstance(request, bytes):
                out.append(request)
                self.closing = True
                break
            if not request:
                continue
            result = self.execute(request)
            if isinstance(result, Write):
                result = self.write_pipeline(result)
            if isinstance(result, bytes):
                out.append(result)
            else:
                self.waiting = True
                self.transport.pause_reading()
                result.add_done_callback(self.resume)
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        if self.closing:
            self.transport.close()

    def write_pipeline(self, first: Write):
        """`first` and the plain writes (ZADD, ZREM, ZREMIFSCORE) right behind it in the pipeline, as one
        job of the writer: one pass over each group's file and one sync for them all, their replies
        in order. Anything else waits for their replies (`held`)."""
        items = [first]
        while len(items) < PIPELINED_WRITES:
            request = self.next_request()
            if request is False:
                break
            if (isinstance(request, bytes) or not request or request[0].lower() not in PLAIN_WRITES
                    or self.session.multi is not None or not self.session.authenticated):
                self.held = request
                break
            items.append(self.execute(request))  # a Write, or its error reply
        return self.server.write(items, self.session.reply, joined=True)
    def resume(self, future):
        self.waiting = False
        if self.transport.is_closing():
            return
        try:
            reply = future.result()
        except Exception as exc:  # a store failure: the client gets it as an error reply
            logger.exception("command failed")
            reply = self.session.reply.error(f"ERR pagination index: {exc}")
        self.transport.write(reply)
        self.transport.resume_reading()
        self.process()

    def execute(self, request: list[bytes]):
        session, server = self.session, self.server
        name = request[0].lower()
        server.stats.commands += 1
        if name == b"quit":
            self.closing = True
            return session.reply.OK
        spec = COMMANDS.get(name)
        transaction = spec is None and name in (b"multi", b"exec", b"discard")
        if spec is None and not transaction:
            return self.refuse(cmd_unknown(request))
        arity = 1 if transaction else spec.arity
        if (arity > 0 and len(request) != arity) or len(request) < -arity:
            return self.refuse(f"ERR wrong number of arguments for '{name.decode(errors='replace')}' command")
        if not session.authenticated and not (spec is not None and spec.noauth):
            return self.refuse("NOAUTH Authentication required.")
        if transaction:
            return self.transaction(name)
        if session.multi is not None:
            if not spec.multi:
                return self.refuse(f"ERR {name.decode().upper()} is not allowed in MULTI")
            session.multi.append(request)
            return session.reply.QUEUED
        return self.run(name, spec, request)

    def refuse(self, message: str) -> bytes:
        """An error before the command runs; inside MULTI it also dooms the transaction (EXECABORT)."""
        if self.session.multi is not None:
            self.session.multi_failed = True
        return self.session.reply.error(message)

    def run(self, name: bytes, spec, request):
        session, server = self.session, self.server
        started = time.perf_counter_ns()
        try:
            result = spec.handler(session, request)
        except CommandError as exc:
            server.count_call(name, started, failed=True)
            return session.reply.error(str(exc))
        if isinstance(result, Deferred):
            result = server.defer(result)
        server.count_call(name, started)
        return result

    def transaction(self, name: bytes):
        session = self.session
        if name == b"multi":
            if session.multi is not None:
                return session.reply.error("ERR MULTI calls can not be nested")
            session.multi, session.multi_failed = [], False
            return session.reply.OK
        if session.multi is None:
            return session.reply.error(f"ERR {name.decode().upper()} without MULTI")
        queued, failed = session.multi, session.multi_failed
        session.multi, session.multi_failed = None, False
        if name == b"discard":
            return session.reply.OK
        if failed:
            return session.reply.error("EXECABORT Transaction discarded because of previous errors.")
        # Commands run here up to the first write or slow read; from it on, in the writer thread, in
        # order, each read after the writes before it are applied.
        replies = []
        for position, request in enumerate(queued):
            name = request[0].lower()
            try:
                result = COMMANDS[name].handler(session, request)
            except CommandError as exc:
                result = session.reply.error(str(exc))
            if not isinstance(result, bytes):
                return self.server.write(replies + [result] + queued[position + 1:], session.reply, session=session)
            replies.append(result)
        return session.reply.array(replies)


def cmd_unknown(request: list[bytes]) -> str:
    """Redis's text for an unknown command: the name and the start of its arguments, 128 characters."""
    arguments = ""
    for argument in request[1:]:
        if len(arguments) >= 128:
            break
        arguments += f"'{argument.decode(errors='replace')[:128 - len(arguments)]}' "
    return (f"ERR unknown command '{request[0].decode(errors='replace')[:128]}', "
            f"with args beginning with: {arguments}")


@dataclass
class WriteJob:
    items: list  # Write, a reply already made (bytes), or a request to run in order (list)
    reply: type
    future: asyncio.Future
    single: bool  # the reply is the one item's (else an array of them: EXEC)
    session: Session | None = None
    joined: bool = False  # the replies one after another (a pipeline's)
    replies: list = field(default_factory=list)

    def reply_bytes(self) -> bytes:
        if self.single:
            return self.replies[0]
        return b"".join(self.replies) if self.joined else self.reply.array(self.replies)


class Loader:
    """A ZLOAD in progress: FileIndex.replace() in a thread of its own, fed the loaded entries as they
    come, which writes them to the group's next generation file; finish() publishes it."""

    DONE = object()

    def __init__(self, index: FileIndex, group: str):
        self.group = group
        self.pairs = 0
        self.chunks: queue.Queue = queue.Queue(maxsize=2)
        self.result: concurrent.futures.Future = concurrent.futures.Future()
        self.aborted = False
        self.thread = threading.Thread(target=self._run, args=(index,), name=f"zload {group}", daemon=True)
        self.thread.start()

    def _entries(self):
        while True:
            chunk = self.chunks.get()
            if chunk is self.DONE:
                return
            if self.aborted:
                raise RuntimeError("load aborted")
            yield from chunk

    def _run(self, index: FileIndex):
        try:
            index.replace(self.group, self._entries())
            self.result.set_result(not self.aborted)
        except BaseException as exc:  # an abort, or the store's failure: the files are left as they were
            self.result.set_exception(exc)

    def feed(self, entries: list) -> None:
        """Hand a chunk over; waits while two wait (the connection waits with it), and raises the
        loader's error if it stopped (a bad entry, a full disk)."""
        self._put(entries)
        self.pairs += len(entries)

    def finish(self) -> None:
        self._put(self.DONE)
        self.result.result()

    def _put(self, item) -> None:
        while True:
            if self.result.done():
                self.result.result()
                raise RuntimeError("the load has ended")
            try:
                self.chunks.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def abort(self) -> None:
        self.aborted = True
        try:
            self.chunks.put_nowait([])  # wakes the loader, which then stops
        except queue.Full:
            pass


class Server:
    def __init__(self, settings: Settings):
        self.settings = settings
        options = dict(settings.index_options, PATH=settings.path, COMMIT_ENTRIES=settings.commit_entries,
                       COMMIT_SECONDS=settings.commit_seconds)
        self.index = ServedIndex(options, self)
        self.stats = Stats()
        self.connections: set[Connection] = set()
        self.stopping = False
        self.unsynced = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.writes: queue.Queue = queue.Queue()
        self.commit_queue: queue.Queue = queue.Queue()
        self.commit_wanted: set[str] = set()
        self.commit_lock = threading.Lock()
        self.pending: dict[str, int] = {}  # group -> changes staged, as of this process's last look
        self.readers = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="reader")
        self.keys_counted: tuple[float, int] | None = None
        self.keys_counting = False
        self.threads: list[threading.Thread] = []

    # --- the threads' work, handed over from the loop ----------------------------------------------
    def write(self, items: list, reply, *, single: bool = False, session: Session | None = None,
              joined: bool = False) -> asyncio.Future:
        future = self.loop.create_future()
        self.writes.put(WriteJob(items, reply, future, single, session, joined))
        return future

    def defer(self, deferred: Deferred) -> asyncio.Future:
        if deferred.pool == "writes":
            return self.write([deferred], None, single=True)
        if deferred.pool == "commits":
            future = self.loop.create_future()
            self.commit_queue.put((deferred.call, future))
            return future
        return asyncio.wrap_future(self.readers.submit(deferred.call), loop=self.loop)

    def _resolve(self, future: asyncio.Future, reply: bytes | None, error: BaseException | None = None):
        def settle():
            if not future.done():
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(reply)
        self.loop.call_soon_threadsafe(settle)

    def count_call(self, name: bytes, started: int, failed: bool = False) -> None:
        calls = self.stats.calls.get(name)
        if calls is None:
            calls = self.stats.calls[name] = [0, 0, 0]
        calls[0] += 1
        calls[1] += (time.perf_counter_ns() - started) // 1000
        calls[2] += failed

    # --- the writer thread -----------------------------------------------------------------------
    def _writer(self):
        while True:
            job = self.writes.get()
            if job is None:
                return
            batch = [job]
            while True:
                try:
                    more = self.writes.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.writes.put(None)  # stop after this batch
                    break
                batch.append(more)
            self._write_batch(batch)

    def _write_batch(self, batch: list[WriteJob]) -> None:
        state = WriteState(self.index)
        waiting: list[WriteJob] = []  # jobs whose changes wait for the next flush
        wanted: dict[str, set[str]] = {}
        for job in batch:
            for item in job.items:
                if isinstance(item, Write):
                    for group, members in item.members().items():
                        wanted.setdefault(group, set()).update(members)
        try:
            state.look_up(wanted)  # one pass per group for the whole batch
        except Exception as exc:
            for job in batch:
                self._resolve(job.future, None, exc)
            return

        def flush():
            try:
                written = state.flush()
            except Exception as exc:
                for job in waiting:
                    self._resolve(job.future, None, exc)
                waiting.clear()
                return False
            self.stats.write_batches += bool(written)
            for group in written:
                self.pending[group] = self.index.pending_changes(group)
            for job in waiting:
                self._resolve(job.future, job.reply_bytes())
            waiting.clear()
            return True

        for job in batch:
            try:
                for item in job.items:
                    job.replies.append(self._run_item(state, job, item, flush))
            except Exception as exc:
                self._resolve(job.future, None, exc)
                continue
            waiting.append(job)
        flush()

    def _run_item(self, state: WriteState, job: WriteJob, item, flush) -> bytes:
        if isinstance(item, bytes):
            return item
        if isinstance(item, list):  # a request queued in MULTI, after the transaction's first write
            spec = COMMANDS[item[0].lower()]
            if spec.kind != "write" and not flush():
                raise OSError("the transaction's earlier writes failed")
            try:
                item = spec.handler(job.session, item)
            except CommandError as exc:
                return job.reply.error(str(exc))
            if isinstance(item, bytes):
                return item
        if isinstance(item, Write):
            try:
                return item.run(state, job.reply)
            except CommandError as exc:
                return job.reply.error(str(exc))
        # A Deferred: on the files as the writes before it left them.
        if not flush():
            raise OSError("the batch's earlier writes failed")
        state.forget()
        return item.call()

    # --- deletes, clears and loads (run in the writer thread, in order with the writes) -------------
    def delete(self, groups: list[str]) -> int:
        deleted = 0
        for group in dict.fromkeys(groups):
            if self.index.count(group) > 0:
                self.index.replace(group, [])
                self.pending.pop(group, None)
                deleted += 1
        return deleted

    def clear(self) -> None:
        self.index.clear()
        self.pending.clear()

    def load(self, session: Session, group: str, entries: list) -> asyncio.Future:
        loader = session.loads.get(group)
        if loader is None:
            loader = session.loads[group] = Loader(self.index, group)

        def feed():
            loader.feed(entries)
            return session.reply.integer(loader.pairs)

        return asyncio.wrap_future(self.readers.submit(feed), loop=self.loop)

    def replace(self, session: Session, group: str, pairs: int) -> asyncio.Future:
        loader = session.loads.pop(group, None)
        loaded = loader.pairs if loader else 0
        if loaded != pairs:
            if loader:
                loader.abort()
            future = self.loop.create_future()
            future.set_result(session.reply.error(
                f"ERR ZREPLACE of {pairs} pairs, but this connection loaded {loaded} for the key: nothing replaced"))
            return future

        def publish():
            if loader is None:
                self.index.replace(group, [])
            else:
                loader.finish()
            self.pending.pop(group, None)
            return session.reply.OK

        return self.defer(Deferred(publish, pool="writes"))

    # --- the committer thread ----------------------------------------------------------------------
    def commit_later(self, group: str) -> None:
        with self.commit_lock:
            if group in self.commit_wanted:
                return
            self.commit_wanted.add(group)
        self.commit_queue.put(group)

    def commit(self, group: str) -> int:
        started = time.monotonic()
        try:
            committed = self.index.commit(group)
        except Exception:
            self.stats.commit_failures += 1
            raise
        if committed:
            elapsed = time.monotonic() - started
            stats = self.stats
            stats.commits += 1
            stats.commit_seconds_total += elapsed
            stats.commit_seconds_last = elapsed
            stats.commit_seconds_max = max(stats.commit_seconds_max, elapsed)
        self.pending.pop(group, None)
        return int(committed)

    def _committer(self):
        next_tick = 0.0
        while True:
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                work = self.commit_queue.get(timeout=timeout)
            except queue.Empty:
                work = "tick"
            if work is None:
                return
            try:
                if work == "tick":
                    next_tick = time.monotonic() + 1
                    self._tick()
                elif isinstance(work, tuple):  # ZCOMMIT: (call, future)
                    call, future = work
                    try:
                        self._resolve(future, call())
                    except Exception as exc:
                        self._resolve(future, None, exc)
                else:
                    with self.commit_lock:
                        self.commit_wanted.discard(work)
                    self.commit(work)
            except Exception:
                logger.exception("commit failed")

    def _tick(self):
        """Once a second: the log's sync (everysec), and the commits COMMIT_SECONDS makes due
        (maintain(); its first call looks at every log a previous run left)."""
        if self.unsynced:
            self.unsynced = False
            self._sync_everything()
        started = time.monotonic()
        committed = self.index.maintain()
        if committed:
            self.stats.commits += committed
            elapsed = time.monotonic() - started
            self.stats.commit_seconds_total += elapsed
            self.stats.commit_seconds_last = elapsed / committed
            self.stats.commit_seconds_max = max(self.stats.commit_seconds_max, elapsed / committed)
            for group in list(self.pending):
                if not self.index.pending_changes(group):
                    self.pending.pop(group, None)

    def _sync_everything(self):
        root = self.index.journal.root
        if not root.is_dir():
            return
        fd = os.open(root, os.O_RDONLY)
        try:
            sync_batch([(fd, root)])
        finally:
            os.close(fd)
        self.stats.syncs += 1
        self.stats.last_sync = time.time()

    # --- INFO and CONFIG -----------------------------------------------------------------------------
    def config(self) -> dict[str, str]:
        settings = self.settings
        return {"save": "", "appendonly": "yes", "appendfsync": settings.appendfsync,
                "maxclients": str(settings.maxclients), "proto-max-bulk-len": str(settings.max_request_bytes),
                "databases": "1", "port": str(settings.port), "bind": settings.host,
                "tls-port": str(settings.port) if settings.tls_cert_file else "0"}

    def count_keys(self) -> int | None:
        """The groups, as last counted: a listing of every group (minutes at 600,000 groups), redone in
        a reader thread when the count is a minute old; None before the first count ends."""
        now = time.monotonic()
        with self.commit_lock:
            due = not self.keys_counting and (self.keys_counted is None or now - self.keys_counted[0] > 60)
            self.keys_counting = self.keys_counting or due
        if due:
            def count():
                try:
                    self.keys_counted = (time.monotonic(), len(self.index.groups()))
                finally:
                    self.keys_counting = False
            self.readers.submit(count)
        return self.keys_counted[1] if self.keys_counted else None

    def info(self, sections: list[str]) -> str:
        everything = not sections or any(name in ("all", "everything", "default") for name in sections)
        stats, settings = self.stats, self.settings
        pending = {group: changes for group, changes in self.pending.items() if changes}
        blocks = {
            "server": [("redis_version", cmd.REDIS_VERSION), ("server_name", "pagination-index serve_index"),
                       ("redis_mode", "standalone"), ("process_id", os.getpid()),
                       ("tcp_port", settings.port), ("uptime_in_seconds", int(time.time() - stats.started)),
                       ("index_path", settings.path), ("event_loop", type(self.loop).__module__.split(".")[0]),
                       ("python_version", sys.version.split()[0])],
            "clients": [("connected_clients", len(self.connections)), ("maxclients", settings.maxclients)],
            "memory": [("used_memory_rss", _rss_bytes())],
            "persistence": [("aof_enabled", 1), ("appendfsync", settings.appendfsync),
                            ("pending_groups", len(pending)), ("pending_changes", sum(pending.values())),
                            ("commits", stats.commits), ("commit_failures", stats.commit_failures),
                            ("commit_seconds_last", f"{stats.commit_seconds_last:.6f}"),
                            ("commit_seconds_max", f"{stats.commit_seconds_max:.6f}"),
                            ("commit_seconds_total", f"{stats.commit_seconds_total:.6f}"),
                            ("commit_entries", settings.commit_entries), ("commit_seconds", settings.commit_seconds),
                            ("write_batches", stats.write_batches), ("syncs_everysec", stats.syncs)],
            "stats": [("total_connections_received", stats.connections_received),
                      ("total_commands_processed", stats.commands),
                      ("rejected_connections", stats.rejected_connections)],
        }
        lines = []
        for name, fields in blocks.items():
            if everything or name in sections:
                lines.append(f"# {name.capitalize()}")
                lines += [f"{key}:{value}" for key, value in fields]
                lines.append("")
        if everything or "commandstats" in sections:
            lines.append("# Commandstats")
            for name, (calls, usec, failed) in sorted(self.stats.calls.items()):
                lines.append(f"cmdstat_{name.decode()}:calls={calls},usec={usec},"
                             f"usec_per_call={usec / calls:.2f},rejected_calls=0,failed_calls={failed}")
            lines.append("")
        if everything or "keyspace" in sections:
            lines.append("# Keyspace")
            keys = self.count_keys()
            if keys:
                age = int(time.monotonic() - self.keys_counted[0])
                lines.append(f"db0:keys={keys},expires=0,avg_ttl=0,counted_seconds_ago={age}")
            lines.append("")
        return "\r\n".join(lines)

    # --- start and stop -----------------------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.settings.tls_cert_file:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.settings.tls_cert_file, self.settings.tls_key_file)
        return context

    async def serve(self, ready=None) -> None:
        """Serve until SIGTERM or SIGINT; then stop taking connections, finish the writes under way,
        sync, and close."""
        self.loop = asyncio.get_running_loop()
        self.index.loop_thread = threading.get_ident()
        Path(self.settings.path).mkdir(parents=True, exist_ok=True)
        for target, name in ((self._writer, "writer"), (self._committer, "committer")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, stop.set)
        listener = await self.loop.create_server(lambda: Connection(self), self.settings.host, self.settings.port,
                                                 ssl=self.ssl_context(), reuse_address=True, backlog=511)
        if ready is not None:
            ready(listener)
        try:
            await stop.wait()
        finally:
            self.stopping = True
            listener.close()
            await self.shutdown()

    async def shutdown(self) -> None:
        self.writes.put(None)
        self.commit_queue.put(None)
        await self.loop.run_in_executor(None, self._join_threads)
        for connection in list(self.connections):
            connection.transport.close()
        for connection in list(self.connections):
            for loader in connection.session.loads.values():
                loader.abort()
        self.readers.shutdown(wait=True)
        self._sync_everything()
        self.index.close()

    def _join_threads(self):
        for thread in self.threads:
            thread.join()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def event_loop_policy():
    """uvloop's where it is installed, else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.DefaultEventLoopPolicy()
    return uvloop.EventLoopPolicy()


def run(settings: Settings, ready=None) -> None:
    # A write batch's Python work must not hold the event loop's reads for the default 5 ms.
    sys.setswitchinterval(0.0005)
    asyncio.set_event_loop_policy(event_loop_policy())
    asyncio.run(Server(settings).serve(ready))
