"""Typed enrichers, like ToyMB's EnrichableTopic: the body decoded into a dataclass or a
msgspec.Struct, enriched, and stored encoded back in its own form."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from flask.testing import FlaskClient

from broker.app import create_app
from broker.enrichers import TypedEnricher
from tests.delivery.test_enrichers import stored


@dataclasses.dataclass
class Order:
    orderId: int  # noqa: N815 - the field name ToyMB's Java classes use
    total: float
    currency: str = "EUR"


class OrderWithTax(TypedEnricher):
    body_type = Order

    def enrich_body(self, body: Order) -> Order:
        return dataclasses.replace(body, total=round(body.total * 1.2, 2))


class Payment(msgspec.Struct):
    payer: str
    cents: int
    approved: bool = False


class ApprovePayments(TypedEnricher):
    body_type = Payment

    def enrich_body(self, body: Payment) -> Payment:
        return Payment(body.payer, body.cents, approved=body.cents < 10_000)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    app = create_app({"data_dir": str(tmp_path),
                      "enriching_topics": (f"orders={__name__}:OrderWithTax", f"payments={__name__}:ApprovePayments")})
    yield app.test_client()
    app.extensions["toymb"].stop()


def test_a_dataclass_body_is_decoded_enriched_and_stored_in_its_own_form(client: FlaskClient) -> None:
    assert client.post("/v1/topics/orders/messages", json={"body": {"orderId": 1, "total": 10}}).status_code == 201
    # ToyMB's driver sends the object serialised into a string: it stays a string, enriched.
    answer = client.post("/sendmessage", json={"id": None, "topicName": "orders", "key": "k",
                                               "body": json.dumps({"orderId": 2, "total": 5.5}), "requestor": None})
    assert (answer.status_code, answer.text) == (200, "ack")
    rows = sorted(stored(client, "orders"), key=lambda r: r["timestamp"])
    bodies = {r["content_type"]: r["body"] for r in rows}
    assert bodies["application/json"] == {"orderId": 1, "total": 12.0, "currency": "EUR"}
    assert json.loads(bodies["text/plain"]) == {"orderId": 2, "total": 6.6, "currency": "EUR"}


def test_a_msgspec_struct_body_is_decoded_and_enriched(client: FlaskClient) -> None:
    for cents in (500, 50_000):
        assert client.post("/v1/topics/payments/messages",
                           json={"body": {"payer": "ann", "cents": cents}}).status_code == 201
    assert sorted((r["body"]["cents"], r["body"]["approved"]) for r in stored(client, "payments")) == [
        (500, True), (50_000, False)]


@pytest.mark.parametrize(("body", "fragment"), [
    ({"orderId": 1, "total": "ten"}, "$.total"),
    ({"total": 3}, "orderId"),
    ([1, 2], "Expected `object`"),
    ("not json at all", "not JSON"),
])
def test_a_body_that_does_not_decode_is_refused_with_422_naming_the_field(
        client: FlaskClient, body: object, fragment: str) -> None:
    message: dict[str, object] = {"id": "bad-1", "body": body}
    if isinstance(body, str):
        message["content_type"] = "text/plain"
    answer = client.post("/v1/topics/orders/messages", json=message)
    assert answer.status_code == 422
    assert answer.get_json()["error"] == "enricher_failed" and fragment in answer.get_json()["message"]
    assert stored(client, "orders") == []
    binary = client.post("/v1/topics/orders/messages", json={"body_base64": "AAE="})
    assert binary.status_code == 422 and "binary" in binary.get_json()["message"]
