"""Broker-made message ids: 128 random bits each, never handed out twice, in a forked child as well."""

from __future__ import annotations

import os

from broker.random_ids import new_ids


def test_ids_are_unique_across_calls_of_every_size() -> None:
    ids = [i for count in (1, 3, 64, 65, 200, 512, 513, 1) * 50 for i in new_ids(count)]
    assert len(ids) == len(set(ids)) and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_a_forked_child_never_hands_out_the_parents_ids() -> None:
    new_ids(1)   # the parent's pool holds unused ids now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: its next ids, to the parent
        try:
            os.write(write, "".join(new_ids(1) + new_ids(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    parents = new_ids(1) + new_ids(5)
    child_ids = [child[i:i + 32] for i in range(0, len(child), 32)]
    assert len(child_ids) == 6 and not set(child_ids) & set(parents)
