"""A seeded random sequence of commands sent to serve_index and to a real redis-server side by side; every
reply must be equal (tests/pagination_index/test_resp.py runs a short one, bench.resp 20,000 operations).

Both servers are read through raw sockets and hiredis's reply parser, so a reply is compared as sent
(types, nulls, doubles in RESP3, error texts), not as redis-py would turn it into Python values.
ZCOMMIT goes to serve_index only: on Redis a write is never staged, so it is a no-op there.

The sequence is what the index's clients send: a few keys, members that are uuid hex and short texts
(unicode among them), scores that are sort keys' microseconds (few distinct ones, so ties are many,
negative, beyond 2**52), re-adds, ZADD's flags, ranks negative and out of range, score ranges with
exclusive and infinite bounds and LIMIT, wrong arities, syntax errors, unknown commands, MULTI/EXEC,
and a switch to RESP3 and back. Not in it, as they differ by design (docs/backends-resp.md): scores that
are no sort key (fractional, infinite, past the year 9999), which serve_index refuses.
"""
from __future__ import annotations

import random
import socket
import uuid
from dataclasses import dataclass

import hiredis

KEYS = [b"KETTLE-2000", b"KETTLE-2000/5", "Café-茶".encode(), b"empty-key"]
SCORES = [0, -3, 1, 7, 1_629_896_400_123_456, 1_629_896_400_123_457, 4_503_599_627_370_497,
          9_007_199_254_740_993, -62_135_596_800_000_000]


def _members(rng: random.Random) -> list[bytes]:
    hexes = [uuid.UUID(int=rng.getrandbits(128)).hex.encode() for _ in range(24)]
    texts = [b"a", b"b", b"ab", b"B", b"m1", b"m10", b"m2", "ü-member".encode(), "茶".encode(), b"", b"0" * 16]
    return hexes + texts


def pack(args: list[bytes]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
    return b"".join(out)


class RawClient:
    """One connection, one command at a time, replies parsed by hiredis (errors kept as text)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.reader = hiredis.Reader()

    def call(self, args: list[bytes]):
        self.sock.sendall(pack(args))
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return _comparable(reply)
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            self.reader.feed(data)

    def close(self):
        self.sock.close()


def _comparable(reply):
    if isinstance(reply, hiredis.ReplyError):
        return ("error", str(reply))
    if isinstance(reply, list):
        return [_comparable(item) for item in reply]
    if isinstance(reply, dict):
        return {_comparable(key): _comparable(value) for key, value in reply.items()}
    return reply


@dataclass
class Mismatch:
    step: int
    command: list[bytes]
    ours: object
    redis: object


class Sequence:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.members = _members(self.rng)
        self.resp3 = False

    def score(self) -> bytes:
        rng = self.rng
        value = rng.choice(SCORES)
        choice = rng.random()
        if choice < 0.05:
            return rng.choice([b"abc", b"1e400", b"nan", b" 1", b"1 ", b"", b"0x10", b"1_0"])
        if choice < 0.1:
            return b"%de0" % value if value >= 0 else b"%d" % value  # another spelling of the same double
        return b"%d" % value

    def rank(self) -> bytes:
        return b"%d" % self.rng.choice([0, 1, 2, 3, 5, 10, 40, 100, -1, -2, -5, -40, -100, 2**62])

    def bound(self) -> bytes:
        rng = self.rng
        value = rng.choice([b"-inf", b"+inf", b"inf", b"%d" % rng.choice(SCORES), b"%d.5" % rng.choice(SCORES[:4])])
        return (b"(" if rng.random() < 0.3 and b"inf" not in value else b"") + value

    def pairs(self, count: int) -> list[bytes]:
        out = []
        for _ in range(count):
            out += [self.score(), self.rng.choice(self.members)]
        return out

    def command(self) -> list[bytes]:
        rng = self.rng
        key = rng.choice(KEYS)
        kind = rng.random()
        if kind < 0.33:
            flags = [flag for flag in (b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR") if rng.random() < 0.08]
            pairs = self.pairs(rng.choice([1, 1, 1, 2, 3, 8]))
            if b"INCR" in flags:  # small increments: a sum past the year 9999 is refused by design
                pairs[0] = rng.choice([b"0", b"1", b"-3", b"7", b"abc"])
            return [b"ZADD", key, *flags, *pairs]
        if kind < 0.45:
            return [b"ZREM", key, *(rng.choice(self.members) for _ in range(rng.choice([1, 1, 2, 4])))]
        if kind < 0.55:
            options = [option for option in (b"REV", b"WITHSCORES") if rng.random() < 0.5]
            if rng.random() < 0.05:
                options.append(rng.choice([b"LIMIT", b"FOO", b"BYLEX"]))
            rng.shuffle(options)
            return [b"ZRANGE", key, self.rank(), self.rank(), *options]
        if kind < 0.63:
            return [b"ZREVRANGE", key, self.rank(), self.rank(), *([b"WITHSCORES"] if rng.random() < 0.6 else [])]
        if kind < 0.68:
            limit = [b"LIMIT", b"%d" % rng.choice([0, 1, 3, -1]), b"%d" % rng.choice([1, 2, 10, -1, 0])] \
                if rng.random() < 0.5 else []
            scores = [b"WITHSCORES"] if rng.random() < 0.5 else []
            return rng.choice([
                [b"ZRANGEBYSCORE", key, self.bound(), self.bound(), *scores, *limit],
                [b"ZREVRANGEBYSCORE", key, self.bound(), self.bound(), *scores, *limit],
                [b"ZRANGE", key, self.bound(), self.bound(), b"BYSCORE", *([b"REV"] if rng.random() < 0.5 else []),
                 *scores, *limit],
            ])
        if kind < 0.72:
            return [b"ZCOUNT", key, self.bound(), self.bound()]
        if kind < 0.8:
            return [b"ZCARD", key]
        if kind < 0.88:
            return [b"ZSCORE", key, rng.choice(self.members)]
        if kind < 0.91:
            return [b"ZCOMMIT", key]
        if kind < 0.93:
            return rng.choice([[b"PING"], [b"PING", b"hello"], [b"ECHO", b"x y"], [b"SELECT", b"0"]])
        if kind < 0.97:
            return rng.choice([[b"ZADD", key, b"1"], [b"ZCARD"], [b"ZCARD", key, key], [b"ZSCORE", key],
                               [b"ZRANGE", key, b"0"], [b"ZADD", key, b"NX", b"XX", b"1", b"a"],
                               [b"ZADD", key, b"GT", b"LT", b"1", b"a"], [b"ZADD", key, b"INCR", b"1", b"a", b"2", b"b"],
                               [b"ZRANGE", key, b"x", b"1"], [b"ZREVRANGE", key, b"0", b"1", b"LIMIT", b"0", b"1"],
                               [b"ZREM", key], [b"NOSUCHCOMMAND", b"arg"], [b"PING", b"a", b"b"],
                               [b"SELECT", b"16"], [b"ZCOUNT", key, b"x", b"1"], [b"HELLO", b"4"]])
        if kind < 0.985:
            self.resp3 = not self.resp3
            return [b"HELLO", b"3" if self.resp3 else b"2"]
        return [b"MULTI"]

    def transaction(self) -> list[list[bytes]]:
        return [self.command_in_multi() for _ in range(self.rng.randrange(1, 5))] + [[b"EXEC"]]

    def command_in_multi(self) -> list[bytes]:
        while True:
            command = self.command()
            if command[0] not in (b"MULTI", b"HELLO", b"ZCOMMIT"):
                return command


def differences(ours_port: int, redis_port: int, operations: int, seed: int = 44, limit: int = 10):
    """Run `operations` commands on both; (the mismatches, at most `limit`, and the number compared)."""
    sequence = Sequence(seed)
    ours, theirs = RawClient(ours_port), RawClient(redis_port)
    mismatches: list[Mismatch] = []
    compared = 0
    try:
        while compared < operations and len(mismatches) < limit:
            command = sequence.command()
            batch = [command] + (sequence.transaction() if command == [b"MULTI"] else [])
            for step in batch:
                ours_reply = ours.call(step)
                if step[0] == b"ZCOMMIT":
                    if not isinstance(ours_reply, int):
                        mismatches.append(Mismatch(compared, step, ours_reply, "an integer"))
                    compared += 1
                    continue
                redis_reply = theirs.call(step)
                if step[0] == b"HELLO" and not isinstance(redis_reply, tuple):
                    redis_reply, ours_reply = _hello(redis_reply), _hello(ours_reply)
                if ours_reply != redis_reply:
                    mismatches.append(Mismatch(compared, step, ours_reply, redis_reply))
                compared += 1
        # Every key whole at the end, on top of every reply on the way.
        for key in KEYS:
            step = [b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]
            ours_reply, redis_reply = ours.call(step), theirs.call(step)
            if ours_reply != redis_reply:
                mismatches.append(Mismatch(compared, step, ours_reply, redis_reply))
    finally:
        ours.close()
        theirs.close()
    return mismatches, compared


def _hello(reply):
    """HELLO's map without what differs between two servers by nature (version, client id)."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {key: value for key, value in reply.items() if key not in (b"version", b"id")}
