"""``GET /openapi.json``: an OpenAPI 3.0 description of every endpoint of the HTTP API.

The document is built from the node's settings, so the limits it states (body, batch, headers,
long-poll wait, partitions) are the ones this node enforces. Schemas are strict
(``additionalProperties: false`` on inputs) so a fuzzer such as schemathesis can tell a request
the broker should refuse from one it should accept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from flask import Response, jsonify

from driver.names import NAME_PATTERN

from ..config import Settings
from ..delivery.schemas import delivery_schemas
from . import node, node_routes
from .docs import NONNEG, PATH_PARAMS, SID_SCHEMA, json_answer, obj, ref
from .routes import ADMIN, CONSUME, OPEN, PUBLISH, Route, RouteTable

routes = RouteTable("openapi")
_ROLE_NOTE = {PUBLISH: " (publish role)", CONSUME: " (consume role)", ADMIN: " (admin role)"}

def schemas(s: Settings) -> dict[str, Any]:
    """The component schemas, with this node's limits."""
    headers = {"type": "object", "maxProperties": s.max_headers,
               "additionalProperties": {"type": "string", "maxLength": s.max_header_value}}
    message_in = obj({
        "id": {"type": "string", "minLength": 1, "maxLength": s.max_id},
        "key": {"type": "string", "maxLength": s.max_id, "nullable": True},
        "headers": headers,
        "body": {"description": "any JSON value; a string with a non-JSON content_type is stored as text"},
        "body_base64": {"type": "string", "format": "byte"},
        "content_type": {"type": "string", "minLength": 1, "maxLength": 200},
        "timestamp": {"type": "integer", "minimum": 0, "maximum": (1 << 53) - 1},
    }, closed=True, oneOf=[{"required": ["body"]}, {"required": ["body_base64"]}])
    coordinates = obj({"id": {"type": "string"}, "topic": ref("Name"),
                        "partition": {"type": "integer", "minimum": 0},
                        "offset": {"type": "integer", "minimum": 0},
                        "duplicate": {"type": "boolean"}}, ("id", "topic", "partition", "offset"))
    envelope = obj({
        "id": {"type": "string"}, "topic": ref("Name"),
        "partition": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0},
        "key": {"type": "string", "nullable": True},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "timestamp": {"type": "integer", "minimum": 0}, "content_type": {"type": "string"},
        "body": {}, "body_base64": {"type": "string", "format": "byte"},
        "delivery_attempt": {"type": "integer", "minimum": 1,
                             "description": "fetches and pushes: this delivery's attempt, from 1"},
    }, ("id", "topic", "partition", "offset", "key", "headers", "timestamp", "content_type"),
        oneOf=[{"required": ["body"]}, {"required": ["body_base64"]}])
    offsets_map = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
    return {
        "Name": {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 200},
        "Error": obj({"error": {"type": "string"}, "message": {"type": "string"}}, ("error", "message")),
        "Headers": headers,
        "MessageIn": message_in,
        "Batch": obj({"messages": {"type": "array", "minItems": 1, "maxItems": s.max_batch,
                                    "items": ref("MessageIn")}}, ("messages",), closed=True),
        "Coordinates": coordinates,
        "BatchCoordinates": obj({"messages": {"type": "array", "items": ref("Coordinates")}},
                                 ("messages",)),
        "Envelope": envelope,
        "TopicInfo": obj({"name": ref("Name"), "partitions": {"type": "integer", "minimum": 1},
                           "owner": {"type": "string"}, "end_offsets": offsets_map},
                          ("name", "partitions", "owner", "end_offsets")),
        "Subscription": obj({
            "mode": {"type": "string", "enum": ["push", "pull"]},
            "url": {"type": "string", "description": "push only: http(s) URL allowed by push_allow"},
            "id": SID_SCHEMA,
            "start": {"type": "string", "enum": ["latest", "earliest"]},
        }, ("mode",), closed=True),
        "Subscribed": obj({"subscriber_id": SID_SCHEMA, "topic": ref("Name"), "group": ref("Name"),
                            "mode": {"type": "string", "enum": ["push", "pull"]},
                            "partitions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "lease_ms": {"type": "integer", "minimum": 1}},
                           ("subscriber_id", "partitions")),
        "Heartbeat": obj({"subscriber_id": SID_SCHEMA, "topic": ref("Name"), "group": ref("Name"),
                           "partitions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                           "lease_ms": {"type": "integer", "minimum": 1}}, ("subscriber_id", "partitions")),
        "Committed": obj({"subscriber": SID_SCHEMA, "committed": offsets_map,
                           "acknowledged": {"type": "integer", "minimum": 0}}, ("subscriber", "committed")),
        "Fetched": obj({"messages": {"type": "array", "items": ref("Envelope")}}, ("messages",)),
        "Commit": obj({"subscriber": SID_SCHEMA,
                        "offsets": {"type": "object", "additionalProperties": NONNEG,
                                    "description": "partition number (as a string) -> offset"}},
                       ("subscriber", "offsets"), closed=True),
        "Group": obj({"topic": ref("Name"), "group": ref("Name"),
                       "subscribers": {"type": "array", "items": {"type": "object"}},
                       "assignment": {"type": "object", "additionalProperties": SID_SCHEMA},
                       "committed": offsets_map, "end_offsets": offsets_map, "lag": offsets_map,
                       "total_lag": {"type": "integer", "minimum": 0},
                       "partitions": {"type": "array", "items": obj({
                           "partition": NONNEG, "subscriber": {"type": "string", "nullable": True},
                           "committed": NONNEG, "end": NONNEG, "lag": NONNEG},
                           ("partition", "committed", "end", "lag"))}},
                      ("topic", "group", "subscribers", "assignment", "committed", "lag", "total_lag")),
        "Cluster": obj({"node": {"type": "string"}, "node_id": {"type": "string"}, "url": {"type": "string"},
                         "live": {"type": "array", "items": {"type": "string"}},
                         "nodes": {"type": "array", "items": obj({
                             "id": {"type": "string"}, "name": {"type": "string"}, "url": {"type": "string"},
                             "alive": {"type": "boolean"}, "last_heartbeat": {"type": "integer"},
                             "started": {"type": "integer"}},
                             ("id", "name", "url", "alive", "last_heartbeat"))}},
                        ("node", "nodes")),
        # ToyMB's driver sends every field, null when unset; requestor is informational.
        "CompatSend": obj({"id": {"type": "string", "minLength": 1, "maxLength": s.max_id, "nullable": True},
                            "topicName": ref("Name"), "key": {"type": "string", "maxLength": s.max_id,
                                                               "nullable": True},
                            "body": {"description": "any JSON value; a missing body is stored as null"},
                            "requestor": {"description": "ignored"}},
                           ("topicName",)),
        "CompatSubscribe": obj({"id": {**SID_SCHEMA, "nullable": True},
                                 "topicName": ref("Name"), "groupName": ref("Name"),
                                 # As in ToyMB: "push" pushes, any other type polls, and a
                                 # poller's ip and port are ignored, whatever they hold.
                                 "type": {"type": "string", "nullable": True},
                                 "ip": {"description": "push only: the receiver's host name or address"},
                                 "port": {"description": "push only: the receiver's port, 1-65535"}},
                                ("topicName", "groupName")),
        "CompatAdvertise": obj({"topicName": ref("Name"), "partitions": {
                                     "type": "integer", "minimum": 1, "maximum": s.max_partitions}},
                                ("topicName",)),
        **delivery_schemas(s),
    }


def operation(route: Route, settings: Settings) -> dict[str, Any]:
    """The OpenAPI operation of ``route``: its summary and role, path parameters, and its own doc."""
    op: dict[str, Any] = {"summary": route.summary + _ROLE_NOTE.get(route.role, "")}
    if route.role == OPEN:
        op["security"] = []
    params = [PATH_PARAMS[name] for name in re.findall(r"<([a-z_]+)>", route.rule)]
    doc: dict[str, Any] = route.doc(settings) if route.doc is not None else {"responses": {"200": json_answer({})}}
    extra: list[dict[str, Any]] = doc.get("parameters", [])
    if params or extra:
        op["parameters"] = params + extra
    op.update({k: v for k, v in doc.items() if k != "parameters"})
    return op


def paths(settings: Settings, routes: Iterable[Route]) -> dict[str, Any]:
    """Every operation of the HTTP API, from the route table."""
    out: dict[str, Any] = {}
    for route in routes:
        out.setdefault(route.openapi_path, {})[route.method.lower()] = operation(route, settings)
    return out


def spec(settings: Settings, routes: Iterable[Route]) -> dict[str, Any]:
    """The whole OpenAPI 3.0 document for a node with ``settings`` serving ``routes``."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "ToyMB broker", "version": "1",
                 "description": "A clustered HTTP message broker. Errors are JSON {error, message}."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths(settings, routes),
        "components": {"schemas": schemas(settings),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


@routes.add("GET", "/openapi.json", role=OPEN, summary="This document",
            doc=lambda s: {"responses": {"200": json_answer({"type": "object"})}})
def openapi_json() -> Response:
    return jsonify(spec(node().settings, node_routes()))
