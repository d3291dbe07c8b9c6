"""Sticky, balanced partition assignment: a pure function, so its properties are easy to test."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign(partition_count: int, members: Iterable[str], current: Mapping[int, str]) -> dict[int, str]:
    """Give each of ``partition_count`` partitions to exactly one of ``members``.

    The result is balanced (member loads differ by at most one) and sticky: a partition stays with
    its current holder whenever the holder is still a member and keeping it does not unbalance the
    group, so a join or a leave moves as few partitions as balance allows. The answer depends only
    on the arguments (members are ordered by id), so every node computes the same one.

    Returns an empty dict when there are no members.
    """
    ids = sorted(set(members))
    if not ids or partition_count <= 0:
        return {}
    base, extra = divmod(partition_count, len(ids))
    kept: dict[str, list[int]] = {m: [] for m in ids}
    for partition in range(partition_count):
        holder = current.get(partition)
        if holder in kept:
            kept[holder].append(partition)
    # The members that already hold the most get the `extra` larger quotas: that moves the least.
    by_load = sorted(ids, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_load)}
    result: dict[int, str] = {}
    for member in ids:
        for partition in kept[member][: quota[member]]:
            result[partition] = member
    free = iter(p for p in range(partition_count) if p not in result)
    for member in ids:
        missing = quota[member] - sum(1 for p in kept[member][: quota[member]])
        for _ in range(missing):
            result[next(free)] = member
    return result


def partitions_by_member(assignment: Mapping[int, str]) -> dict[str, list[int]]:
    """Invert an assignment: the sorted partitions of each member."""
    out: dict[str, list[int]] = {}
    for partition, member in sorted(assignment.items()):
        out.setdefault(member, []).append(partition)
    return out
