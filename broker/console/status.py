"""``toymb status [--watch]``: the console's overview in a terminal.

It reads ``GET /console/api/overview`` of one node (the first of ``TOYMB_URLS``, or ``--url``) with
the token of ``TOYMB_TOKEN`` (or ``--token``), and prints the cluster, topics, groups (stuck
partitions marked ``!``), journal and bridges as plain tables. ``--watch`` redraws every
``--interval`` seconds and adds publish rates from one look to the next.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click
import requests

MAX_LAGGING_SHOWN = 5


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Left-aligned columns, two spaces apart."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def _rates(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, float]:
    if before is None:
        return {}
    seconds = (now["checked_ms"] - before["checked_ms"]) / 1000.0
    if seconds <= 0:
        return {}
    ends = {t["name"]: t["end"] for t in before["topics"]}
    return {t["name"]: max(0, t["end"] - ends[t["name"]]) / seconds for t in now["topics"] if t["name"] in ends}


def _push(group: dict[str, Any]) -> str:
    push = group.get("push")
    if not push:
        return "not dispatched" if "push" in group["modes"] else "-"
    parts = [f"{len(push['failing'])} failing" if push["failing"] else "",
             f"{len(push['backoff'])} backing off" if push["backoff"] else "",
             *(f"{sid[:8]} unreachable {s['unreachable_s']}s" for sid, s in push["subscribers"].items()
               if s["unreachable_s"] is not None)]
    return f"{', '.join(p for p in parts if p) or 'ok'} ({group['dispatched_by']})"


def readable_ms(ms: int | None) -> str:
    """A duration as people read it: ``850 ms``, ``4.2 s``, ``9 min 8 s``, ``3 h 5 min``; None: ``left``."""
    if ms is None:
        return "left (stopped cleanly)"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def render(o: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """The overview ``o`` as text; rates need the look ``before`` it."""
    c = o["cluster"]
    at = datetime.fromtimestamp(o["checked_ms"] / 1000).strftime("%H:%M:%S")
    owned: dict[str, int] = {}
    for t in o["topics"]:
        owned[t["owner"]] = owned.get(t["owner"], 0) + 1
    lines = [f"ToyMB: {len(c['live'])} of {len(c['nodes'])} nodes live, answered by {c['answered_by']} at {at}", ""]
    lines += table(("NODE", "ALIVE", "LEASE AGE", "TOPICS", "URL"), [
        (n["name"], "yes" if n["alive"] else "NO", readable_ms(n["lease_age_ms"]), owned.get(n["name"], 0), n["url"])
        for n in c["nodes"]])
    rates = _rates(o, before)
    lines += [""] + table(("TOPIC", "PARTITIONS", "OWNER", "EPOCH", "END", "RATE/S", "DEAD LETTERS"), [
        (t["name"], t["partitions"], t["owner"], t["epoch"], t["end"],
         f"{rates[t['name']]:.1f}" if t["name"] in rates else "-", t["dlq_depth"] if t["dlq"] else "-")
        for t in o["topics"]])
    lines += [""] + table(("GROUP", "MODES", "LAG", "STUCK", "PUSH", "LAGGING PARTITIONS (! stuck)"), [
        (f"{g['topic']}/{g['group']}", ",".join(g["modes"]) or "none", g["total_lag"], g["stuck"] or "",
         _push(g), " ".join(f"p{p['partition']}={p['lag']}{'!' if p['stuck'] else ''}"
                            for p in g["lagging"][:MAX_LAGGING_SHOWN])
         + (f" +{g['lagging_partitions'] - MAX_LAGGING_SHOWN}" if g["lagging_partitions"] > MAX_LAGGING_SHOWN else ""))
        for g in o["groups"]])
    j = o["journal"]
    health = j.get("health")
    job = "no metrics address configured"
    if health is not None:
        job = (f"up, {health.get('rows', 0)} rows, lag {health.get('lag', 0)}" if health["reachable"]
               and not health.get("error") else f"{health['url']}: {health.get('error') or 'down'}")
    lines += ["", f"JOURNAL: {j['journaled']} journaled, lag {j['lag']}; job: {job}"]
    bridges = [(f"{e['endpoint']}/{b['name']}", b["kind"], b["state"],
                " ".join(f"{k}={v}" for k, v in b["counts"].items() if v)) for e in o["bridges"] if e["reachable"]
               for b in e["bridges"]]
    bridges += [(e["endpoint"], "", "UNREACHABLE", e["error"]) for e in o["bridges"] if not e["reachable"]]
    if bridges:
        lines += [""] + table(("BRIDGE", "KIND", "STATE", "COUNTS"), bridges)
    return "\n".join(lines) + "\n"


def fetch(url: str, token: str | None) -> dict[str, Any]:
    """The overview of the node at ``url``.

    Raises:
        click.ClickException: the node cannot be reached, or refuses (the node's message is shown).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        answer = requests.get(url.rstrip("/") + "/console/api/overview", headers=headers, timeout=10)
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach {url}: {type(exc).__name__}") from None
    try:
        body = answer.json()
    except ValueError:
        body = {}
    if answer.status_code != 200:
        message = body.get("message") if isinstance(body, dict) else None
        raise click.ClickException(f"{url} answered {answer.status_code}: {message or answer.reason}")
    return body  # type: ignore[no-any-return]


def _first_url(urls: str) -> str:
    return next((u.strip() for u in urls.split(",") if u.strip()), "http://127.0.0.1:8080")


@click.command("status")
@click.option("--url", envvar="TOYMB_URLS", default="http://127.0.0.1:8080", show_default=True,
              help="the node to ask (the first of TOYMB_URLS)")
@click.option("--token", envvar="TOYMB_TOKEN", help="bearer token with the consume or admin role [TOYMB_TOKEN]")
@click.option("--watch", is_flag=True, help="redraw until interrupted")
@click.option("--interval", type=click.FloatRange(0.5, 3600), default=2.0, show_default=True,
              help="seconds between two looks with --watch")
@click.option("--count", type=click.IntRange(1), help="with --watch: stop after this many looks")
def status(url: str, token: str | None, watch: bool, interval: float, count: int | None) -> None:
    """The cluster, topics, groups' lag, journal and bridges at a glance (the console's overview)."""
    node = _first_url(url)
    if not watch:
        click.echo(render(fetch(node, token)), nl=False)
        return
    before: dict[str, Any] | None = None
    looks = 0
    try:
        while count is None or looks < count:
            now = fetch(node, token)
            if sys.stdout.isatty():
                click.echo("\x1b[H\x1b[2J", nl=False)  # clear the screen between two looks
            click.echo(render(now, before))
            before, looks = now, looks + 1
            if count is None or looks < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
