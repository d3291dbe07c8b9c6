"""HTTP API of consumer groups: subscribers, heartbeats, fetch, commit, group state."""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

from flask import jsonify, request

from driver.names import SUBSCRIBER_ID_PATTERN, is_subscriber_id

from ..api import json_object, node
from ..api.docs import NONNEG, SID_SCHEMA, body, errors, json_answer, obj, ref
from ..api.routes import CONSUME, RouteTable
from ..envelope import render_row
from ..errors import BadRequest, Conflict, LimitExceeded
from ..publish import check_name
from ..security import caller_may_publish
from .control import PushRequest
from .options import parse_dead_letter, parse_filter, parse_format, parse_overlap, parse_secret
from .push import check_http_url

if TYPE_CHECKING:
    from . import Delivery

routes = RouteTable("delivery")

# ASCII digits only: int() would also take "٣", " 3" and "3_0", and raise on 5,000 digits.
_DIGITS = re.compile(r"[0-9]{1,18}")
_REGISTER_FIELDS = {"mode", "url", "id", "start", "filter", "dead_letter", "format", "secret", "new_secret",
                    "secret_overlap_ms", "signing"}
_PUSH_ONLY = ("format", "secret", "new_secret", "secret_overlap_ms", "signing")


def delivery() -> Delivery:
    return node().delivery


def check_subscriber_id(value: Any) -> str:
    if not is_subscriber_id(value):
        raise BadRequest(f"subscriber id must match {SUBSCRIBER_ID_PATTERN}", code="bad_subscriber_id")
    return value


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw):
        raise BadRequest(f"{name} must be a whole number in ASCII digits", code="bad_parameter", parameter=name)
    value = int(raw)
    if value < low:
        raise BadRequest(f"{name} must be at least {low}", code="bad_parameter", parameter=name)
    if value > high:
        raise LimitExceeded(f"{name} must be at most {high}", limit=name, max=high)
    return value


def parse_offsets(raw: Any, topic: str, partitions: int) -> dict[int, int]:
    """``{"17": 42, ...}`` (partition number as a string -> offset), checked against the topic."""
    if not isinstance(raw, dict):
        raise BadRequest('offsets must be an object like {"17": 42}', code="bad_offsets")
    offsets: dict[int, int] = {}
    for key, value in raw.items():
        if not (isinstance(key, str) and _DIGITS.fullmatch(key) and int(key) < partitions):
            raise BadRequest(f"{str(key)[:40]!r} is not a partition of {topic!r}", code="bad_offsets")
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
            raise BadRequest(f"offset of partition {key} must be a non-negative integer", code="bad_offsets")
        offsets[int(key)] = value
    return offsets


def _member(topic: str, group: str, sid: Any, mode: str) -> Any:
    """The subscriber ``sid`` of this group, checked to be a ``mode`` subscriber."""
    sub = delivery().subscriber(check_subscriber_id(sid))
    if (sub.topic, sub.group) != (topic, group):
        raise Conflict(f"subscriber {sub.id!r} is not in group {group!r} of topic {topic!r}",
                       code="wrong_group")
    if sub.mode != mode:
        raise Conflict(f"subscriber {sub.id!r} is a {sub.mode} subscriber", code="wrong_mode")
    return sub


@routes.add("POST", "/v1/topics/<topic>/groups/<group>/subscribers", role=CONSUME, topic="path", forward=True,
            summary="Register a push or pull subscriber", doc=lambda s: {
                "requestBody": body(ref("Subscription")),
                "responses": {"201": json_answer(ref("Subscribed"), "Registered"), **errors("404", "409")}})
def register(topic: str, group: str) -> Any:
    check_name(group, "group")
    body = json_object()
    unknown = set(body) - _REGISTER_FIELDS
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}", code="bad_field")
    mode = body.get("mode")
    if mode not in ("push", "pull"):
        raise BadRequest('mode must be "push" or "pull"', code="bad_mode")
    url = body.get("url")
    if mode == "push":
        url = check_http_url(url)
        node().check_push_url(url)
    elif url is not None:
        raise BadRequest("a pull subscriber has no url", code="bad_url")
    start = body.get("start", "latest")
    if start not in ("latest", "earliest"):
        raise BadRequest('start must be "latest" or "earliest"', code="bad_start")
    sid = body.get("id")
    sid = uuid.uuid4().hex if sid is None else check_subscriber_id(sid)
    filter_text, dead_letter = parse_filter(body.get("filter")), parse_dead_letter(body.get("dead_letter"))
    asked = None
    if mode == "push":
        for flag in ("new_secret", "signing"):
            if body.get(flag) not in (None, True, False):
                raise BadRequest(f"{flag} must be true or false", code="bad_secret")
        if body.get("signing") is False and (body.get("secret") is not None or body.get("new_secret")):
            raise BadRequest("an unsigned subscriber has no secret", code="bad_secret")
        asked = PushRequest(parse_format(body.get("format")),
                            None if body.get("secret") is None else parse_secret(body.get("secret")),
                            body.get("new_secret") is True, parse_overlap(body.get("secret_overlap_ms")),
                            body.get("signing") is not False)
    elif any(body.get(name) is not None for name in _PUSH_ONLY):
        raise BadRequest(f"{', '.join(_PUSH_ONLY)} are for push subscribers", code="bad_field")
    d = delivery()
    create = caller_may_publish(topic)
    d.topics.get(topic, create=create)
    # Before joining: the first push must already be filtered and signed.
    d.control.set_policy(topic, group, filter_text, dead_letter)
    # The dispatcher reloads the group once, after the join (Delivery.register tells it): told of
    # the options too, it reloaded twice per registration, the first time for nothing.
    secret = d.control.set_push(topic, group, sid, asked, reload=False) if asked is not None else None
    registered = False
    try:
        # A consume-only token may join a topic, never create one (PUT of the topic is refused to it too).
        sub, partitions = d.register(topic, group, sid, mode=mode, url=url, start=start, create=create)
        registered = True
    finally:
        if asked is not None and not registered:
            d.dispatcher.invalidate(topic, group)  # the options of a member may have changed all the same
    answer: dict[str, Any] = {"subscriber_id": sub.id, "topic": topic, "group": group, "mode": sub.mode,
                              "partitions": partitions, "lease_ms": node().settings.subscriber_lease_ms}
    if secret is not None:
        answer["secret"] = secret  # shown this once; never logged
    return jsonify(answer), 201


@routes.add("DELETE", "/v1/topics/<topic>/groups/<group>/subscribers/<sid>", role=CONSUME, topic="path",
            forward=True, summary="Remove a subscriber", doc=lambda s: {"responses": {
                "200": json_answer(obj({"deleted": SID_SCHEMA}, ("deleted",)), "Removed"), **errors("404")}})
def unregister(topic: str, group: str, sid: str) -> Any:
    check_name(group, "group")
    check_subscriber_id(sid)
    delivery().unregister(topic, group, sid)
    return jsonify(deleted=sid)


@routes.add("POST", "/v1/subscribers/<sid>/heartbeat", role=CONSUME, topic="subscriber", forward=True,
            summary="Keep a subscriber's lease alive", doc=lambda s: {"responses": {
                "200": json_answer(ref("Heartbeat")), **errors("404")}})
def heartbeat(sid: str) -> Any:
    d = delivery()
    sub = d.subscriber(check_subscriber_id(sid))
    sub = d.touch(sub, always=True)
    return jsonify(subscriber_id=sub.id, topic=sub.topic, group=sub.group,
                   partitions=d.groups.partitions_of(sid), lease_ms=node().settings.subscriber_lease_ms)


@routes.add("GET", "/v1/topics/<topic>/groups/<group>/messages", role=CONSUME, topic="path", forward=True,
            summary="Long-poll fetch", doc=lambda s: {
                "parameters": [
                    {"name": "subscriber", "in": "query", "required": True, "schema": SID_SCHEMA},
                    {"name": "max", "in": "query", "schema": {"type": "integer", "minimum": 1,
                                                              "maximum": s.max_fetch}},
                    {"name": "wait_ms", "in": "query", "schema": {**NONNEG, "maximum": s.max_wait_ms}}],
                "responses": {"200": json_answer(ref("Fetched")), **errors("404", "409")}})
def fetch(topic: str, group: str) -> Any:
    check_name(group, "group")
    settings = node().settings
    limit = _int_arg("max", min(100, settings.max_fetch), 1, settings.max_fetch)
    wait_ms = _int_arg("wait_ms", 0, 0, settings.max_wait_ms)
    d = delivery()
    node().topic(topic)
    sub = d.touch(_member(topic, group, request.args.get("subscriber"), "pull"))
    rows = d.fetcher.fetch(topic, group, sub.id, limit, wait_ms)
    return jsonify(messages=[{**render_row(r), "delivery_attempt": d.fetcher.attempt_of(topic, group, r.partition,
                                                                                        r.offset)}
                             for r in rows])


@routes.add("POST", "/v1/topics/<topic>/groups/<group>/offsets", role=CONSUME, topic="path", forward=True,
            summary="Commit offsets", doc=lambda s: {
                "requestBody": body(ref("Commit")),
                "responses": {"200": json_answer(ref("Committed")), **errors("404", "409")}})
def commit(topic: str, group: str) -> Any:
    check_name(group, "group")
    body = json_object()
    unknown = set(body) - {"subscriber", "offsets"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}", code="bad_field")
    offsets = parse_offsets(body.get("offsets"), topic, node().topic(topic).partitions)
    d = delivery()
    sub = d.touch(_member(topic, group, body.get("subscriber"), "pull"))
    acknowledged = d.fetcher.commit(topic, group, sub.id, offsets)
    return jsonify(subscriber=sub.id, committed={str(p): o for p, o in sorted(offsets.items())},
                   acknowledged=acknowledged)


@routes.add("GET", "/v1/topics/<topic>/groups/<group>", role=CONSUME, topic="path", forward=True,
            summary="A group: subscribers, assignment, committed offsets, lag", doc=lambda s: {
                "responses": {"200": json_answer(ref("Group")), **errors("404")}})
def describe(topic: str, group: str) -> Any:
    check_name(group, "group")
    return jsonify(delivery().describe(topic, group))
