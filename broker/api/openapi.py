"""``GET /openapi.json``: an OpenAPI 3.0 description of every endpoint of the HTTP API.

The document is built from the node's settings, so the limits it states (body, batch, headers,
long-poll wait, partitions) are the ones this node enforces. Schemas are strict
(``additionalProperties: false`` on inputs) so a fuzzer such as schemathesis can tell a request
the broker should refuse from one it should accept.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from driver.names import NAME_PATTERN, SUBSCRIBER_ID_PATTERN

from . import node

bp = Blueprint("openapi", __name__)

JSON = "application/json"
TEXT = "text/plain"
ERROR_STATUSES = {
    "400": "Malformed input, or a limit passed (the body names it)",
    "401": "Missing or unknown bearer token",
    "403": "The token lacks the role or topic; or a non-loopback client of a node without tokens",
    "404": "No such topic, group or subscriber",
    "409": "The request conflicts with the current state",
    "413": "Body larger than max_body / max_request",
    "422": "An enricher rejected the message",
    "503": "The store or the topic's owner cannot be reached now",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = False,
         **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _text(description: str) -> dict[str, Any]:
    return {"description": description, "content": {TEXT: {"schema": {"type": "string"}}}}


def _errors(*codes: str) -> dict[str, Any]:
    # 401/403 can answer any guarded operation; 503 any that touches the store or forwards.
    wanted = sorted(set(codes) | {"400", "401", "403", "503"})
    return {code: {"description": ERROR_STATUSES[code], "content": {JSON: {"schema": _ref("Error")}}}
            for code in wanted}


def _name_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": _ref("Name")}


NONNEG = {"type": "integer", "minimum": 0}
SID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": SUBSCRIBER_ID_PATTERN}


def _sid_param(name: str = "sid") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": "subscriber id",
            "schema": SID_SCHEMA}


def _body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {JSON: {"schema": schema}}}


TOPIC = _name_param("topic", "topic name")
GROUP = _name_param("group", "consumer group name")


def schemas(s: Any) -> dict[str, Any]:
    """The component schemas, with this node's limits."""
    headers = {"type": "object", "maxProperties": s.max_headers,
               "additionalProperties": {"type": "string", "maxLength": s.max_header_value}}
    message_in = _obj({
        "id": {"type": "string", "minLength": 1, "maxLength": s.max_id},
        "key": {"type": "string", "maxLength": s.max_id, "nullable": True},
        "headers": headers,
        "body": {"description": "any JSON value; a string with a non-JSON content_type is stored as text"},
        "body_base64": {"type": "string", "format": "byte"},
        "content_type": {"type": "string", "minLength": 1, "maxLength": 200},
        "timestamp": {"type": "integer", "minimum": 0, "maximum": (1 << 53) - 1},
    }, closed=True, oneOf=[{"required": ["body"]}, {"required": ["body_base64"]}])
    coordinates = _obj({"id": {"type": "string"}, "topic": _ref("Name"),
                        "partition": {"type": "integer", "minimum": 0},
                        "offset": {"type": "integer", "minimum": 0},
                        "duplicate": {"type": "boolean"}}, ("id", "topic", "partition", "offset"))
    envelope = _obj({
        "id": {"type": "string"}, "topic": _ref("Name"),
        "partition": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0},
        "key": {"type": "string", "nullable": True},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "timestamp": {"type": "integer", "minimum": 0}, "content_type": {"type": "string"},
        "body": {}, "body_base64": {"type": "string", "format": "byte"},
    }, ("id", "topic", "partition", "offset", "key", "headers", "timestamp", "content_type"),
        oneOf=[{"required": ["body"]}, {"required": ["body_base64"]}])
    offsets_map = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
    return {
        "Name": {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 200},
        "Error": _obj({"error": {"type": "string"}, "message": {"type": "string"}}, ("error", "message")),
        "Headers": headers,
        "MessageIn": message_in,
        "Batch": _obj({"messages": {"type": "array", "minItems": 1, "maxItems": s.max_batch,
                                    "items": _ref("MessageIn")}}, ("messages",), closed=True),
        "Coordinates": coordinates,
        "BatchCoordinates": _obj({"messages": {"type": "array", "items": _ref("Coordinates")}},
                                 ("messages",)),
        "Envelope": envelope,
        "TopicInfo": _obj({"name": _ref("Name"), "partitions": {"type": "integer", "minimum": 1},
                           "owner": {"type": "string"}, "end_offsets": offsets_map},
                          ("name", "partitions", "owner", "end_offsets")),
        "Subscription": _obj({
            "mode": {"type": "string", "enum": ["push", "pull"]},
            "url": {"type": "string", "description": "push only: http(s) URL allowed by push_allow"},
            "id": SID_SCHEMA,
            "start": {"type": "string", "enum": ["latest", "earliest"]},
        }, ("mode",), closed=True),
        "Subscribed": _obj({"subscriber_id": SID_SCHEMA, "topic": _ref("Name"), "group": _ref("Name"),
                            "mode": {"type": "string", "enum": ["push", "pull"]},
                            "partitions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "lease_ms": {"type": "integer", "minimum": 1}},
                           ("subscriber_id", "partitions")),
        "Heartbeat": _obj({"subscriber_id": SID_SCHEMA, "topic": _ref("Name"), "group": _ref("Name"),
                           "partitions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                           "lease_ms": {"type": "integer", "minimum": 1}}, ("subscriber_id", "partitions")),
        "Committed": _obj({"subscriber": SID_SCHEMA, "committed": offsets_map,
                           "acknowledged": {"type": "integer", "minimum": 0}}, ("subscriber", "committed")),
        "Fetched": _obj({"messages": {"type": "array", "items": _ref("Envelope")}}, ("messages",)),
        "Commit": _obj({"subscriber": SID_SCHEMA,
                        "offsets": {"type": "object", "additionalProperties": NONNEG,
                                    "description": "partition number (as a string) -> offset"}},
                       ("subscriber", "offsets"), closed=True),
        "Group": _obj({"topic": _ref("Name"), "group": _ref("Name"),
                       "subscribers": {"type": "array", "items": {"type": "object"}},
                       "assignment": {"type": "object", "additionalProperties": SID_SCHEMA},
                       "committed": offsets_map, "end_offsets": offsets_map, "lag": offsets_map,
                       "total_lag": {"type": "integer", "minimum": 0},
                       "partitions": {"type": "array", "items": _obj({
                           "partition": NONNEG, "subscriber": {"type": "string", "nullable": True},
                           "committed": NONNEG, "end": NONNEG, "lag": NONNEG},
                           ("partition", "committed", "end", "lag"))}},
                      ("topic", "group", "subscribers", "assignment", "committed", "lag", "total_lag")),
        "Cluster": _obj({"node": {"type": "string"}, "node_id": {"type": "string"}, "url": {"type": "string"},
                         "live": {"type": "array", "items": {"type": "string"}},
                         "nodes": {"type": "array", "items": _obj({
                             "id": {"type": "string"}, "name": {"type": "string"}, "url": {"type": "string"},
                             "alive": {"type": "boolean"}, "last_heartbeat": {"type": "integer"},
                             "started": {"type": "integer"}},
                             ("id", "name", "url", "alive", "last_heartbeat"))}},
                        ("node", "nodes")),
        # ToyMB's driver sends every field, null when unset; requestor is informational.
        "CompatSend": _obj({"id": {"type": "string", "minLength": 1, "maxLength": s.max_id, "nullable": True},
                            "topicName": _ref("Name"), "key": {"type": "string", "maxLength": s.max_id,
                                                               "nullable": True},
                            "body": {"description": "any JSON value; a missing body is stored as null"},
                            "requestor": {"description": "ignored"}},
                           ("topicName",)),
        "CompatSubscribe": _obj({"id": {**SID_SCHEMA, "nullable": True},
                                 "topicName": _ref("Name"), "groupName": _ref("Name"),
                                 # As in ToyMB: "push" pushes, any other type polls, and a
                                 # poller's ip and port are ignored, whatever they hold.
                                 "type": {"type": "string", "nullable": True},
                                 "ip": {"description": "push only: the receiver's host name or address"},
                                 "port": {"description": "push only: the receiver's port, 1-65535"}},
                                ("topicName", "groupName")),
        "CompatAdvertise": _obj({"topicName": _ref("Name"), "partitions": {
                                     "type": "integer", "minimum": 1, "maximum": s.max_partitions}},
                                ("topicName",)),
    }


def paths(s: Any) -> dict[str, Any]:
    """Every operation of the HTTP API."""
    open_: dict[str, Any] = {"security": []}
    wait = {"name": "wait_ms", "in": "query", "schema": {"type": "integer", "minimum": 0,
                                                          "maximum": s.max_wait_ms}}
    return {
        "/health": {"get": {**open_, "summary": "Liveness", "responses": {"200": _json(
            _obj({"status": {"type": "string", "enum": ["up"]}, "node": {"type": "string"}},
                 ("status", "node")))}}},
        "/ready": {"get": {**open_, "summary": "Readiness: store reachable and cluster joined", "responses": {
            code: _json(_obj({"status": {"type": "string", "enum": ["ready", "not_ready"]},
                              "node": {"type": "string"}, "store": {"type": "boolean"},
                              "joined": {"type": "boolean"}}, ("status", "node")), text)
            for code, text in (("200", "Ready"), ("503", "Not ready"))}}},
        "/openapi.json": {"get": {**open_, "summary": "This document",
                                  "responses": {"200": _json({"type": "object"})}}},
        "/metrics": {"get": {"summary": "Prometheus metrics (admin)",
                             "responses": {"200": _text("Prometheus text format"), **_errors()}}},
        "/v1/cluster": {"get": {"summary": "The nodes of the cluster, and which answered",
                                "responses": {"200": _json(_ref("Cluster")), **_errors()}}},
        "/v1/topics": {"get": {"summary": "List topics", "responses": {"200": _json(_obj(
            {"topics": {"type": "array", "items": _obj(
                {"name": _ref("Name"), "partitions": {"type": "integer", "minimum": 1}},
                ("name", "partitions"))}}, ("topics",))), **_errors()}}},
        "/v1/topics/{topic}": {
            "parameters": [TOPIC],
            "get": {"summary": "Describe a topic", "responses": {"200": _json(_ref("TopicInfo")),
                                                                 **_errors("404")}},
            "put": {"summary": "Create a topic (publish role)",
                    "requestBody": _body(_obj({"partitions": {"type": "integer", "minimum": 1,
                                                              "maximum": s.max_partitions}}, closed=True,
                                              nullable=True), required=False),
                    "responses": {"200": _json(_ref("TopicInfo"), "Already existed"),
                                  "201": _json(_ref("TopicInfo"), "Created"), **_errors()}}},
        "/v1/topics/{topic}/messages": {"post": {
            "summary": "Publish one message or a batch (publish role)", "parameters": [TOPIC],
            "requestBody": _body({"oneOf": [_ref("MessageIn"), _ref("Batch")]}),
            "responses": {
                "200": _json({"oneOf": [_ref("Coordinates"), _ref("BatchCoordinates")]},
                             "Every id was already stored: the original coordinates"),
                "201": _json({"oneOf": [_ref("Coordinates"), _ref("BatchCoordinates")]}, "Stored"),
                **_errors("413", "422")}}},
        "/v1/topics/{topic}/groups/{group}": {"get": {
            "summary": "A group: subscribers, assignment, committed offsets, lag (consume role)",
            "parameters": [TOPIC, GROUP], "responses": {"200": _json(_ref("Group")), **_errors("404")}}},
        "/v1/topics/{topic}/groups/{group}/subscribers": {"post": {
            "summary": "Register a push or pull subscriber (consume role)", "parameters": [TOPIC, GROUP],
            "requestBody": _body(_ref("Subscription")),
            "responses": {"201": _json(_ref("Subscribed"), "Registered"), **_errors("404", "409")}}},
        "/v1/topics/{topic}/groups/{group}/subscribers/{sid}": {"delete": {
            "summary": "Remove a subscriber (consume role)", "parameters": [TOPIC, GROUP, _sid_param()],
            "responses": {"200": _json(_obj({"deleted": SID_SCHEMA}, ("deleted",)), "Removed"),
                          **_errors("404")}}},
        "/v1/subscribers/{sid}/heartbeat": {"post": {
            "summary": "Keep a subscriber's lease alive (consume role)", "parameters": [_sid_param()],
            "responses": {"200": _json(_ref("Heartbeat")), **_errors("404")}}},
        "/v1/topics/{topic}/groups/{group}/messages": {"get": {
            "summary": "Long-poll fetch (consume role)", "parameters": [
                TOPIC, GROUP,
                {"name": "subscriber", "in": "query", "required": True, "schema": SID_SCHEMA},
                {"name": "max", "in": "query", "schema": {"type": "integer", "minimum": 1,
                                                          "maximum": s.max_fetch}}, wait],
            "responses": {"200": _json(_ref("Fetched")), **_errors("404", "409")}}},
        "/v1/topics/{topic}/groups/{group}/offsets": {"post": {
            "summary": "Commit offsets (consume role)", "parameters": [TOPIC, GROUP],
            "requestBody": _body(_ref("Commit")),
            "responses": {"200": _json(_ref("Committed")), **_errors("404", "409")}}},
        "/sendmessage": {"post": {"summary": "ToyMB-compatible publish (publish role)",
                                  "requestBody": _body(_ref("CompatSend")),
                                  "responses": {"200": _text("ack"), **_errors("413", "422")}}},
        "/subscribe": {"post": {"summary": "ToyMB-compatible subscribe (consume role)",
                                "requestBody": _body(_ref("CompatSubscribe")),
                                "responses": {"200": _text("the subscriber id"),
                                              "201": _text("the subscriber id"), **_errors("404", "409")}}},
        "/poll/{sid}": {"get": {"summary": "ToyMB-compatible pull: the next body as text (consume role)",
                                "parameters": [_sid_param()],
                                "responses": {"200": _text("the body, or 'No messages right now'"),
                                              **_errors("404", "409")}}},
        "/advertise": {"post": {"summary": "ToyMB-compatible topic creation (publish role)",
                                "requestBody": _body(_ref("CompatAdvertise")),
                                "responses": {"200": _text("ack"), **_errors()}}},
    }


def spec(settings: Any) -> dict[str, Any]:
    """The whole OpenAPI 3.0 document for a node with ``settings``."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "ToyMB broker", "version": "1",
                 "description": "A clustered HTTP message broker. Errors are JSON {error, message}."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths(settings),
        "components": {"schemas": schemas(settings),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


@bp.get("/openapi.json")
def openapi_json() -> Response:
    return jsonify(spec(node().settings))
