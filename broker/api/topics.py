"""Topics and publishing: ``/v1/topics``."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from ..errors import BadRequest
from ..publish import check_name
from . import json_body, json_object, node

bp = Blueprint("topics", __name__, url_prefix="/v1/topics")


def describe(name: str) -> dict[str, object]:
    n = node()
    topic = n.topic(name)
    ends = n.store.end_offsets(name)
    return {"name": topic.name, "partitions": topic.partitions, "owner": n.owner_of(name),
            "end_offsets": {str(p): o for p, o in sorted(ends.items())}}


@bp.get("")
def list_topics() -> Response:
    n = node()
    return jsonify(topics=[{"name": t.name, "partitions": t.partitions} for t in n.store.list_topics()])


@bp.put("/<name>")
def create_topic(name: str) -> tuple[Response, int]:
    check_name(name)
    n = node()
    forwarded = n.forward_if_remote(name)
    if forwarded is not None:
        return forwarded
    body = json_object(required=False)
    unknown = set(body) - {"partitions"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}", code="bad_field")
    partitions = body.get("partitions", n.settings.default_partitions)
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise BadRequest("partitions must be a positive integer", code="bad_partitions")
    existed = n.store.get_topic(name) is not None
    topic = n.topic(name, create=True, partitions=partitions)
    if existed and topic.partitions != partitions:
        raise BadRequest(f"topic {name!r} exists with {topic.partitions} partitions", code="topic_exists",
                         partitions=topic.partitions)
    return jsonify(describe(name)), 200 if existed else 201


@bp.get("/<name>")
def get_topic(name: str) -> Response:
    check_name(name)
    return jsonify(describe(name))


@bp.post("/<name>/messages")
def publish(name: str) -> tuple[Response, int]:
    check_name(name)
    n = node()
    forwarded = n.forward_if_remote(name)
    if forwarded is not None:
        return forwarded
    status, body = n.publisher.publish(name, json_body())
    return jsonify(body), status
