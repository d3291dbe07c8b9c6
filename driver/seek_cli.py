"""``toymb seek``: move a group's committed offsets from the command line (admin role)."""

from __future__ import annotations

import datetime as dt
import json

import click

from .client import Template
from .errors import ToyMBError


def _timestamp(value: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    if value.isdigit():
        return int(value)
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("give milliseconds since the epoch or an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _offset(value: str) -> tuple[int, int]:
    partition, sep, offset = value.partition("=")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise click.BadParameter(f"{value!r}: write PARTITION=OFFSET, e.g. 3=120")
    return int(partition), int(offset)


@click.command()
@click.argument("topic")
@click.argument("group")
@click.option("--to", "to", type=click.Choice(["earliest", "latest"]), help="the earliest or latest offset")
@click.option("--timestamp", help="the first message at or after this time (ms since the epoch, or ISO 8601)")
@click.option("--offset", "offsets", multiple=True, metavar="P=O", help="an explicit offset (repeatable)")
@click.option("--partition", "partitions", type=click.IntRange(0), multiple=True,
              help="only this partition (repeatable; default all)")
@click.option("--url", envvar="TOYMB_URLS", show_envvar=True, help="node URLs, comma-separated")
def seek(topic: str, group: str, to: str | None, timestamp: str | None, offsets: tuple[str, ...],
         partitions: tuple[int, ...], url: str | None) -> None:
    """Move GROUP's committed offsets on TOPIC, so its subscribers get messages again (or skip them).

    Give one of --to, --timestamp or --offset. Needs an admin token in TOYMB_TOKEN when the node
    has tokens. Prints the new offsets as JSON.
    """
    if sum(1 for given in (to, timestamp, offsets) if given) != 1:
        raise click.UsageError("give exactly one of --to, --timestamp, --offset")
    explicit = dict(_offset(v) for v in offsets) if offsets else None
    try:
        with Template(url) as template:
            moved = template.seek(topic, group, to=to,  # type: ignore[arg-type]
                                  timestamp=_timestamp(timestamp) if timestamp else None,
                                  offsets=explicit, partitions=list(partitions) or None)
    except ToyMBError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps({str(p): o for p, o in sorted(moved.items())}))
