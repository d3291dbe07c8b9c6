"""ToyMB-compatible consumption: ``POST /subscribe`` and ``GET /poll/{id}``, with ToyMB's own bodies.

ToyMB's Java driver sends ``{id, topicName, groupName, type, ip, port, requestor}`` (null fields
included) and expects the subscriber id as plain text. A ``push`` subscriber then receives
``{topicName, forSubscriber, messageId, entity}`` at ``http://ip:port/receivemessage``, one message
per request; any other type polls ``/poll/{id}`` for one body at a time as text.

Unlike ToyMB, delivery is at least once: a push counts only when the receiver answers 2xx, and a
poll acknowledges what the previous poll of the same subscriber returned.
"""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any

from flask import Response

from ..api import json_object, node
from ..api.docs import body, errors, ref, text_answer
from ..api.routes import CONSUME, RouteTable
from ..errors import BadRequest, Conflict
from ..publish import check_name
from ..security import caller_may_publish
from .api import check_subscriber_id, delivery
from .push import check_http_url, entity_text

routes = RouteTable("delivery_compat")

NO_MESSAGES = "No messages right now"


def _text(value: str, status: int = 200) -> Response:
    return Response(value, status=status, mimetype="text/plain")


def receiver_url(ip: Any, port: Any) -> str:
    """``http://ip:port/receivemessage``, the endpoint ToyMB's driver serves."""
    if not isinstance(ip, str) or not ip or len(ip) > 253:
        raise BadRequest("ip must be a host name or address", code="bad_field", field="ip")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise BadRequest("port must be a TCP port number", code="bad_field", field="port")
    try:
        host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        host = ip
    return check_http_url(f"http://{host}:{port}/receivemessage")


@routes.add("POST", "/subscribe", legacy=True, role=CONSUME, topic="body", forward=True,
            summary="ToyMB-compatible subscribe", doc=lambda s: {
                "requestBody": body(ref("CompatSubscribe")),
                "responses": {"200": text_answer("the subscriber id"),
                              "201": text_answer("the subscriber id"), **errors("404", "409")}})
def subscribe() -> Any:
    fields = json_object()
    topic = check_name(fields.get("topicName"))
    group = check_name(fields.get("groupName"), "group")
    kind = fields.get("type")
    if kind is not None and not isinstance(kind, str):
        raise BadRequest("type must be a string", code="bad_field", field="type")
    mode = "push" if kind == "push" else "pull"  # ToyMB treats anything but "push" as pull
    url = None
    if mode == "push":
        url = receiver_url(fields.get("ip"), fields.get("port"))
        node().check_push_url(url)
    sid = fields.get("id")
    sid = str(uuid.uuid4()) if sid is None else check_subscriber_id(sid)
    sub, _ = delivery().register(topic, group, sid, mode=mode, url=url, compat=True,
                                 create=caller_may_publish(topic))
    return _text(sub.id)


@routes.add("GET", "/poll/<sid>", legacy=True, role=CONSUME, topic="subscriber", forward=True,
            summary="ToyMB-compatible pull: the next body as text", doc=lambda s: {"responses": {
                "200": text_answer("the body, or 'No messages right now'"), **errors("404", "409")}})
def poll(sid: str) -> Any:
    d = delivery()
    sub = d.subscriber(check_subscriber_id(sid))
    if sub.mode != "pull":
        raise Conflict(f"subscriber {sid!r} receives pushes; it cannot poll", code="wrong_mode")
    sub = d.touch(sub)
    d.fetcher.acknowledge_fetched(sub.topic, sub.group, sub.id)
    rows = d.fetcher.fetch(sub.topic, sub.group, sub.id, 1, 0)
    if not rows:
        return _text(NO_MESSAGES)
    return _text(entity_text(bytes(rows[0].body)))
