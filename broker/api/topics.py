"""Topics and publishing: ``/v1/topics``."""

from __future__ import annotations

from flask import Response, jsonify

from ..errors import BadRequest
from ..publish import check_name
from . import json_body, json_object, node
from .docs import body, errors, json_answer, obj, ref
from .routes import ANY, PUBLISH, RouteTable

routes = RouteTable("topics")


def describe(name: str) -> dict[str, object]:
    n = node()
    topic = n.topic(name)
    ends = n.store.end_offsets(name)
    return {"name": topic.name, "partitions": topic.partitions, "owner": n.owner_of(name),
            "end_offsets": {str(p): o for p, o in sorted(ends.items())}}


@routes.add("GET", "/v1/topics", role=ANY, summary="List topics", doc=lambda s: {"responses": {
    "200": json_answer(obj({"topics": {"type": "array", "items": obj(
        {"name": ref("Name"), "partitions": {"type": "integer", "minimum": 1}}, ("name", "partitions"))}},
        ("topics",))), **errors()}})
def list_topics() -> Response:
    n = node()
    return jsonify(topics=[{"name": t.name, "partitions": t.partitions} for t in n.store.list_topics()])


@routes.add("PUT", "/v1/topics/<topic>", role=PUBLISH, topic="path", forward=True, summary="Create a topic",
            doc=lambda s: {
                "requestBody": body(obj({"partitions": {"type": "integer", "minimum": 1,
                                                        "maximum": s.max_partitions}}, closed=True,
                                        nullable=True), required=False),
                "responses": {"200": json_answer(ref("TopicInfo"), "Already existed"),
                              "201": json_answer(ref("TopicInfo"), "Created"), **errors()}})
def create_topic(topic: str) -> tuple[Response, int]:
    n = node()
    fields = json_object(required=False)
    unknown = set(fields) - {"partitions"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}", code="bad_field")
    partitions = fields.get("partitions", n.settings.default_partitions)
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise BadRequest("partitions must be a positive integer", code="bad_partitions")
    existed = n.store.get_topic(topic) is not None
    created = n.topic(topic, create=True, partitions=partitions)
    if existed and created.partitions != partitions:
        raise BadRequest(f"topic {topic!r} exists with {created.partitions} partitions", code="topic_exists",
                         partitions=created.partitions)
    return jsonify(describe(topic)), 200 if existed else 201


@routes.add("GET", "/v1/topics/<topic>", role=ANY, topic="path", summary="Describe a topic",
            doc=lambda s: {"responses": {"200": json_answer(ref("TopicInfo")), **errors("404")}})
def get_topic(topic: str) -> Response:
    check_name(topic)
    return jsonify(describe(topic))


@routes.add("POST", "/v1/topics/<topic>/messages", role=PUBLISH, topic="path", forward=True,
            summary="Publish one message or a batch", doc=lambda s: {
                "requestBody": body({"oneOf": [ref("MessageIn"), ref("Batch")]}),
                "responses": {
                    "200": json_answer({"oneOf": [ref("Coordinates"), ref("BatchCoordinates")]},
                                       "Every id was already stored: the original coordinates"),
                    "201": json_answer({"oneOf": [ref("Coordinates"), ref("BatchCoordinates")]}, "Stored"),
                    **errors("413", "422")}})
def publish(topic: str) -> tuple[Response, int]:
    status, answer = node().publisher.publish(topic, json_body())
    return jsonify(answer), status
