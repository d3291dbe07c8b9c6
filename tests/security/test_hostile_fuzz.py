"""A deterministic hostile fuzzer: every route of a real node, hostile values in every position.

schemathesis (``test_fuzz.py``) generates from the schema and seldom reaches the classes of input
that broke the node before. This fuzzer enumerates the operations of the node's own
``/openapi.json`` and, for each, substitutes hostile values into every path parameter, every
query parameter, every JSON field (values and keys, at every depth of a valid template), and the
whole body, drawn from fixed classes: deep nesting (100,000 and around ``MAX_JSON_DEPTH``), NUL,
lone surrogates (as escapes and as raw bytes), invalid UTF-8, huge and non-finite numbers,
non-ASCII digits, huge, empty and blank strings, wrong types, duplicate keys, trailing garbage,
wrong or missing content types and bad ``body_base64``. A seeded random walk over combinations
fills the run up to ``MIN_REQUESTS``.

Requests go over raw sockets, so a request line or body can hold any byte. Every answer must be
below 500, JSON whenever it says so (strict: no NaN), and JSON for every error; all failures
are collected and reported together. The node must be healthy afterwards and still publish and
deliver, and every message the fuzzer managed to store must render as JSON.

``TOYMB_TEST_HOSTILE_SEED`` and ``TOYMB_TEST_HOSTILE_REQUESTS`` change the run.
"""

from __future__ import annotations

import base64
import collections
import http.client
import json
import os
import random
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

from broker.strict_json import MAX_JSON_DEPTH
from tests.console.bridges import management_server
from tests.support import NodeProcess

from .conftest import fuzz_node_env

ADMIN = "hostile-admin-5b7e2a"
SEED = int(os.environ.get("TOYMB_TEST_HOSTILE_SEED", "20261123"))
MIN_REQUESTS = int(os.environ.get("TOYMB_TEST_HOSTILE_REQUESTS", "5000"))
TIMEOUT_S = 15.0
TOPIC, GROUP = "fz", "g"
PULL_ID, PUSH_ID, DEL_ID, COMPAT_ID = "fz-pull", "fz-push", "fz-del", "fz-compat"
MAX_BODY = 1 << 20  # TOYMB_MAX_BODY default
MAX_REQUEST = 16 << 20  # TOYMB_MAX_REQUEST default


def nested(depth: int, kind: str, inner: bytes = b"1") -> bytes:
    if kind == "array":
        return b"[" * depth + inner + b"]" * depth
    return b'{"a":' * depth + inner + b"}" * depth


# --- hostile values -----------------------------------------------------------------------------
# Each is (class, bytes). URL values are already percent-encoded or deliberately raw.


def _url(cls: str, text: str) -> tuple[str, bytes]:
    return cls, quote(text, safe="").encode("ascii")


URL_VALUES: list[tuple[str, bytes]] = [
    _url("nul", "a\x00b"), ("nul", b"%00"), ("nul-raw", b"a\x00b"),
    ("surrogate", b"%ED%A0%80"), ("surrogate-raw", b"\xed\xa0\x80"),
    ("invalid-utf8", b"%FF%FE"), ("invalid-utf8-raw", b"a\xffb"), ("invalid-utf8", b"%C0%AF"),
    ("huge-number", b"9" * 5000), ("huge-number", b"1e999"), ("huge-number", b"-0"),
    ("huge-number", b"NaN"), ("huge-number", b"Infinity"), ("huge-number", b"-Infinity"),
    ("huge-number", b"99999999999999999999"), ("number", b"-1"), ("number", b"1.5"), ("number", b"0x10"),
    ("number", b"1_0"), ("number", b"%2B1"), ("number", b"1e3"),
    _url("non-ascii-digit", "²"), _url("non-ascii-digit", "٣"), _url("non-ascii-digit", "１"),
    _url("non-ascii-digit", "١٢٣"), _url("non-ascii-digit", "𝟗"),
    ("huge-string", b"a" * 201), ("huge-string", b"a" * 20000),
    ("empty", b""), ("whitespace", b"%20"), ("whitespace", b"%09"), ("whitespace", b"%0A"),
    ("whitespace", b"a%0D%0A"), ("whitespace", b"%201"),
    ("wrong-type", b"%5B%5D"), ("wrong-type", b"null"), ("wrong-type", b"true"), ("wrong-type", b"%7B%7D"),
    ("traversal", b".."), ("traversal", b"%2E%2E"), ("traversal", b"a%2Fb"), ("traversal", b"%2F"),
    ("percent", b"%"), ("percent", b"%zz"),
    _url("unicode", "тема"), _url("unicode", "a\u202eb"), _url("unicode", "\ufeff"),
]


def _s(text: str) -> bytes:
    return json.dumps(text).encode()


DEEP_BIG = {
    "deep-100000": [nested(100_000, "array"), nested(100_000, "object")],
}
JSON_VALUES: list[tuple[str, bytes]] = [
    *[(cls, v) for cls, vs in DEEP_BIG.items() for v in vs],
    ("deep-129", nested(MAX_JSON_DEPTH + 1, "array")), ("deep-129", nested(MAX_JSON_DEPTH + 1, "object")),
    ("deep-128", nested(MAX_JSON_DEPTH, "array")), ("deep-128", nested(MAX_JSON_DEPTH, "object")),
    ("deep-127", nested(MAX_JSON_DEPTH - 1, "array")),
    ("nul", b'"a\\u0000b"'), ("nul", b'"\\u0000"'), ("nul-raw", b'"a\x00b"'), ("nul", b'{"\\u0000":"\\u0000"}'),
    ("nul", b'["\\u0000"]'),
    ("surrogate", b'"\\ud800"'), ("surrogate", b'"x\\udfff"'), ("surrogate", b'"\\ud800\\u0041"'),
    ("surrogate", b'{"\\ud800":1}'), ("surrogate", b'["\\udbff"]'),
    ("surrogate-raw", b'"\xed\xa0\x80"'), ("invalid-utf8-raw", b'"\xff\xfe"'), ("invalid-utf8-raw", b'"\xc0\xaf"'),
    ("huge-number", b"1e999"), ("huge-number", b"-1e999"), ("huge-number", b"9" * 5000),
    ("huge-number", b"-" + b"9" * 5000), ("huge-number", b"0." + b"0" * 5000 + b"1"), ("huge-number", b"1e-999"),
    ("huge-number", b"-0"), ("huge-number", b"-0.0"), ("huge-number", b"NaN"), ("huge-number", b"Infinity"),
    ("huge-number", b"-Infinity"), ("huge-number", b"9223372036854775808"), ("huge-number", b"18446744073709551616"),
    ("huge-number", b"9007199254740993"), ("huge-number", b"1e308"), ("huge-number", b"4.9e-324"),
    ("number", b"1.5"), ("number", b"-1"), ("number", b"0"), ("number", b"1.0"), ("number", b"1e2"),
    ("non-ascii-digit", _s("²")), ("non-ascii-digit", _s("٣")), ("non-ascii-digit", _s("１")),
    ("non-ascii-digit", _s("１２")), ("non-ascii-digit", _s("٣٣")), ("non-ascii-digit", _s("𝟗")),
    ("digit-string", _s(" 3")), ("digit-string", _s("3_0")), ("digit-string", _s("+3")), ("digit-string", _s("0x1")),
    ("digit-string", _s("1")), ("digit-string", _s("1" * 19)), ("digit-string", _s("9" * 5000)),
    ("huge-string", _s("a" * 201)), ("huge-string", _s("a" * 300)), ("huge-string", _s("a" * 9000)),
    ("huge-string", _s("a" * (MAX_BODY + 10))),
    ("empty", b'""'), ("whitespace", b'" "'), ("whitespace", b'"\\t\\n\\r"'), ("whitespace", b'"a\\n"'),
    ("unicode", _s("тема")), ("unicode", b'"\\ufeff"'), ("unicode", _s("a\u202eb")), ("unicode", _s("😀" * 100)),
    ("wrong-type", b"[]"), ("wrong-type", b"{}"), ("wrong-type", b"true"), ("wrong-type", b"false"),
    ("wrong-type", b"null"), ("wrong-type", b"[1]"), ("wrong-type", b'{"a":1}'), ("wrong-type", b'["a"]'),
    ("url", _s("http://127.0.0.1:9/x")), ("url", _s("http://169.254.169.254/")), ("url", _s("file:///etc/passwd")),
    ("url", _s("http://[::1]:9/")), ("url", _s("http://127.0.0.1:99999/")), ("url", _s("http://127.0.0.1:²/")),
    ("url", _s("http://\u0000/")), ("url", _s("http://" + "a" * 300 + "/")),
]
# Keys of objects: every object of a template gets one of these as an extra key, or as its own key.
JSON_KEYS: list[tuple[str, bytes]] = [
    ("nul", b'"\\u0000"'), ("nul", b'"a\\u0000"'), ("nul-raw", b'"a\x00"'),
    ("surrogate", b'"\\ud800"'), ("surrogate-raw", b'"\xed\xa0\x80"'), ("invalid-utf8-raw", b'"\xff"'),
    ("non-ascii-digit", _s("²")), ("non-ascii-digit", _s("٣")), ("non-ascii-digit", _s("１")),
    ("huge-number", _s("9" * 5000)), ("huge-number", b'"-0"'), ("huge-number", b'"1e999"'),
    ("huge-number", b'"NaN"'), ("huge-number", _s("9" * 19)), ("digit-string", b'" 1"'), ("digit-string", b'"+1"'),
    ("digit-string", b'"-1"'), ("digit-string", b'"1_0"'), ("digit-string", b'"01"'),
    ("empty", b'""'), ("whitespace", b'" "'), ("huge-string", _s("k" * 300)), ("huge-string", _s("k" * 9000)),
]
# Whole bodies (raw bytes), sent with a JSON content type unless the class says otherwise.
WHOLE_BODIES: list[tuple[str, bytes]] = [
    ("deep-100000", nested(100_000, "array")), ("deep-100000", nested(100_000, "object")),
    ("deep-100000", b"[" * 100_000), ("deep-100000", b'{"a":' * 100_000),
    ("deep-129", nested(MAX_JSON_DEPTH + 1, "array")), ("deep-129", nested(MAX_JSON_DEPTH + 1, "object")),
    ("deep-128", nested(MAX_JSON_DEPTH, "array")), ("deep-128", nested(MAX_JSON_DEPTH, "object")),
    ("nul-raw", b"\x00"), ("nul-raw", b'{"a":1}\x00'), ("nul-raw", b'\x00{"a":1}'), ("nul-raw", b"\x00" * 1000),
    ("surrogate", b'"\\ud800"'), ("surrogate-raw", b"\xed\xa0\x80"), ("surrogate-raw", b'{"\xed\xa0\x80":1}'),
    ("invalid-utf8-raw", b"\xff\xfe\xfd"), ("invalid-utf8-raw", b'{"a":"\xc3"}'),
    ("bom", b'\xef\xbb\xbf{"a":1}'), ("utf16", '{"a":1}'.encode("utf-16")),
    ("huge-number", b"1e999"), ("huge-number", b"9" * 5000), ("huge-number", b"NaN"), ("huge-number", b"-0"),
    ("empty", b""), ("whitespace", b"   \n\t "), ("wrong-type", b"null"), ("wrong-type", b"[]"),
    ("wrong-type", b"true"), ("wrong-type", b'"x"'), ("wrong-type", b"42"), ("wrong-type", b"[{}]"),
    ("trailing-garbage", b'{"a":1} x'), ("trailing-garbage", b"{}{}"), ("trailing-garbage", b"{} []"),
    ("truncated", b'{"a":'), ("truncated", b'{"a":"'), ("not-json", b"{oops"), ("not-json", b"a=1&b=2"),
    ("not-json", b"'single'"), ("not-json", b"{'a':1}"), ("not-json", b"{a:1}"), ("not-json", b"[1,]"),
    ("huge-string", b'"' + b"a" * (MAX_BODY + 10) + b'"'),
]
CONTENT_TYPES: list[str | None] = [
    None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/json; charset=utf-16", "application/json; charset=latin-1", "APPLICATION/JSON",
    "application/problem+json", "application/octet-stream", "", "application/json\u00ff",
]


HEADERS: list[tuple[str, bytes, bytes]] = [
    ("nul-raw", b"Authorization", b"Bearer a\x00b"), ("surrogate-raw", b"Authorization", b"Bearer \xed\xa0\x80"),
    ("invalid-utf8-raw", b"Authorization", b"Bearer \xff"), ("empty", b"Authorization", b""),
    ("wrong-type", b"Authorization", b"Basic Zm9vOmJhcg=="),
    ("huge-string", b"Authorization", b"Bearer " + b"a" * 9000),
    ("whitespace", b"Authorization", b"Bearer  "), ("unicode", b"Authorization", "Bearer ²".encode()),
    ("surrogate-raw", b"Content-Type", b"application/json; charset=\xed\xa0\x80"),
    ("nul-raw", b"Content-Type", b"application/json\x00"), ("invalid-utf8-raw", b"X-Forwarded-For", b"\xff"),
    ("huge-string", b"X-Forwarded-For", b"1.2.3.4, " * 500),
    ("non-ascii-digit", b"X-Forwarded-For", "١.٢.٣.٤".encode()),
    ("non-ascii-digit", b"Content-Length", "\u00b2".encode("latin-1")),
    ("non-ascii-digit", b"Content-Length", "١".encode()),
    ("huge-number", b"Content-Length", b"9" * 5000), ("huge-number", b"Content-Length", b"-0"),
    ("huge-number", b"Content-Length", b"-1"), ("number", b"Content-Length", b"1_0"),
    ("surrogate-raw", b"X-Request-Id", b"\xed\xa0\x80"), ("empty", b"Host", b""),
    ("surrogate-raw", b"\xed\xa0\x80", b"1"), ("nul-raw", b"X\x00Y", b"1"),
]


def not_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_loads(data: bytes) -> Any:
    return json.loads(data, parse_constant=not_json_constant)


# --- operations and their valid templates -------------------------------------------------------


@dataclass
class Op:
    method: str
    path: str
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    bodies: list[Any] = field(default_factory=list)  # valid JSON templates; [] for no body

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


def templates() -> dict[tuple[str, str], dict[str, Any]]:
    msg = {"id": "fz-m1", "key": "k", "headers": {"h": "v"}, "body": {"a": [1, "x"]},
           "content_type": "application/json", "timestamp": 1_700_000_000_000}
    b64 = {"id": "fz-m2", "body_base64": base64.b64encode(b'{"a":1}').decode(), "content_type": "application/json"}
    tg = {"topic": TOPIC, "group": GROUP}
    return {
        ("PUT", "/v1/topics/{topic}"): {"path": {"topic": TOPIC}, "bodies": [{"partitions": 4}]},
        ("GET", "/v1/topics/{topic}"): {"path": {"topic": TOPIC}},
        ("POST", "/v1/topics/{topic}/messages"): {"path": {"topic": TOPIC},
                                                  "bodies": [msg, b64, {"messages": [{"body": 1}, b64]}]},
        ("GET", "/v1/topics/{topic}/groups/{group}"): {"path": tg},
        ("POST", "/v1/topics/{topic}/groups/{group}/subscribers"): {
            "path": tg, "bodies": [{"mode": "pull", "id": PULL_ID, "start": "earliest"},
                                   {"mode": "push", "id": PUSH_ID, "url": "http://127.0.0.1:9/hook"},
                                   {"mode": "push", "id": "fz-opts", "url": "http://127.0.0.1:9/hook",
                                    "format": "cloudevents", "new_secret": True, "secret_overlap_ms": 1000},
                                   {"mode": "pull", "id": "fz-filter", "filter": "msg.header.h^=v && msg.key!=k",
                                    "dead_letter": {"max_attempts": 3, "min_backoff_ms": 10,
                                                    "max_backoff_ms": 100}}]},
        ("POST", "/v1/topics/{topic}/groups/{group}/seek"): {
            "path": tg, "bodies": [{"to": "earliest"}, {"timestamp": 1_700_000_000_000, "partitions": [0, 1]},
                                   {"offsets": {"0": 0}}]},
        ("POST", "/v1/topics/{topic}/groups/{group}/nack"): {
            "path": tg, "bodies": [{"subscriber": PULL_ID, "messages": [{"partition": 0, "offset": 0}]}]},
        ("POST", "/v1/topics/{topic}/groups/{group}/extend"): {
            "path": tg, "bodies": [{"subscriber": PULL_ID, "messages": [{"partition": 0, "offset": 0}],
                                    "extend_ms": 1000}]},
        ("POST", "/v1/topics/{topic}/groups/{group}/subscribers/{sid}/secret"): {
            "path": {"topic": TOPIC, "group": GROUP, "sid": PUSH_ID},
            "bodies": [{"overlap_ms": 1000}, {"secret": "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"}]},
        ("DELETE", "/v1/topics/{topic}/groups/{group}/subscribers/{sid}"): {
            "path": {"topic": TOPIC, "group": "gd", "sid": DEL_ID}},
        ("POST", "/v1/subscribers/{sid}/heartbeat"): {"path": {"sid": PULL_ID}},
        ("GET", "/v1/topics/{topic}/groups/{group}/messages"): {
            "path": tg, "query": {"subscriber": PULL_ID, "max": "10", "wait_ms": "0"}},
        ("POST", "/v1/topics/{topic}/groups/{group}/offsets"): {
            "path": tg, "bodies": [{"subscriber": PULL_ID, "offsets": {"0": 0}}]},
        ("POST", "/sendmessage"): {"bodies": [{"id": "fz-c1", "topicName": TOPIC, "key": "k", "body": "text",
                                              "requestor": "x"},
                                             {"topicName": TOPIC, "body": {"a": 1}}]},
        ("POST", "/subscribe"): {"bodies": [{"id": COMPAT_ID, "topicName": TOPIC, "groupName": "gc", "type": "pull",
                                            "ip": None, "port": None, "requestor": None},
                                           {"id": "fz-cpush", "topicName": TOPIC, "groupName": "gp", "type": "push",
                                            "ip": "127.0.0.1", "port": 9}]},
        ("GET", "/poll/{sid}"): {"path": {"sid": COMPAT_ID}},
        ("POST", "/advertise"): {"bodies": [{"topicName": TOPIC, "partitions": 4}]},
        ("POST", "/console/api/bridges/action"): {"bodies": [{"endpoint": "jms", "bridge": "b", "action": "pause"}]},
    }


def operations(spec: dict[str, Any]) -> list[Op]:
    known = templates()
    ops = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            params = op.get("parameters", []) + item.get("parameters", [])
            t = known.get((method.upper(), path), {})
            o = Op(method.upper(), path, dict(t.get("path", {})), dict(t.get("query", {})), list(t.get("bodies", [])))
            for p in params:  # every documented parameter has a template value
                where = o.path_params if p["in"] == "path" else o.query if p["in"] == "query" else None
                assert where is not None and p["name"] in where, f"{o.name}: no template for {p['name']}"
            if "requestBody" in op:
                assert o.bodies, f"{o.name}: no template body"
            ops.append(o)
    return ops


# --- rendering ----------------------------------------------------------------------------------

Path = tuple[Any, ...]


@dataclass(frozen=True)
class Edit:
    kind: str  # value | key | extra | dupe | delete
    where: Path
    fragment: bytes = b""
    key: bytes = b""


def dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def render(value: Any, edit: Edit | None, here: Path = ()) -> bytes:
    if edit is not None and edit.kind == "value" and edit.where == here:
        return edit.fragment
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            child = here + (k,)
            if edit is not None and edit.where == child and edit.kind == "delete":
                continue
            key = edit.key if edit is not None and edit.kind == "key" and edit.where == child else dump(k)
            parts.append(key + b":" + render(v, edit, child))
            if edit is not None and edit.kind == "dupe" and edit.where == child:
                parts.append(dump(k) + b":" + edit.fragment)
        if edit is not None and edit.kind == "extra" and edit.where == here:
            parts.append(edit.key + b":" + edit.fragment)
        return b"{" + b",".join(parts) + b"}"
    if isinstance(value, list):
        items = [render(v, edit, here + (i,)) for i, v in enumerate(value)
                 if not (edit is not None and edit.kind == "delete" and edit.where == here + (i,))]
        if edit is not None and edit.kind == "extra" and edit.where == here:
            items.append(edit.fragment)
        return b"[" + b",".join(items) + b"]"
    return dump(value)


def positions(value: Any, here: Path = ()) -> Iterator[tuple[Path, Any]]:
    yield here, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from positions(v, here + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from positions(v, here + (i,))


# --- requests -----------------------------------------------------------------------------------


@dataclass
class Request:
    route: str
    cls: str
    method: str
    path: dict[str, bytes]
    query: list[tuple[bytes, bytes]]
    body: bytes | None
    content_type: str | None = "application/json"
    template_path: str = ""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # extra, raw
    chunked: bool = False

    def target(self) -> bytes:
        out = self.template_path.encode()
        for name, value in self.path.items():
            out = out.replace(b"{" + name.encode() + b"}", value)
        if self.query:
            out += b"?" + b"&".join(k + b"=" + v for k, v in self.query)
        return out


def base_request(op: Op, cls: str, body: bytes | None = None) -> Request:
    return Request(op.name, cls, op.method, {k: quote(v, safe="").encode() for k, v in op.path_params.items()},
                   [(k.encode(), v.encode()) for k, v in op.query.items()], body, template_path=op.path)


def requests_for(op: Op) -> Iterator[Request]:
    first_body = render(op.bodies[0], None) if op.bodies else None
    # path parameters
    for name in op.path_params:
        for cls, value in URL_VALUES:
            r = base_request(op, f"path:{name}:{cls}", first_body)
            r.path[name] = value
            yield r
    # query parameters: each documented one, missing, duplicated; and an unknown one everywhere
    for name in op.query:
        for cls, value in URL_VALUES:
            r = base_request(op, f"query:{name}:{cls}", first_body)
            r.query = [(k, value if k == name.encode() else v) for k, v in r.query]
            yield r
            r = base_request(op, f"query:{name}:dupe:{cls}", first_body)
            r.query.append((name.encode(), value))
            yield r
        r = base_request(op, f"query:{name}:missing", first_body)
        r.query = [(k, v) for k, v in r.query if k != name.encode()]
        yield r
    for cls, value in URL_VALUES[::3]:
        r = base_request(op, f"query:unknown:{cls}", first_body)
        r.query.append((b"x", value))
        yield r
        r = base_request(op, f"query:name:{cls}", first_body)
        r.query.append((value, b"1"))
        yield r
    # JSON fields of every template, at every depth
    for template in op.bodies:
        for where, value in positions(template):
            if where:
                for cls, fragment in JSON_VALUES:
                    yield base_request(op, f"field:{_p(where)}:{cls}", render(template, Edit("value", where, fragment)))
                yield base_request(op, f"field:{_p(where)}:missing", render(template, Edit("delete", where)))
                for cls, fragment in JSON_VALUES[::7]:
                    if isinstance(where[-1], str):
                        yield base_request(op, f"field:{_p(where)}:dupe:{cls}",
                                           render(template, Edit("dupe", where, fragment)))
                if isinstance(where[-1], str):
                    for cls, key in JSON_KEYS:
                        yield base_request(op, f"key:{_p(where)}:{cls}",
                                           render(template, Edit("key", where, key=key)))
            if isinstance(value, dict):
                for cls, key in JSON_KEYS:
                    yield base_request(op, f"extra-key:{_p(where)}:{cls}",
                                       render(template, Edit("extra", where, b"0", key)))
            if isinstance(value, list):
                for cls, fragment in JSON_VALUES[::5]:
                    yield base_request(op, f"extra-item:{_p(where)}:{cls}",
                                       render(template, Edit("extra", where, fragment)))
    # whole bodies, with and without a JSON content type; GET routes get a few too
    bodies = WHOLE_BODIES if op.bodies else WHOLE_BODIES[::4]
    for cls, raw in bodies:
        yield base_request(op, f"body:{cls}", raw)
    if op.bodies:
        yield base_request(op, "body:over-max-request", b'{"a":"' + b"x" * (MAX_REQUEST + 10) + b'"}')
        yield base_request(op, "body:missing", None)
    for ct in CONTENT_TYPES:
        r = base_request(op, f"content-type:{ct!r}", first_body if first_body is not None else b"{}")
        r.content_type = ct
        yield r
    for cls, header, value in HEADERS:
        r = base_request(op, f"header:{header.decode('latin-1')}:{cls}", first_body)
        r.headers.append((header, value))
        if header.lower() == b"content-length":
            r.body = None
        yield r
    for method in ("HEAD", "OPTIONS", "PATCH", "TRACE", "G\xc3T"):
        r = base_request(op, f"method:{method!r}", first_body)
        r.method = method
        yield r
    for cls, raw in [("valid", first_body or b"{}"), *WHOLE_BODIES[::6]]:
        r = base_request(op, f"chunked:{cls}", raw)
        r.chunked = True
        yield r
    if op.path == "/v1/topics/{topic}/messages":
        yield from base64_requests(op)


def base64_requests(op: Op) -> Iterator[Request]:
    bad = ["!!!", "aGk", "aGk===", " aGk= ", "=", "aG\u0000k=", "аGk=", "\ud800", "a" * 5, "", "\\u0000"]
    for ct in ("application/json", "application/octet-stream", "text/plain", "application/x+json", None):
        for text in bad:
            message: dict[str, Any] = {"body_base64": text}
            if ct:
                message["content_type"] = ct
            yield base_request(op, f"body_base64:bad:{ct}", json.dumps(message).encode())
        for cls, raw in WHOLE_BODIES:
            if len(raw) > MAX_BODY:
                continue
            message = {"body_base64": base64.b64encode(raw).decode()}
            if ct:
                message["content_type"] = ct
            yield base_request(op, f"body_base64:{cls}:{ct}", json.dumps(message).encode())
        yield base_request(op, f"body_base64:with-body:{ct}",
                           json.dumps({"body_base64": "aGk=", "body": 1, "content_type": ct}).encode())


def _p(where: Path) -> str:
    return ".".join(str(x) for x in where) or "."


def random_requests(ops: list[Op], rng: random.Random) -> Iterator[Request]:
    """Two or three hostile substitutions at once, drawn at random (seeded)."""
    while True:
        op = rng.choice(ops)
        r = base_request(op, "random")
        classes = []
        if op.bodies:
            template = rng.choice(op.bodies)
            where = rng.choice([w for w, _ in positions(template) if w] or [()])
            cls, fragment = rng.choice(JSON_VALUES)
            r.body = render(template, Edit("value", where, fragment) if where else None)
            classes.append(f"field:{_p(where)}:{cls}")
        for name in list(r.path):
            if rng.random() < 0.3:
                cls, raw = rng.choice(URL_VALUES)
                r.path[name] = raw
                classes.append(f"path:{name}:{cls}")
        for i, (param, _) in enumerate(r.query):
            if rng.random() < 0.5:
                cls, value = rng.choice(URL_VALUES)
                r.query[i] = (param, value)
                classes.append(f"query:{param.decode()}:{cls}")
        if rng.random() < 0.2:
            r.content_type = rng.choice(CONTENT_TYPES)
            classes.append(f"content-type:{r.content_type!r}")
        r.cls = "random:" + ",".join(classes)
        yield r


# --- the wire -----------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def send(port: int, method: str, target: bytes, body: bytes | None, content_type: str | None,
         extra: list[tuple[bytes, bytes]] | None = None, chunked: bool = False) -> Answer:
    """One request on a fresh connection, every byte as given; the answer, however framed."""
    replaced = {name.lower() for name, _ in extra or ()}
    head = [method.encode("latin-1") + b" " + target + b" HTTP/1.1", b"Connection: close"]
    if b"host" not in replaced:
        head.append(b"Host: 127.0.0.1")
    if b"authorization" not in replaced:
        head.append(f"Authorization: Bearer {ADMIN}".encode())
    if content_type is not None and b"content-type" not in replaced:
        head.append(b"Content-Type: " + content_type.encode("latin-1"))
    head.extend(name + b": " + value for name, value in extra or ())
    payload = body or b""
    if chunked:
        head.append(b"Transfer-Encoding: chunked")
        step = 65536
        payload = b"".join(b"%x\r\n" % len(payload[i:i + step]) + payload[i:i + step] + b"\r\n"
                           for i in range(0, len(payload), step)) + b"0\r\n\r\n"
    elif body is not None:
        head.append(b"Content-Length: " + str(len(body)).encode())
    data = b"\r\n".join(head) + b"\r\n\r\n" + payload
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node may answer (413) and close before reading a huge body: read its answer
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        payload = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, payload)


def problems_of(request: Request, answer: Answer) -> list[str]:
    problems = []
    ctype = answer.headers.get("content-type", "")
    if answer.status >= 500:
        problems.append(f"status {answer.status}")
    is_json = "json" in ctype.lower()
    if is_json and request.method != "HEAD":
        try:
            strict_loads(answer.body)
        except ValueError as exc:
            problems.append(f"invalid JSON ({exc})")
    if answer.status >= 400:
        if not is_json:
            problems.append(f"error that is not JSON ({ctype!r})")
        else:
            try:
                doc = strict_loads(answer.body)
                if not (isinstance(doc, dict) and isinstance(doc.get("error"), str)):
                    problems.append("error JSON without an error code")
            except ValueError:
                pass
    return problems


# --- the test -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    # The console's bridge action relays to a configured management API: one is there for it.
    with management_server("b") as (bridges_url, _):
        env = fuzz_node_env(ADMIN, TOYMB_SUBSCRIBER_LEASE_MS="600000", TOYMB_CONSOLE_BRIDGES=f"jms={bridges_url}")
        node = NodeProcess(tmp_path_factory.mktemp("hostile"), env=env).start()
        yield node
        node.stop()


def call(node: NodeProcess, method: str, path: str, body: Any = None) -> Answer:
    raw = None if body is None else json.dumps(body).encode()
    return send(node.port, method, path.encode(), raw, "application/json" if raw is not None else None)


def setup_state(node: NodeProcess) -> None:
    """The topic, subscribers and a message the valid templates refer to."""
    steps = [
        ("PUT", f"/v1/topics/{TOPIC}", {"partitions": 4}),
        ("POST", f"/v1/topics/{TOPIC}/groups/{GROUP}/subscribers",
         {"mode": "pull", "id": PULL_ID, "start": "earliest"}),
        ("POST", f"/v1/topics/{TOPIC}/groups/gd/subscribers", {"mode": "pull", "id": DEL_ID}),
        ("POST", "/subscribe", {"id": COMPAT_ID, "topicName": TOPIC, "groupName": "gc", "type": "pull"}),
        ("POST", f"/v1/topics/{TOPIC}/messages", {"body": {"hello": "world"}}),
    ]
    for method, path, body in steps:
        answer = call(node, method, path, body)
        assert answer.status < 300, (method, path, answer.status, answer.body[:300])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_hostile_values_in_every_position_of_every_route(hostile_node: NodeProcess) -> None:
    node = hostile_node
    spec = strict_loads(call(node, "GET", "/openapi.json").body)
    ops = operations(spec)
    assert len(ops) >= 19, [o.name for o in ops]
    setup_state(node)
    # The valid templates work (so hostile values reach past the first check), then the hostile ones.
    for op in ops:
        if op.method == "DELETE":
            continue  # run last, below: it removes its subscriber
        for body in op.bodies or [None]:
            r = base_request(op, "valid", None if body is None else render(body, None))
            answer = send(node.port, r.method, r.target(), r.body, r.content_type)
            assert answer.status < 300, (op.name, answer.status, answer.body[:300])

    rng = random.Random(SEED)
    planned = [r for op in ops for r in requests_for(op)]
    rng.shuffle(planned)
    extra = random_requests(ops, rng)
    while len(planned) < MIN_REQUESTS:
        planned.append(next(extra))

    per_route: collections.Counter[str] = collections.Counter()
    statuses: collections.Counter[int] = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()
    slowest: list[tuple[float, str]] = []
    for request in planned:
        per_route[request.route] += 1
        t0 = time.monotonic()
        try:
            answer = send(node.port, request.method, request.target(), request.body, request.content_type,
                          request.headers, request.chunked)
        except (OSError, http.client.HTTPException) as exc:
            statuses[0] += 1
            failures.append(f"{request.route} [{request.cls}] -> no answer: {type(exc).__name__}: {exc}"[:400])
            continue
        statuses[answer.status] += 1
        slowest = sorted([*slowest, (time.monotonic() - t0, f"{request.route} [{request.cls}]")], reverse=True)[:5]
        for problem in problems_of(request, answer):
            failures.append(f"{request.route} [{request.cls}] target={request.target()[:120]!r} -> {problem}: "
                            f"{answer.status} {answer.body[:200]!r}")
    elapsed = time.monotonic() - started

    # The node is healthy, still publishes and delivers, and renders everything it stored as JSON.
    assert call(node, "GET", "/health").status == 200, node.log_tail()
    sent = call(node, "POST", "/v1/topics/fz-after/messages", {"id": "after-1", "body": {"ok": True}})
    assert sent.status == 201, sent.body[:300]
    joined = call(node, "POST", "/v1/topics/fz-after/groups/after/subscribers",
                  {"mode": "pull", "id": "after-sub", "start": "earliest"})
    assert joined.status == 201, joined.body[:300]
    got = call(node, "GET", "/v1/topics/fz-after/groups/after/messages?subscriber=after-sub&max=10")
    assert got.status == 200 and [m["id"] for m in strict_loads(got.body)["messages"]] == ["after-1"], got.body[:300]
    call(node, "POST", f"/v1/topics/{TOPIC}/groups/all/subscribers", {"mode": "pull", "id": "all-sub",
                                                                      "start": "earliest"})
    stored = 0
    for _ in range(50):
        got = call(node, "GET", f"/v1/topics/{TOPIC}/groups/all/messages?subscriber=all-sub&max=1000")
        failures.extend(f"final fetch -> {p}: {got.status} {got.body[:200]!r}"
                        for p in problems_of(base_request(ops[0], "final"), got))
        if got.status != 200:
            break
        messages = strict_loads(got.body)["messages"]
        if not messages:
            break
        stored += len(messages)
        offsets: dict[str, int] = {}
        for m in messages:
            offsets[str(m["partition"])] = max(offsets.get(str(m["partition"]), 0), m["offset"] + 1)
        call(node, "POST", f"/v1/topics/{TOPIC}/groups/all/offsets", {"subscriber": "all-sub", "offsets": offsets})
    for _ in range(20):
        polled = call(node, "GET", f"/poll/{COMPAT_ID}")
        failures.extend(f"final poll -> {p}" for p in problems_of(base_request(ops[0], "final"), polled))
        if polled.status != 200 or polled.body == b"No messages right now":
            break
    # The DELETE route's valid case, last (hostile requests with a valid path may have run it already).
    call(node, "POST", f"/v1/topics/{TOPIC}/groups/gd/subscribers", {"mode": "pull", "id": DEL_ID})
    deleted = call(node, "DELETE", f"/v1/topics/{TOPIC}/groups/gd/subscribers/{DEL_ID}")
    assert deleted.status == 200, deleted.body[:300]

    log = node.log_path.read_text(errors="replace")
    if "Traceback" in log or "unhandled error" in log:
        failures.append("the node logged an unhandled error:\n" + log[-3000:])

    print(f"\nhostile fuzz: {len(planned)} requests in {elapsed:.1f} s (seed {SEED}), "
          f"{stored} stored messages fetched back")
    for route, count in sorted(per_route.items()):
        print(f"  {count:6d}  {route}")
    print("  statuses:", dict(sorted(statuses.items())))
    print("  slowest:", ", ".join(f"{t:.2f} s {what}" for t, what in slowest))
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:200]) + \
        "\n--- node log ---\n" + node.log_tail(60)
    assert len(planned) >= MIN_REQUESTS
    assert {r.route for r in planned} == {o.name for o in ops}
