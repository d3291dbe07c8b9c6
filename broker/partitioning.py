"""Kafka's default partitioner, so a key lands on the same partition number as in Kafka."""

from __future__ import annotations

import functools
import struct

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
# Keys whose partitions are remembered (per partition count). A service publishes with the same
# keys again and again (an order, a customer), and hashing one in Python cost more than decoding
# its message; at most this many keys of at most max_id characters: a few MiB.
KEY_CACHE_SIZE = 16384
# Unpacking every 4-byte word at once is a third cheaper than slicing the bytes word by word, and
# this runs once per message on the publish path. Structs for the usual lengths are made once.
_WORDS = [struct.Struct(f"<{n}I") for n in range(65)]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit MurmurHash2 with Kafka's seed."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    count = length >> 2
    words = _WORDS[count].unpack_from(data) if count < len(_WORDS) else struct.unpack_from(f"<{count}I", data)
    for k in words:
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) ^ ((k * _M) & _MASK)) & _MASK
    tail = count << 2
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """``(murmur2(utf8(key)) & 0x7fffffff) % partitions``, as Kafka's default partitioner."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


@functools.lru_cache(maxsize=KEY_CACHE_SIZE)
def key_partition(key: str, partitions: int) -> int:
    """:func:`partition_for` of a message key, remembered for the keys used last.

    Not for ids: a broker-made id is never seen again, and would only push keys out.
    """
    return partition_for(key, partitions)
