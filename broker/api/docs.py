"""Pieces of OpenAPI 3.0 that route declarations and the component schemas are built from."""

from __future__ import annotations

from typing import Any

from driver.names import SUBSCRIBER_ID_PATTERN

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


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = False,
         **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


def json_answer(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def text_answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": {TEXT: {"schema": {"type": "string"}}}}


def errors(*codes: str) -> dict[str, Any]:
    # 401/403 can answer any guarded operation; 503 any that touches the store or forwards.
    wanted = sorted(set(codes) | {"400", "401", "403", "503"})
    return {code: {"description": ERROR_STATUSES[code], "content": {JSON: {"schema": ref("Error")}}}
            for code in wanted}


def name_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": ref("Name")}


NONNEG = {"type": "integer", "minimum": 0}
SID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": SUBSCRIBER_ID_PATTERN}


def sid_param(name: str = "sid") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": "subscriber id",
            "schema": SID_SCHEMA}


def body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {JSON: {"schema": schema}}}


TOPIC = name_param("topic", "topic name")
GROUP = name_param("group", "consumer group name")
# The parameter of each variable a route's path may hold.
PATH_PARAMS = {"topic": TOPIC, "group": GROUP, "sid": sid_param()}
