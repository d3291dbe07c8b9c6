"""ToyMB-compatible endpoints, so ToyMB's own clients keep working unchanged."""

from __future__ import annotations

from flask import Response

from ..errors import BadRequest
from ..publish import check_name
from . import json_object, node
from .docs import body, errors, ref, text_answer
from .routes import PUBLISH, RouteTable

routes = RouteTable("compat")


def _text(value: str, status: int = 200) -> Response:
    return Response(value, status=status, mimetype="text/plain")


@routes.add("POST", "/sendmessage", legacy=True, role=PUBLISH, topic="body", forward=True,
            summary="ToyMB-compatible publish", doc=lambda s: {
                "requestBody": body(ref("CompatSend")),
                "responses": {"200": text_answer("ack"), **errors("413", "422")}})
def sendmessage() -> Response:
    fields = json_object()
    topic = check_name(fields.get("topicName"))
    message: dict[str, object] = {"key": fields.get("key")}
    if fields.get("id") is not None:
        message["id"] = fields["id"]
    raw = fields.get("body")
    # ToyMB's driver sends the Jackson-serialised object as a string; keep it as text.
    if isinstance(raw, str):
        message.update(body=raw, content_type="text/plain")
    else:
        message["body"] = raw
    node().publisher.publish(topic, message)
    return _text("ack")


@routes.add("POST", "/advertise", legacy=True, role=PUBLISH, topic="body", summary="ToyMB-compatible topic creation",
            doc=lambda s: {"requestBody": body(ref("CompatAdvertise")),
                           "responses": {"200": text_answer("ack"), **errors()}})
def advertise() -> Response:
    fields = json_object()
    topic = check_name(fields.get("topicName"))
    partitions = fields.get("partitions", node().settings.default_partitions)
    limit = node().settings.max_partitions
    # Checked here too: re-advertising an existing topic acks without creating anything.
    if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= limit:
        raise BadRequest(f"partitions must be between 1 and {limit}", code="bad_partitions")
    node().topic(topic, create=True, partitions=partitions)
    return _text("ack")
