"""Node CPU per push registration, A/B between two source trees, alternating in the same minute.

``python -m bench.register_ab OLD_TREE NEW_TREE [ROUNDS] [REGISTRATIONS]``: each tree (a checkout,
or ``git archive <commit> | tar -x -C <dir>``) serves a :class:`~bench.common.BenchNode` through
``PYTHONPATH``; the node gets an empty 100-partition topic and push subscribers are registered
four per group (the first of each group creates its offsets). The figure is the node's CPU
(user + system, ``/proc/<pid>/stat``) over the registrations, after half a second for the
dispatcher's reloads, which run after the answer; divided by the registrations.
"""

from __future__ import annotations

import os
import sys
import time

import requests

from bench.common import BenchNode
from bench.push import CountingReceiver

TICKS = os.sysconf("SC_CLK_TCK")


def node_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid``."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_per_registration(tree: str, count: int, receivers: list[CountingReceiver]) -> float:
    """Milliseconds of node CPU per push registration on a node serving the code of ``tree``."""
    os.environ["PYTHONPATH"] = tree
    with BenchNode(env={"TOYMB_PUSH_ALLOW": "127.0.0.1/32"}) as node:
        http = requests.Session()
        base = f"{node.url}/v1/topics/empty"
        http.put(base, json={"partitions": 100}, timeout=30).raise_for_status()
        for i in range(4):  # warm up: the first statements compile, the pools fill
            http.post(f"{base}/groups/warm/subscribers", json={"mode": "push", "url": receivers[i].url},
                      timeout=30).raise_for_status()
        time.sleep(1.0)
        before = node_cpu_s(node.pid)
        for k in range(count):
            http.post(f"{base}/groups/g{k // 4}/subscribers",
                      json={"mode": "push", "url": receivers[k % 4].url, "start": "earliest"},
                      timeout=30).raise_for_status()
        time.sleep(0.5)
        return (node_cpu_s(node.pid) - before) / count * 1000


def main(argv: list[str]) -> None:
    old, new = argv[0], argv[1]
    rounds = int(argv[2]) if len(argv) > 2 else 6
    count = int(argv[3]) if len(argv) > 3 else 80
    receivers = [CountingReceiver() for _ in range(4)]
    results: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(rounds):
        pairs = [("old", old), ("new", new)]
        for name, tree in pairs if r % 2 == 0 else pairs[::-1]:
            ms = cpu_per_registration(tree, count, receivers)
            results[name].append(ms)
            print(f"round {r} {name}: {ms:.2f} ms node CPU per registration", flush=True)
    for name, values in results.items():
        values.sort()
        print(f"{name}: median {values[len(values) // 2]:.2f} ms; all {' '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main(sys.argv[1:])
