"""schemathesis against ``/openapi.json`` of a real node: no 500s and no schema violations.

Every operation of the document is generated with valid (positive) and invalid (negative) data,
and every check runs: server errors, status codes and content types the document does not list,
response bodies that do not match their schema, invalid data the node accepted, and operations
that succeed without (or with a wrong) bearer token. The node runs with an admin token, which the
generated requests carry.

Each operation is a test of its own (``OPERATIONS``), so pytest-xdist spreads the fuzzing over its
workers: schemathesis seeds each operation's hypothesis test with ``SEED`` by itself, so an
operation gets the same examples alone as in a run over the whole document.
``test_every_operation_is_fuzzed`` keeps the list equal to the document.

``TOYMB_TEST_FUZZ_EXAMPLES`` (examples per operation) and ``TOYMB_TEST_FUZZ_SEED`` change the run.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from tests.support import NodeProcess

from .conftest import fuzz_node_env

schemathesis = pytest.importorskip("schemathesis")

from schemathesis import DataGenerationMethod  # noqa: E402
from schemathesis.checks import ALL_CHECKS  # noqa: E402
from schemathesis.internal.checks import CheckConfig, NegativeDataRejectionConfig  # noqa: E402
from schemathesis.runner import events, from_schema  # noqa: E402

ADMIN = "fuzz-admin-2f6c1d"
# 18 operations take input: 160 examples each is 2,880 requests (about 110 s alone on 2 cores).
EXAMPLES = int(os.environ.get("TOYMB_TEST_FUZZ_EXAMPLES", "160"))
SEED = int(os.environ.get("TOYMB_TEST_FUZZ_SEED", "20261120"))
# Every operation of the node's document, as "METHOD /path"; the ones that take no input get one
# request each (there is nothing to vary), the others EXAMPLES.
OPERATIONS = (
    "GET /health", "GET /actuator/health", "GET /ready", "GET /metrics", "GET /openapi.json",
    "GET /v1/cluster", "GET /v1/topics", "PUT /v1/topics/{topic}", "GET /v1/topics/{topic}",
    "POST /v1/topics/{topic}/messages", "POST /v1/topics/{topic}/groups/{group}/subscribers",
    "DELETE /v1/topics/{topic}/groups/{group}/subscribers/{sid}", "POST /v1/subscribers/{sid}/heartbeat",
    "GET /v1/topics/{topic}/groups/{group}/messages", "POST /v1/topics/{topic}/groups/{group}/offsets",
    "GET /v1/topics/{topic}/groups/{group}", "POST /sendmessage", "POST /advertise", "POST /subscribe",
    "GET /poll/{sid}", "POST /v1/topics/{topic}/groups/{group}/nack",
    "POST /v1/topics/{topic}/groups/{group}/extend", "POST /v1/topics/{topic}/groups/{group}/seek",
    "POST /v1/topics/{topic}/groups/{group}/subscribers/{sid}/secret", "GET /console",
    "GET /console/console.js", "GET /console/console.css", "GET /console/api/overview",
    "GET /console/api/push", "POST /console/api/bridges/action",
)


# One node per xdist worker, shared by the operations that worker fuzzes. Session scope on purpose:
# tests/conftest.py runs the tests of a module-scoped fixture on one worker, which is what
# splitting the fuzzing by operation is meant to undo.
@pytest.fixture(scope="session")
def fuzzed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = fuzz_node_env(ADMIN)
    node = NodeProcess(tmp_path_factory.mktemp("fuzz"), env=env).start()
    yield node
    node.stop()


def describe(check: object) -> str:
    example = getattr(check, "example", None)
    response = getattr(check, "response", None)
    where = "?"
    if example is not None:
        body = base64.b64decode(example.body).decode("utf-8", "replace") if example.body else ""
        where = f"{example.method} {example.full_path} query={example.query} body={body[:2000]}"
    answer = f"{response.status_code} {(response.body or '')[:200]}" if response is not None else "no answer"
    message = (getattr(check, "message", "") or "")[:300]
    return f"{getattr(check, 'name', '?')}: {message}\n    {where}\n    -> {answer}"


def takes_input(operation: dict[str, Any], path_item: dict[str, Any]) -> bool:
    """Whether an operation of the document has parameters or a body (so examples can vary)."""
    return bool(operation.get("parameters") or path_item.get("parameters") or operation.get("requestBody"))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_schemathesis_finds_nothing(fuzzed_node: NodeProcess, operation: str) -> None:
    method, path = operation.split(" ", 1)
    schema = schemathesis.from_uri(
        f"{fuzzed_node.url}/openapi.json",
        base_url=fuzzed_node.url,
        data_generation_methods=[DataGenerationMethod.positive, DataGenerationMethod.negative],
    ).include(method=method, path=path)
    runner = from_schema(
        schema,
        checks=ALL_CHECKS,
        headers={"Authorization": f"Bearer {ADMIN}"},
        seed=SEED,
        # Invalid data must be refused with one of these; 413 (over a size limit) is a refusal too.
        checks_config=CheckConfig(
            negative_data_rejection=NegativeDataRejectionConfig(
                allowed_statuses=["400", "401", "403", "404", "413", "422"]
            )
        ),
        request_timeout=10_000,
        hypothesis_settings=hypothesis.settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(hypothesis.HealthCheck),
        ),
    )
    requests_made = 0
    operations = set()
    problems: list[str] = []
    for event in runner.execute():
        if isinstance(event, events.AfterExecution):
            operations.add(event.verbose_name)
            requests_made += sum(1 for c in event.result.checks if c.name == "not_a_server_error")
            seen = set()
            for check in event.result.checks:
                if check.value.name != "success" and (check.name, check.message) not in seen:
                    seen.add((check.name, check.message))
                    problems.append(describe(check))
            problems.extend(f"{event.verbose_name}: {e.exception[:500]}" for e in event.result.errors)
        elif isinstance(event, events.InternalError):
            problems.append(f"schemathesis internal error: {event.exception_with_traceback[:1500]}")
    assert not problems, "\n".join(problems) + "\n--- node log ---\n" + fuzzed_node.log_tail(40)
    assert operations == {operation}  # this operation ran, and only it
    path_item = schema.raw_schema["paths"][path]
    if "TOYMB_TEST_FUZZ_EXAMPLES" not in os.environ:
        assert requests_made >= (EXAMPLES if takes_input(path_item[method.lower()], path_item) else 1), requests_made


def documented_operations(tmp_path: Path) -> tuple[set[tuple[str, str]], dict[str, Any]]:
    """(method, rule) of every route a node serves, and its OpenAPI document (an app not started)."""
    from broker.app import create_app

    app = create_app({"data_dir": str(tmp_path)}, start=False)
    try:
        spec = app.test_client().get("/openapi.json").json
        served = set()
        for rule in app.url_map.iter_rules():
            if rule.endpoint == "static":
                continue
            path = rule.rule
            for arg in rule.arguments:
                path = path.replace(f"<{arg}>", "{" + arg + "}")
            for method in rule.methods or ():
                if method not in ("HEAD", "OPTIONS"):
                    served.add((method, path))
        return served, spec
    finally:
        app.extensions["toymb"].store.dispose()


def test_every_operation_is_fuzzed(tmp_path: Path) -> None:
    """``OPERATIONS`` (a test each) is exactly the document's operations: a new route gets fuzzed."""
    _, spec = documented_operations(tmp_path)
    documented = sorted(f"{method.upper()} {path}" for path, item in spec["paths"].items()
                        for method in item if method != "parameters")
    assert sorted(OPERATIONS) == documented


def test_every_route_is_documented(tmp_path: Path) -> None:
    """The document lists every route the node serves (so the fuzzer reaches them all)."""
    served, spec = documented_operations(tmp_path)
    documented = {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method != "parameters"
    }
    normalize = {"{name}": "{topic}", "{topic}": "{topic}", "{group}": "{group}", "{sid}": "{sid}"}

    def norm(pair: tuple[str, str]) -> tuple[str, str]:
        method, path = pair
        for old, new in normalize.items():
            path = path.replace(old, new)
        return method, path

    assert {norm(p) for p in served} == {norm(p) for p in documented}
