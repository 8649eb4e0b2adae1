"""The commands serve_index answers, with Redis 7.0's arities, argument rules, replies and error texts
(src/t_zset.c, src/server.c, src/networking.c), over the files index.

A key is a group, a member an entry's member, a score its sort key as integer microseconds since
the epoch (pagination_index.sortkeys), as the Redis backend stores them. Where this store cannot be
Redis (a score that is no sort key: fractional, or outside the years 1..9999; a key or member that is
not UTF-8; BYLEX ranges), the command gets an error reply and changes nothing.

A handler parses its arguments on the event loop and returns:
- bytes: the reply (reads: the files index is read straight from the loop, without locks);
- a Write: run by the server's writer thread against a WriteState, which batches the writes of every
  connection into one append and one sync of the log (Redis's group commit of its AOF);
- a Deferred: a slower read (a pass over a group's file, a listing of every group) run in a thread,
  or a wait on one of the server's threads (ZCOMMIT, ZLOAD, ZREPLACE).
A connection runs its commands in order: it waits for a Write's or Deferred's reply before the next.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from pagination_index.sortkeys import micros_sort_key, sort_key_micros

# The scores a sort key can be: microseconds of the years 1..9999.
MIN_SCORE = sort_key_micros("0001-01-01T00:00:00.000000Z")
MAX_SCORE = sort_key_micros("9999-12-31T23:59:59.999999Z")

SYNTAX = "ERR syntax error"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
NOT_RANGE = "ERR min or max is not a float"
NOT_SORT_KEY = ("ERR score is not a sort key: a whole number of microseconds since the epoch, "
                "within the years 1 to 9999")
NOT_TEXT = "ERR keys and members must be UTF-8 text"
TOO_LONG = "ERR members longer than 65535 bytes cannot be stored"


class CommandError(Exception):
    """An error reply (the message, with its code) for the command being parsed."""


# --- argument parsing, as Redis's string2ll / strtod checks ------------------------------------------
_INTEGER = re.compile(rb"0|-?[1-9][0-9]*")
_FLOAT = re.compile(rb"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)", re.IGNORECASE)
_HEX_FLOAT = re.compile(rb"[+-]?0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?[0-9]+)?", re.IGNORECASE)
_NONZERO_DIGIT = re.compile(rb"[1-9]")


def parse_integer(data: bytes, error: str = NOT_INTEGER) -> int:
    """A long long as Redis's string2ll reads it: no sign but '-', no leading zeros or spaces."""
    if not _INTEGER.fullmatch(data):
        raise CommandError(error)
    value = int(data)
    if not -(2**63) <= value < 2**63:
        raise CommandError(error)
    return value


def _strtod(data: bytes) -> float | None:
    """The number strtod(3) reads from all of `data` (decimal, hex, inf), None when it stops early."""
    if _FLOAT.fullmatch(data):
        return float(data)
    if _HEX_FLOAT.fullmatch(data):
        text = data.decode()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        return sign * float.fromhex(body if "p" in body.lower() else body + "p0")
    return None


def parse_float(data: bytes) -> float:
    """A double as Redis's getDoubleFromObject reads it: all of strtod, no leading space, no NaN, and
    no overflow or underflow to zero (ERANGE)."""
    value = _strtod(data)
    if value is None or math.isnan(value):
        raise CommandError(NOT_FLOAT)
    if math.isinf(value) and b"inf" not in data.lower():
        raise CommandError(NOT_FLOAT)  # 1e400
    if value == 0 and _NONZERO_DIGIT.search(data.lower().split(b"e")[0].split(b"p")[0]):
        raise CommandError(NOT_FLOAT)  # 1e-400
    return value


def parse_score(data: bytes) -> int:
    """A ZADD score: a double that is a sort key's microseconds."""
    return score_micros(parse_float(data))


def score_micros(value: float) -> int:
    if math.isinf(value) or value != math.floor(value) or not MIN_SCORE <= value <= MAX_SCORE:
        raise CommandError(NOT_SORT_KEY)
    return int(value)


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a score range (zslParseRange): a value, exclusive with a '(' before it."""

    value: float
    exclusive: bool


def parse_bound(data: bytes) -> Bound:
    exclusive = data.startswith(b"(")
    text = data[1:] if exclusive else data
    # strtod skips leading white space and reads "" as 0 (Redis checks only that it read to the end).
    text = text.lstrip(b" \t\n\v\f\r")
    value = 0.0 if not text else _strtod(text)
    if value is None or math.isnan(value):
        raise CommandError(NOT_RANGE)
    return Bound(value, exclusive)


def text(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise CommandError(NOT_TEXT) from None


def member_text(data: bytes) -> str:
    if len(data) > 0xFFFF:
        raise CommandError(TOO_LONG)
    return text(data)


def micros(sort_key: str) -> int:
    return sort_key_micros(sort_key)


# --- what handlers return besides bytes ----------------------------------------------------------------
class Write:
    """A write, run by the writer thread: `groups` says which members it reads (looked up in one pass
    per group before the batch runs), run() changes the state and returns the reply."""

    def members(self) -> dict[str, set[str]]:
        return {}

    def run(self, state: "WriteState", reply) -> bytes:
        raise NotImplementedError


@dataclass
class Deferred:
    """Work off the event loop: `call()` runs in `pool` ("reads": the reading threads; "commits": the
    committer thread; "writes": the writer thread, in order with the writes) and returns the reply."""

    call: Callable[[], bytes]
    pool: str = "reads"


class WriteState:
    """The entries a batch of writes touches, as the writes before have left them: each command's reply
    is computed as Redis would compute it in that order, and the batch's net effect is then applied to
    the files index in one apply_net (one append per group, one sync)."""

    def __init__(self, index):
        self.index = index
        self.known: dict[str, dict[str, int | None]] = {}
        self.changed: dict[str, dict[str, int | None]] = {}

    def look_up(self, wanted: dict[str, set[str]]) -> None:
        for group, members in wanted.items():
            known = self.known.setdefault(group, {})
            missing = members - known.keys()
            if missing:
                found = self.index.member_sort_keys(group, missing)
                for member in missing:
                    known[member] = micros(found[member]) if member in found else None

    def get(self, group: str, member: str) -> int | None:
        known = self.known.setdefault(group, {})
        if member not in known:
            self.look_up({group: {member}})
        return known[member]

    def set(self, group: str, member: str, score: int | None) -> None:
        self.known.setdefault(group, {})[member] = score
        self.changed.setdefault(group, {})[member] = score

    def flush(self) -> list[str]:
        """Apply what changed to the index; the groups written."""
        adds = {group: [(member, micros_sort_key(score)) for member, score in members.items() if score is not None]
                for group, members in self.changed.items()}
        removes = {group: [(member, None) for member, score in members.items() if score is None]
                   for group, members in self.changed.items()}
        groups = list(self.changed)
        self.changed = {}
        if groups:
            self.index.apply_net(adds, removes)
        return groups

    def forget(self, group: str | None = None) -> None:
        """After a change made around the state (a replace, a clear): look again."""
        if group is None:
            self.known.clear()
        else:
            self.known.pop(group, None)


# --- sorted-set writes -----------------------------------------------------------------------------------
@dataclass
class ZAdd(Write):
    group: str
    pairs: list[tuple[int | float, str]]  # (score, member); with INCR, the increment (any whole number)
    nx: bool = False
    xx: bool = False
    gt: bool = False
    lt: bool = False
    ch: bool = False
    incr: bool = False

    def members(self):
        return {self.group: {member for _, member in self.pairs}}

    def run(self, state, reply):
        added = updated = processed = 0
        score = None
        for given, member in self.pairs:
            current = state.get(self.group, member)
            if current is None:
                if self.xx:
                    continue
                score = score_micros(float(given)) if self.incr else given
                state.set(self.group, member, score)
                added += 1
                processed += 1
                continue
            if self.nx:
                continue
            # In doubles, as Redis adds: past 2**53 a sum rounds to the nearest score a double holds.
            score = score_micros(float(current) + float(given)) if self.incr else given
            if (self.lt and score >= current) or (self.gt and score <= current):
                continue
            processed += 1
            if score != current:
                state.set(self.group, member, score)
                updated += 1
        if self.incr:
            return reply.double(score) if processed else reply.NULL
        return reply.integer(added + updated if self.ch else added)


@dataclass
class ZRem(Write):
    group: str
    members_: list[str]
    scores: list[int] | None = None  # ZREMIFSCORE: remove only while the score is this one

    def members(self):
        return {self.group: set(self.members_)}

    def run(self, state, reply):
        removed = 0
        for position, member in enumerate(self.members_):
            current = state.get(self.group, member)
            if current is not None and (self.scores is None or self.scores[position] == current):
                state.set(self.group, member, None)
                removed += 1
        return reply.integer(removed)


def zadd(session, args):
    position = 2
    flags = {"nx": False, "xx": False, "gt": False, "lt": False, "ch": False, "incr": False}
    while position < len(args) and args[position].lower().decode("latin-1") in flags:
        flags[args[position].lower().decode("latin-1")] = True
        position += 1
    rest = args[position:]
    if not rest or len(rest) % 2:
        raise CommandError(SYNTAX)
    if flags["nx"] and flags["xx"]:
        raise CommandError("ERR XX and NX options at the same time are not compatible")
    if (flags["gt"] and flags["nx"]) or (flags["lt"] and flags["nx"]) or (flags["gt"] and flags["lt"]):
        raise CommandError("ERR GT, LT, and/or NX options at the same time are not compatible")
    if flags["incr"] and len(rest) > 2:
        raise CommandError("ERR INCR option supports a single increment-element pair")
    numbers = [parse_float(rest[i]) for i in range(0, len(rest), 2)]  # every score first, as Redis does
    if flags["incr"]:
        if math.isinf(numbers[0]) or numbers[0] != math.floor(numbers[0]):
            raise CommandError(NOT_SORT_KEY)
        scores = [int(numbers[0])]
    else:
        scores = [score_micros(number) for number in numbers]
    group = text(args[1])
    return ZAdd(group, [(score, member_text(rest[i + 1])) for score, i in zip(scores, range(0, len(rest), 2))],
                **flags)


def zrem(session, args):
    return ZRem(text(args[1]), [member_text(member) for member in args[2:]])


def zremifscore(session, args):
    """ZREMIFSCORE key score member [score member ...]: ZREM of each member whose score is still the one
    given (the stream's remove of an item that a later insert may have moved); the number removed."""
    rest = args[2:]
    if len(rest) % 2:
        raise CommandError(SYNTAX)
    scores = [parse_score(rest[i]) for i in range(0, len(rest), 2)]
    members = [member_text(rest[i]) for i in range(1, len(rest), 2)]
    return ZRem(text(args[1]), members, scores)


# --- sorted-set reads ------------------------------------------------------------------------------------
def zcard(session, args):
    return session.reply.integer(session.index.count(text(args[1])))


def _entries(index, group: str, first: int, last: int) -> list[tuple[bytes, float]]:
    """Index ranks first..last (newest first) as (member, score) pairs."""
    return index.scored_range(group, first, last + 1)


def _reply_entries(reply, pairs, withscores: bool) -> bytes:
    if withscores:
        return reply.scored(pairs)
    return reply.bulks([member for member, _ in pairs])


def _rank_range(session, group: str, start: int, stop: int, reverse: bool, withscores: bool) -> bytes:
    """ZRANGE by rank (zrangeGenericCommand); the index's rank 0 is the highest score, ZREVRANGE's 0."""
    pairs = session.index.rank_range(group, start, stop, reverse)
    if not pairs:
        return session.reply.EMPTY_ARRAY
    return _reply_entries(session.reply, pairs, withscores)


def zrevrange(session, args):
    """ZREVRANGE key start stop [WITHSCORES] (the hot path: a deep page's boundary) without the general
    option loop; anything else through it, for its errors."""
    if len(args) == 4 or (len(args) == 5 and args[4].lower() == b"withscores"):
        return _rank_range(session, text(args[1]), parse_integer(args[2]), parse_integer(args[3]), True, len(args) == 5)
    return zrange_generic(session, args, "rank", True)


def _newer(index, group: str, value: float, inclusive: bool) -> int:
    """How many entries have a score above `value` (at or above it, `inclusive`). Scores are whole
    numbers, so the threshold is one: score > floor(value), or score > ceil(value) - 1."""
    if math.isinf(value):
        return index.count(group) if value < 0 else 0
    threshold = math.ceil(value) - 1 if inclusive else math.floor(value)
    if threshold < MIN_SCORE:
        return index.count(group)
    if threshold >= MAX_SCORE:
        return 0
    return index.count_newer(group, micros_sort_key(threshold))


def _score_window(index, group: str, low: Bound, high: Bound) -> tuple[int, int]:
    """Index ranks [first, end) of the entries with low <= score <= high (each end exclusive as marked)."""
    first = _newer(index, group, high.value, high.exclusive)
    end = _newer(index, group, low.value, not low.exclusive)
    return first, max(end, first)


def _score_range(session, group: str, low: Bound, high: Bound, reverse: bool, withscores: bool,
                 offset: int, limit: int) -> bytes:
    """ZRANGEBYSCORE / ZREVRANGEBYSCORE / ZRANGE BYSCORE (genericZrangebyscoreCommand): a negative
    offset gives nothing, a negative count everything after the offset."""
    reply, index = session.reply, session.index
    first, end = _score_window(index, group, low, high)
    if offset < 0 or first >= end:
        return reply.EMPTY_ARRAY
    size = end - first - offset
    if limit >= 0:
        size = min(size, limit)
    if size <= 0:
        return reply.EMPTY_ARRAY
    if reverse:
        pairs = _entries(index, group, first + offset, first + offset + size - 1)
    else:
        pairs = _entries(index, group, end - offset - size, end - offset - 1)[::-1]
    return _reply_entries(reply, pairs, withscores)


def zrange_generic(session, args, rangetype: str | None, reverse: bool | None):
    """zrangeGenericCommand: options are read first (a syntax error before any other), then LIMIT and
    WITHSCORES are checked against the range's type, then the range itself."""
    withscores, offset, limit = False, 0, -1
    position = 4
    while position < len(args):
        option = args[position].lower()
        left = len(args) - position - 1
        if option == b"withscores":
            withscores = True
        elif option == b"limit" and left >= 2:
            offset = parse_integer(args[position + 1])
            limit = parse_integer(args[position + 2])
            position += 2
        elif reverse is None and option == b"rev":
            reverse = True
        elif rangetype is None and option == b"bylex":
            rangetype = "lex"
        elif rangetype is None and option == b"byscore":
            rangetype = "score"
        else:
            raise CommandError(SYNTAX)
        position += 1
    reverse = bool(reverse)
    rangetype = rangetype or "rank"
    if limit != -1 and rangetype == "rank":
        raise CommandError("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    if withscores and rangetype == "lex":
        raise CommandError("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    group = text(args[1])
    if rangetype == "rank":
        return _rank_range(session, group, parse_integer(args[2]), parse_integer(args[3]), reverse, withscores)
    if rangetype == "lex":
        low, high = (args[3], args[2]) if reverse else (args[2], args[3])
        if not all(_lex_item(item) for item in (low, high)):
            raise CommandError("ERR min or max not valid string range item")
        raise CommandError("ERR BYLEX ranges are not supported by this server")
    low, high = (args[3], args[2]) if reverse else (args[2], args[3])
    return _score_range(session, group, parse_bound(low), parse_bound(high), reverse, withscores, offset, limit)


def _lex_item(item: bytes) -> bool:
    """zslParseLexRangeItem: "+", "-", or "(" / "[" before a member."""
    return item in (b"+", b"-") or item[:1] in (b"(", b"[")


def zcount(session, args):
    low, high = parse_bound(args[2]), parse_bound(args[3])
    first, end = _score_window(session.index, text(args[1]), low, high)
    return session.reply.integer(end - first)


def zscore(session, args):
    group, member = text(args[1]), member_text(args[2])

    def look():
        found = session.index.member_sort_keys(group, [member])
        return session.reply.double(float(micros(found[member]))) if member in found else session.reply.NULL

    return Deferred(look)  # one pass over the group's file


def zmscore(session, args):
    group, members = text(args[1]), [member_text(member) for member in args[2:]]

    def look():
        found = session.index.member_sort_keys(group, members)
        return session.reply.array([session.reply.double(float(micros(found[member]))) if member in found
                                    else session.reply.NULL for member in members])

    return Deferred(look)


# --- the design's and this server's own -----------------------------------------------------------------
def zcommit(session, args):
    """ZCOMMIT key: fold the group's staged changes (its log) into its file now; 1, or 0 when there
    were none."""
    group = text(args[1])
    return Deferred(lambda: session.reply.integer(session.server.commit(group)), pool="commits")


def zpending(session, args):
    """ZPENDING key: the group's changes staged and not yet committed. ZPENDING: the groups that have any."""
    if len(args) > 2:
        raise CommandError("ERR wrong number of arguments for 'zpending' command")
    if len(args) == 2:
        return session.reply.integer(session.index.pending_changes(text(args[1])))
    return Deferred(lambda: session.reply.bulks([group.encode() for group in session.index.pending_groups()]))


def zload(session, args):
    """ZLOAD key score member [score member ...]: stage entries of the group's next content on this
    connection (written to a new file as they come); ZREPLACE publishes them. The number of pairs loaded
    so far for the key."""
    rest = args[2:]
    if len(rest) % 2:
        raise CommandError(SYNTAX)
    entries = [(member_text(rest[i + 1]), micros_sort_key(parse_score(rest[i]))) for i in range(0, len(rest), 2)]
    return session.server.load(session, text(args[1]), entries)


def zreplace(session, args):
    """ZREPLACE key pairs: the group's entries become what this connection has loaded for it with ZLOAD
    (nothing: the group empties), atomically; `pairs` must be the number of pairs loaded (a load cut
    short by a lost connection is refused, not published)."""
    return session.server.replace(session, text(args[1]), parse_integer(args[2]))


def delete(session, args):
    groups = [text(key) for key in args[1:]]

    def run():
        return session.reply.integer(session.server.delete(groups))

    return Deferred(run, pool="writes")


def flushdb(session, args):
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        raise CommandError(SYNTAX)

    def run():
        session.server.clear()
        return session.reply.OK

    return Deferred(run, pool="writes")


def exists(session, args):
    return session.reply.integer(sum(1 for key in args[1:] if session.index.count(text(key)) > 0))


def type_(session, args):
    return session.reply.simple("zset" if session.index.count(text(args[1])) > 0 else "none")


def _glob(pattern: bytes) -> re.Pattern:
    """Redis's stringmatchlen() glob as a regular expression: * ? [abc] [^a-z] and \\ escapes."""
    out, position = [], 0
    while position < len(pattern):
        char = pattern[position:position + 1]
        if char == b"*":
            out.append(b".*")
        elif char == b"?":
            out.append(b".")
        elif char == b"\\" and position + 1 < len(pattern):
            position += 1
            out.append(re.escape(pattern[position:position + 1]))
        elif char == b"[":
            end = pattern.find(b"]", position + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = pattern[position + 1:end]
                negate = body.startswith(b"^")
                body = body[1:] if negate else body
                out.append(b"[" + (b"^" if negate else b"") + body.replace(b"\\", b"\\\\") + b"]")
                position = end
        else:
            out.append(re.escape(char))
        position += 1
    return re.compile(b"".join(out), re.DOTALL)


def scan(session, args):
    """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: every group in one reply, cursor 0 (Redis
    may answer so; SCAN's guarantee, each key present throughout is returned, holds)."""
    parse_integer(args[1], "ERR invalid cursor")
    pattern, kind = None, None
    position = 2
    while position < len(args):
        option, left = args[position].lower(), len(args) - position - 1
        if option == b"match" and left >= 1:
            pattern = _glob(args[position + 1])
        elif option == b"count" and left >= 1:
            if parse_integer(args[position + 1]) < 1:
                raise CommandError(SYNTAX)
        elif option == b"type" and left >= 1:
            kind = args[position + 1].lower()
        else:
            raise CommandError(SYNTAX)
        position += 2
    cursor = int(args[1])

    def run():
        if cursor != 0 or kind not in (None, b"zset"):
            keys = []
        else:
            keys = [group.encode() for group in session.index.groups()]
        if pattern is not None:
            keys = [key for key in keys if pattern.fullmatch(key)]
        return session.reply.array([session.reply.bulk(b"0"), session.reply.bulks(keys)])

    return Deferred(run)


# --- connection and server ----------------------------------------------------------------------------
def ping(session, args):
    if len(args) > 2:
        raise CommandError("ERR wrong number of arguments for 'ping' command")
    return session.reply.PONG if len(args) == 1 else session.reply.bulk(args[1])


def echo(session, args):
    return session.reply.bulk(args[1])


def select(session, args):
    number = parse_integer(args[1])
    if number != 0:
        raise CommandError("ERR DB index is out of range")
    return session.reply.OK


def auth(session, args):
    if len(args) > 3:
        raise CommandError(SYNTAX)
    user, password = (args[1], args[2]) if len(args) == 3 else (b"default", args[1])
    session.authenticate(user, password)
    return session.reply.OK


def hello(session, args):
    position, version = 1, None
    if len(args) >= 2:
        version = parse_integer(args[1], "ERR Protocol version is not an integer or out of range")
        position = 2
        if version not in (2, 3):
            raise CommandError("NOPROTO unsupported protocol version")
    user = password = name = None
    while position < len(args):
        option, left = args[position].lower(), len(args) - 1 - position
        if option == b"auth" and left >= 2:
            user, password = args[position + 1], args[position + 2]
            position += 3
        elif option == b"setname" and left >= 1:
            name = args[position + 1]
            position += 2
        else:
            raise CommandError(f"ERR Syntax error in HELLO option '{args[position].decode(errors='replace')}'")
    if user is not None:
        session.authenticate(user, password)
    if not session.authenticated:
        raise CommandError("NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                           "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                           "select the RESP protocol version at the same time")
    if name is not None:
        session.set_name(name)
    if version is not None:
        session.set_protocol(version)
    reply = session.reply
    return reply.map([
        (reply.bulk(b"server"), reply.bulk(b"redis")),
        (reply.bulk(b"version"), reply.bulk(REDIS_VERSION.encode())),
        (reply.bulk(b"proto"), reply.integer(reply.version)),
        (reply.bulk(b"id"), reply.integer(session.id)),
        (reply.bulk(b"mode"), reply.bulk(b"standalone")),
        (reply.bulk(b"role"), reply.bulk(b"master")),
        (reply.bulk(b"modules"), reply.EMPTY_ARRAY),
    ])


# The Redis release whose replies this server gives (HELLO, INFO's redis_version: what clients test).
REDIS_VERSION = "7.0.0"


def client(session, args):
    sub = args[1].lower()
    reply = session.reply
    if sub == b"setname" and len(args) == 3:
        session.set_name(args[2])
        return reply.OK
    if sub == b"getname" and len(args) == 2:
        return reply.bulk(session.name) if session.name else reply.NULL
    if sub == b"id" and len(args) == 2:
        return reply.integer(session.id)
    if sub == b"setinfo" and len(args) == 4:
        attribute = args[2].lower()
        if attribute not in (b"lib-name", b"lib-ver"):
            raise CommandError(f"ERR Unrecognized option '{args[2].decode(errors='replace')}'")
        session.library[attribute.decode()] = args[3]
        return reply.OK
    if sub in (b"setname", b"getname", b"id", b"setinfo"):
        raise CommandError(f"ERR wrong number of arguments for 'client|{sub.decode()}' command")
    raise CommandError(f"ERR unknown subcommand '{args[1].decode(errors='replace')}'. Try CLIENT HELP.")


def command(session, args):
    reply = session.reply
    if len(args) == 1:
        return reply.array([command_info(reply, name, spec) for name, spec in COMMANDS.items()])
    sub = args[1].lower()
    if sub == b"count" and len(args) == 2:
        return reply.integer(len(COMMANDS))
    if sub == b"info":
        wanted = [name.lower() for name in args[2:]] or list(COMMANDS)
        return reply.array([command_info(reply, name, COMMANDS[name]) if name in COMMANDS else reply.NULL
                            for name in wanted])
    if sub == b"docs":
        wanted = [name.lower() for name in args[2:] if name.lower() in COMMANDS] or list(COMMANDS)
        return reply.map([(reply.bulk(name), reply.map([
            (reply.bulk(b"summary"), reply.bulk(COMMANDS[name].summary.encode())),
            (reply.bulk(b"since"), reply.bulk(b"1.0.0")),
            (reply.bulk(b"group"), reply.bulk(COMMANDS[name].group.encode())),
        ])) for name in wanted])
    raise CommandError(f"ERR unknown subcommand '{args[1].decode(errors='replace')}'. Try COMMAND HELP.")


def command_info(reply, name: bytes, spec: "Spec") -> bytes:
    """COMMAND's entry: name, arity, flags, first key, last key, key step, ACL categories, tips, key
    specs, subcommands."""
    keyed = spec.group == "sorted_set" and name not in (b"zpending",)
    flags = [b"write"] if spec.kind == "write" else [b"readonly"]
    return reply.array([reply.bulk(name), reply.integer(spec.arity),
                        reply.array([reply.simple(flag.decode()) for flag in flags]),
                        reply.integer(1 if keyed else 0), reply.integer(1 if keyed else 0),
                        reply.integer(1 if keyed else 0), reply.EMPTY_ARRAY, reply.EMPTY_ARRAY,
                        reply.EMPTY_ARRAY, reply.EMPTY_ARRAY])


def config(session, args):
    sub = args[1].lower()
    if sub != b"get":
        raise CommandError(f"ERR unknown subcommand '{args[1].decode(errors='replace')}'. Try CONFIG HELP.")
    if len(args) < 3:
        raise CommandError("ERR wrong number of arguments for 'config|get' command")
    values = session.server.config()
    pairs = []
    for pattern in args[2:]:
        matcher = _glob(pattern.lower())
        pairs += [(name, value) for name, value in values.items() if matcher.fullmatch(name.encode())
                  and (name, value) not in pairs]
    reply = session.reply
    return reply.map([(reply.bulk(name.encode()), reply.bulk(value.encode())) for name, value in pairs])


def info(session, args):
    sections = [section.lower().decode(errors="replace") for section in args[1:]]
    return Deferred(lambda: session.reply.text(session.server.info(sections)))


def dbsize(session, args):
    return Deferred(lambda: session.reply.integer(len(session.index.groups())))


@dataclass(frozen=True)
class Spec:
    handler: Callable
    arity: int  # Redis's: N exactly, -N at least N (the command's name counts)
    kind: str = "read"  # "read", "write" (a Write or a writes Deferred), "connection" (never queued)
    group: str = "sorted_set"
    summary: str = ""
    multi: bool = True  # may be queued in MULTI
    noauth: bool = False  # answered before AUTH


COMMANDS: dict[bytes, Spec] = {
    b"zadd": Spec(zadd, -4, "write", summary="Adds members, or updates their scores (sort keys as microseconds)"),
    b"zrem": Spec(zrem, -3, "write", summary="Removes members"),
    b"zremifscore": Spec(zremifscore, -4, "write", summary="Removes members whose score is still the one given"),
    b"zcard": Spec(zcard, 2, summary="The number of members"),
    b"zrange": Spec(lambda s, a: zrange_generic(s, a, None, None), -4,
                    summary="Members in a range of ranks or scores"),
    b"zrevrange": Spec(zrevrange, -4,
                       summary="Members in a range of ranks, highest score first"),
    b"zrangebyscore": Spec(lambda s, a: zrange_generic(s, a, "score", False), -4,
                           summary="Members in a range of scores"),
    b"zrevrangebyscore": Spec(lambda s, a: zrange_generic(s, a, "score", True), -4,
                              summary="Members in a range of scores, highest first"),
    b"zcount": Spec(zcount, 4, summary="The number of members in a range of scores"),
    b"zscore": Spec(zscore, 3, summary="A member's score (one pass over the group's file)"),
    b"zmscore": Spec(zmscore, -3, summary="Members' scores (one pass over the group's file)"),
    b"zcommit": Spec(zcommit, 2, "write", summary="Applies the group's staged changes to its file now"),
    b"zpending": Spec(zpending, -1, summary="Staged changes of a group, or the groups that have any"),
    b"zload": Spec(zload, -3, "write", multi=False, summary="Loads entries of a group's next content"),
    b"zreplace": Spec(zreplace, 3, "write", multi=False, summary="Replaces a group with what ZLOAD loaded"),
    b"del": Spec(delete, -2, "write", group="generic", summary="Deletes groups"),
    b"unlink": Spec(delete, -2, "write", group="generic", summary="Deletes groups"),
    b"exists": Spec(exists, -2, group="generic", summary="How many of the keys exist"),
    b"type": Spec(type_, 2, group="generic", summary="zset, or none"),
    b"scan": Spec(scan, -2, group="generic", summary="Every group (in one reply)"),
    b"dbsize": Spec(dbsize, 1, group="server", summary="The number of groups (a listing of every group)"),
    b"flushdb": Spec(flushdb, -1, "write", group="server", summary="Deletes every group"),
    b"ping": Spec(ping, -1, "connection", group="connection", summary="PONG"),
    b"echo": Spec(echo, 2, "connection", group="connection", summary="Its argument"),
    b"select": Spec(select, 2, "connection", group="connection", summary="Database 0, the only one"),
    b"auth": Spec(auth, -2, "connection", group="connection", noauth=True, multi=False, summary="Authenticates"),
    b"hello": Spec(hello, -1, "connection", group="connection", noauth=True, multi=False,
                   summary="Switches protocol (2 or 3), authenticates, names the connection"),
    b"client": Spec(client, -2, "connection", group="connection", summary="SETNAME, GETNAME, SETINFO, ID"),
    b"command": Spec(command, -1, "connection", group="server", summary="COMMAND, COUNT, INFO, DOCS"),
    b"config": Spec(config, -2, "connection", group="server", summary="CONFIG GET"),
    b"info": Spec(info, -1, "connection", group="server", summary="Clients, commands, keys, pending changes, commits"),
}
