"""The console's routes: the page and its files (open), the overview (consume), bridge actions (admin).

The page holds no data and no secret: it asks for a token, keeps it in ``sessionStorage`` and sends
it as ``Authorization: Bearer`` to this node only (``connect-src 'self'``). Actions are POSTs with
that header and a JSON body, never cookies, so another site cannot make a browser perform them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

from flask import Response, current_app, g, jsonify

from ..api import json_object, node
from ..api.docs import body, errors, json_answer, obj
from ..api.routes import ADMIN, CONSUME, OPEN, RouteTable
from ..config import Settings
from ..errors import BadRequest, NotFound
from . import overview
from .peers import local_push_state
from .progress import ProgressTracker
from .remote import ACTIONS, Remotes

routes = RouteTable("console")

EXTENSION = "toymb.console"
# Only these files are served: nothing else of the package can be read through the console.
_FILES = {"console.js": "text/javascript", "console.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                     "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
_lock = threading.Lock()


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class ConsoleState:
    """What one node's console keeps between requests: the stuck tracker, the remotes, the last overview."""

    def __init__(self) -> None:
        n = node()
        self.tracker = ProgressTracker()
        self.rosters = overview.Rosters()
        self.remotes = Remotes(n.settings.console_bridges, n.settings.console_journal_metrics)
        self.overviews = overview.Overviews(lambda: overview.build(n, self.tracker, self.rosters, self.remotes))


def state() -> ConsoleState:
    """The console state of the current app, made on first use."""
    with _lock:
        found: ConsoleState | None = current_app.extensions.get(EXTENSION)
        if found is None:
            found = current_app.extensions[EXTENSION] = ConsoleState()
        return found


def _secured(response: Response) -> Response:
    response.headers.update(_SECURITY_HEADERS)
    return response


def _file_answer(mimetype: str, description: str) -> Callable[[Settings], dict[str, Any]]:
    return lambda s: {"responses": {"200": {"description": description,
                                            "content": {mimetype: {"schema": {"type": "string"}}}}}}


@routes.add("GET", "/console", role=OPEN, summary="The operator console page (it asks for a token)",
            doc=_file_answer("text/html", "HTML page"))
def page() -> Response:
    return _secured(Response(_static("console.html"), mimetype="text/html"))


@routes.add("GET", "/console/console.js", role=OPEN, summary="The console's script",
            doc=_file_answer(_FILES["console.js"], "JavaScript"))
def script() -> Response:
    return _secured(Response(_static("console.js"), mimetype=_FILES["console.js"]))


@routes.add("GET", "/console/console.css", role=OPEN, summary="The console's style sheet",
            doc=_file_answer(_FILES["console.css"], "CSS"))
def style() -> Response:
    return _secured(Response(_static("console.css"), mimetype=_FILES["console.css"]))


@routes.add("GET", "/console/api/overview", role=CONSUME,
            summary="Cluster, topics, groups (lag, stuck partitions, push state), journal and bridges at a glance",
            doc=lambda s: {"responses": {"200": json_answer(obj({
                "node": {"type": "string"}, "checked_ms": {"type": "integer"}, "refresh_ms": {"type": "integer"},
                "cluster": {"type": "object"}, "topics": {"type": "array"}, "groups": {"type": "array"},
                "journal": {"type": "object"}, "bridges": {"type": "array"}, "truncated": {"type": "object"}},
                ("node", "cluster", "topics", "groups", "journal", "bridges"))), **errors()}})
def overview_json() -> Response:
    whole = state().overviews.get()
    return jsonify(overview.for_grant(whole, g.get("toymb_grant")))


@routes.add("GET", "/console/api/push", role=CONSUME,
            summary="This node's push state: lanes failing or backing off, subscribers unreachable (the console "
                    "asks every node)",
            doc=lambda s: {"responses": {"200": json_answer(obj({"node": {"type": "string"},
                                                                 "push": {"type": "array"}}, ("node", "push"))),
                                         **errors()}})
def push_json() -> Response:
    return jsonify(node=node().name, push=local_push_state(node()))


@routes.add("POST", "/console/api/bridges/action", role=ADMIN,
            summary="Pause or resume a bridge at a configured management address (console_bridges)",
            doc=lambda s: {"requestBody": body(obj({
                "endpoint": {"type": "string", "maxLength": 64}, "bridge": {"type": "string", "maxLength": 200},
                "action": {"type": "string", "enum": list(ACTIONS)}}, ("endpoint", "bridge", "action"),
                closed=True)), "responses": {"200": json_answer({"type": "object"}, "The bridge's new status"),
                                             **errors("404")}})
def bridge_action() -> Any:
    request_body = json_object()
    unknown = set(request_body) - {"endpoint", "bridge", "action"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}", code="bad_field")
    fields = {k: request_body.get(k) for k in ("endpoint", "bridge", "action")}
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{name} must be a non-empty string", code="bad_field")
    if not state().remotes.endpoints:
        raise NotFound("no bridge management address is configured (console_bridges)",
                       code="bridge_endpoint_not_found")
    console = state()
    try:
        return jsonify(console.remotes.act(str(fields["endpoint"]), str(fields["bridge"]), str(fields["action"])))
    finally:
        console.overviews.invalidate()  # the page's next look shows the bridge's new state
