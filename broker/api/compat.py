"""ToyMB-compatible endpoints, so ToyMB's own clients keep working unchanged."""

from __future__ import annotations

from flask import Blueprint, Response

from ..errors import BadRequest
from ..publish import check_name
from . import json_object, node

bp = Blueprint("compat", __name__)


def _text(value: str, status: int = 200) -> Response:
    return Response(value, status=status, mimetype="text/plain")


@bp.post("/sendmessage")
def sendmessage() -> Response:
    body = json_object()
    topic = check_name(body.get("topicName"))
    n = node()
    forwarded = n.forward_if_remote(topic)
    if forwarded is not None:
        return forwarded[0]
    message: dict[str, object] = {"key": body.get("key")}
    if body.get("id") is not None:
        message["id"] = body["id"]
    raw = body.get("body")
    # ToyMB's driver sends the Jackson-serialised object as a string; keep it as text.
    if isinstance(raw, str):
        message.update(body=raw, content_type="text/plain")
    else:
        message["body"] = raw
    n.publisher.publish(topic, message)
    return _text("ack")


@bp.post("/advertise")
def advertise() -> Response:
    body = json_object()
    topic = check_name(body.get("topicName"))
    partitions = body.get("partitions", node().settings.default_partitions)
    limit = node().settings.max_partitions
    # Checked here too: re-advertising an existing topic acks without creating anything.
    if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= limit:
        raise BadRequest(f"partitions must be between 1 and {limit}", code="bad_partitions")
    node().topic(topic, create=True, partitions=partitions)
    return _text("ack")
