"""Replies in RESP2 and RESP3, as Redis 7.0 writes them (src/networking.c: addReply*).

A connection speaks RESP2 until HELLO 3; then nulls, doubles, maps and verbatim strings have types of
their own. Scores are doubles: Redis 7.0 formats them with "%.17g" (and "inf"/"-inf").
"""
from __future__ import annotations

import math

CRLF = b"\r\n"


def format_score(score: float) -> bytes:
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    return b"%.17g" % score


class Resp2:
    version = 2
    OK = b"+OK\r\n"
    QUEUED = b"+QUEUED\r\n"
    PONG = b"+PONG\r\n"
    NULL = b"$-1\r\n"  # a missing bulk string: ZSCORE of no member, CLIENT GETNAME without a name
    NULL_ARRAY = b"*-1\r\n"  # EXEC of a transaction that did not run
    EMPTY_ARRAY = b"*0\r\n"

    @staticmethod
    def error(message: str) -> bytes:
        """An error reply; the message's first word is its code (ERR, WRONGPASS, NOAUTH, ...)."""
        return b"-" + message.replace("\r", " ").replace("\n", " ").encode() + CRLF

    @staticmethod
    def simple(text: str) -> bytes:
        return b"+" + text.encode() + CRLF

    @staticmethod
    def integer(number: int) -> bytes:
        return b":%d\r\n" % number

    @staticmethod
    def bulk(data: bytes) -> bytes:
        return b"$%d\r\n%b\r\n" % (len(data), data)

    @classmethod
    def bulks(cls, items) -> bytes:
        """An array of bulk strings."""
        return b"*%d\r\n" % len(items) + b"".join(b"$%d\r\n%b\r\n" % (len(item), item) for item in items)

    @staticmethod
    def array(replies: list[bytes]) -> bytes:
        """An array of replies already encoded."""
        return b"*%d\r\n" % len(replies) + b"".join(replies)

    @classmethod
    def double(cls, score: float) -> bytes:
        return cls.bulk(format_score(score))

    @classmethod
    def scored(cls, pairs: list[tuple[bytes, float]]) -> bytes:
        """ZRANGE ... WITHSCORES: member, score, member, score ... (RESP3: [member, score] pairs)."""
        out = [b"*%d\r\n" % (2 * len(pairs))]
        for member, score in pairs:
            text = format_score(score)
            out.append(b"$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(member), member, len(text), text))
        return b"".join(out)

    @classmethod
    def map(cls, pairs: list[tuple[bytes, bytes]]) -> bytes:
        """Keys and values already encoded: a flat array in RESP2."""
        return b"*%d\r\n" % (2 * len(pairs)) + b"".join(key + value for key, value in pairs)

    @classmethod
    def text(cls, text: str) -> bytes:
        """A long text (INFO): a bulk string (RESP3: a verbatim string)."""
        return cls.bulk(text.encode())


class Resp3(Resp2):
    version = 3
    NULL = b"_\r\n"
    NULL_ARRAY = b"_\r\n"

    @staticmethod
    def double(score: float) -> bytes:
        return b"," + format_score(score) + CRLF

    @classmethod
    def scored(cls, pairs: list[tuple[bytes, float]]) -> bytes:
        out = [b"*%d\r\n" % len(pairs)]
        for member, score in pairs:
            out.append(b"*2\r\n$%d\r\n%b\r\n,%b\r\n" % (len(member), member, format_score(score)))
        return b"".join(out)

    @classmethod
    def map(cls, pairs: list[tuple[bytes, bytes]]) -> bytes:
        return b"%%%d\r\n" % len(pairs) + b"".join(key + value for key, value in pairs)

    @classmethod
    def text(cls, text: str) -> bytes:
        data = b"txt:" + text.encode()
        return b"=%d\r\n%b\r\n" % (len(data), data)
