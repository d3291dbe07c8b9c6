"""HTTP API of delivery control: seek (admin), pull nack and extend, push secret rotation."""

from __future__ import annotations

import logging
from typing import Any

from flask import g, jsonify, request

from ..api import json_object, node
from ..api.docs import body, errors, json_answer, ref
from ..api.routes import ADMIN, CONSUME, RouteTable
from ..errors import BadRequest
from ..publish import check_name
from .api import _member, check_subscriber_id, delivery, parse_offsets
from .control import SEEK_TARGETS
from .options import parse_overlap, parse_secret
from .pull import MAX_EXTEND_MS

routes = RouteTable("delivery-control")
log = logging.getLogger(__name__)

_MAX_POSITIONS = 1000
_MAX_TIMESTAMP = (1 << 53) - 1


def _fields(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(body) - allowed
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))[:200]}", code="bad_field")


def _whole(value: Any, what: str, high: int = (1 << 63) - 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise BadRequest(f"{what} must be a whole number from 0 to {high}", code="bad_parameter")
    return value


def _positions(raw: Any, partitions: int) -> dict[int, set[int]]:
    """``[{"partition": p, "offset": o}, ...]`` -> partition -> the offsets named."""
    if not isinstance(raw, list) or not 0 < len(raw) <= _MAX_POSITIONS:
        raise BadRequest(f'messages must be a list of 1 to {_MAX_POSITIONS} {{"partition", "offset"}}',
                         code="bad_messages")
    out: dict[int, set[int]] = {}
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"partition", "offset"}:
            raise BadRequest('each message is {"partition": p, "offset": o}', code="bad_messages")
        p = _whole(item["partition"], "partition", partitions - 1)
        out.setdefault(p, set()).add(_whole(item["offset"], "offset"))
    return out


def _settling(topic: str, group: str, allowed: set[str]) -> tuple[dict[str, Any], dict[int, set[int]], Any]:
    """A nack or extend request: its body, the messages it names per partition, its pull subscriber."""
    check_name(group, "group")
    payload = json_object()
    _fields(payload, allowed)
    positions = _positions(payload.get("messages"), node().topic(topic).partitions)
    sub = delivery().touch(_member(topic, group, payload.get("subscriber"), "pull"))
    return payload, positions, sub


@routes.add("POST", "/v1/topics/<topic>/groups/<group>/nack", role=CONSUME, topic="path", forward=True,
            summary="Give fetched messages back for redelivery now (pull)", doc=lambda s: {
                "requestBody": body(ref("Nack")),
                "responses": {"200": json_answer(ref("Rewound")), **errors("404", "409")}})
def nack(topic: str, group: str) -> Any:
    _, positions, sub = _settling(topic, group, {"subscriber", "messages"})
    rewound = delivery().fetcher.nack(topic, group, sub.id, positions)
    return jsonify(subscriber=sub.id, rewound=rewound)


@routes.add("POST", "/v1/topics/<topic>/groups/<group>/extend", role=CONSUME, topic="path", forward=True,
            summary="Push out the redelivery deadline of fetched messages (pull)", doc=lambda s: {
                "requestBody": body(ref("Extend")),
                "responses": {"200": json_answer(ref("Extended")), **errors("404", "409")}})
def extend(topic: str, group: str) -> Any:
    payload, positions, sub = _settling(topic, group, {"subscriber", "messages", "extend_ms"})
    extend_ms = _whole(payload.get("extend_ms", node().settings.redelivery_ms), "extend_ms", MAX_EXTEND_MS)
    extended = delivery().fetcher.extend(topic, group, sub.id, positions, extend_ms)
    return jsonify(subscriber=sub.id, extended=extended, extend_ms=extend_ms)


@routes.add("POST", "/v1/topics/<topic>/groups/<group>/seek", role=ADMIN, topic="path", forward=True,
            summary="Move a group's committed offsets: to a time, earliest, latest or offsets", doc=lambda s: {
                "requestBody": body(ref("Seek")),
                "responses": {"200": json_answer(ref("Sought")), **errors("404")}})
def seek(topic: str, group: str) -> Any:
    check_name(group, "group")
    payload = json_object()
    _fields(payload, {"to", "timestamp", "offsets", "partitions"})
    count = node().topic(topic).partitions
    given = [name for name in ("to", "timestamp", "offsets") if payload.get(name) is not None]
    if len(given) != 1:
        raise BadRequest("give exactly one of to, timestamp, offsets", code="bad_seek")
    to = payload.get("to")
    if to is not None and to not in SEEK_TARGETS:
        raise BadRequest('to must be "earliest" or "latest"', code="bad_seek")
    timestamp = payload.get("timestamp")
    if timestamp is not None:
        timestamp = _whole(timestamp, "timestamp", _MAX_TIMESTAMP)
    offsets = None if payload.get("offsets") is None else parse_offsets(payload["offsets"], topic, count)
    partitions = payload.get("partitions")
    if partitions is not None:
        if not isinstance(partitions, list) or not 0 < len(partitions) <= count:
            raise BadRequest(f"partitions must be a list of 1 to {count} partition numbers", code="bad_partition")
        partitions = [_whole(p, "partition", count - 1) for p in partitions]
    moved = delivery().control.seek(topic, group, to=to, timestamp_ms=timestamp, offsets=offsets,
                                    partitions=partitions)
    grant = g.get("toymb_grant")
    log.warning("SEEK %s/%s by %s (%s): %d partitions moved to %s", topic, group,
                grant.name if grant is not None else request.remote_addr, given[0], len(moved),
                dict(list(moved.items())[:20]))
    return jsonify(topic=topic, group=group, offsets={str(p): o for p, o in sorted(moved.items())})


@routes.add("POST", "/v1/topics/<topic>/groups/<group>/subscribers/<sid>/secret", role=CONSUME, topic="path",
            forward=True, summary="Rotate a push subscriber's signing secret", doc=lambda s: {
                "requestBody": body(ref("Rotate")),
                "responses": {"201": json_answer(ref("Rotated"), "Rotated"), **errors("404")}})
def rotate(topic: str, group: str, sid: str) -> Any:
    check_name(group, "group")
    check_subscriber_id(sid)
    payload = json_object()
    _fields(payload, {"secret", "overlap_ms"})
    secret = None if payload.get("secret") is None else parse_secret(payload["secret"])
    overlap = parse_overlap(payload.get("overlap_ms"))
    node().topic(topic)
    reveal, previous_until = delivery().control.rotate(topic, group, sid, secret, overlap)
    log.info("push subscriber %s of %s/%s: secret rotated, previous valid for %d ms", sid, topic, group, overlap)
    answer: dict[str, Any] = {"subscriber_id": sid, "previous_valid_until_ms": previous_until}
    if reveal is not None:
        answer["secret"] = reveal  # shown this once; never logged
    return jsonify(answer), 201
