"""Signed pushes, checked by the independent ``standardwebhooks`` verifier; secret rotation with overlap."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.delivery.support import LiveNode, Receiver
from tests.support import wait_until


def _verifying(secrets: list[str], refused: list[str]) -> Any:
    """A receiver answer: 200 when ``secrets[0]`` (as it is at the time) verifies the push, else 401."""
    def respond(_payload: dict[str, Any], raw: Any) -> int:
        headers, data = raw
        try:
            Webhook(secrets[0]).verify(data, headers)
        except WebhookVerificationError as exc:
            refused.append(str(exc))
            return 401
        return 200
    return respond


class _SigningReceiver(Receiver):
    """A receiver whose answer also sees the request's raw headers and body."""

    def __init__(self, respond: Any) -> None:
        super().__init__(lambda payload: respond(payload, self.raw[-1]))


def test_pushes_verify_with_standardwebhooks_and_rotation_rejects_nothing(
        steady: LiveNode, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secrets: list[str] = []
    refused: list[str] = []
    receiver = _SigningReceiver(_verifying(secrets, refused))
    try:
        answer = steady.subscribe("signed", "g", mode="push", url=receiver.url)
        first = answer["secret"]
        assert first.startswith("whsec_")
        secrets.append(first)
        again = steady.subscribe("signed", "g", mode="push", url=receiver.url, id=answer["subscriber_id"])
        assert "secret" not in again, "the secret is returned once, at registration"

        sid = answer["subscriber_id"]
        steady.publish("signed", [{"key": f"k{i}", "body": {"i": i}} for i in range(40)])
        wait_until(lambda: len(receiver.messages()) >= 40, timeout=30, what="first pushes")

        rotated = steady.post(f"/v1/topics/signed/groups/g/subscribers/{sid}/secret", {"overlap_ms": 600_000})
        assert rotated.status_code == 201, rotated.text
        second = rotated.json()["secret"]
        assert second != first and rotated.json()["previous_valid_until_ms"] > 0
        # The receiver still checks with the old secret: the overlap sends both signatures.
        steady.publish("signed", [{"key": f"k{i}", "body": {"i": i}} for i in range(40, 80)])
        wait_until(lambda: len(receiver.messages()) >= 80, timeout=30, what="pushes during the overlap")
        headers, _ = receiver.raw[-1]
        assert len(headers["webhook-signature"].split(" ")) == 2
        secrets[0] = second  # the receiver moves to the new secret
        steady.publish("signed", [{"key": f"k{i}", "body": {"i": i}} for i in range(80, 120)])
        wait_until(lambda: len(receiver.messages()) >= 120, timeout=30, what="pushes after the switch")
        assert refused == [], "no push was rejected during the rotation"
        assert len(receiver.requests) == len(receiver.acked)

        # A rotation without overlap drops the old secret at once: only the new one signs.
        third = steady.post(f"/v1/topics/signed/groups/g/subscribers/{sid}/secret", {}).json()["secret"]
        secrets[0] = third
        steady.publish("signed", [{"key": "k", "body": "last"}])
        wait_until(lambda: len(receiver.messages()) >= 121, timeout=30, what="push after the last rotation")
        headers, data = receiver.raw[-1]
        assert len(headers["webhook-signature"].split(" ")) == 1
        with pytest.raises(WebhookVerificationError):
            Webhook(second).verify(data, headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(third).verify(data + b" ", headers)  # a tampered body fails the reference verifier
    finally:
        receiver.stop()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (first, second, third):
        assert secret not in logged and secret[6:] not in logged, "a secret is never logged"


def test_a_subscriber_may_bring_its_own_secret_and_bad_ones_are_refused(steady: LiveNode) -> None:
    mine = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
    receiver = Receiver()
    try:
        answer = steady.subscribe("own", "g", mode="push", url=receiver.url, secret=mine, format="envelope")
        assert "secret" not in answer, "a secret the caller chose is not sent back"
        steady.publish("own", [{"key": "a", "body": 1}])
        wait_until(lambda: len(receiver.messages()) >= 1, timeout=30, what="a push")
        headers, data = receiver.raw[-1]
        Webhook(mine).verify(data, headers)
        assert headers["toymb-subscriber-id"] == answer["subscriber_id"]
    finally:
        receiver.stop()
    for bad in ({"secret": "plain"}, {"secret": "whsec_!!"}, {"secret": "whsec_QUJD"}, {"secret": 7},
                {"new_secret": "yes"}, {"secret_overlap_ms": -1}, {"format": "xml"}):
        resp = steady.post("/v1/topics/own/groups/g/subscribers", {"mode": "push", "url": receiver.url, **bad})
        assert resp.status_code == 400, (bad, resp.text)
    resp = steady.post("/v1/topics/own/groups/p/subscribers", {"mode": "pull", "format": "cloudevents"})
    assert resp.status_code == 400 and "push" in resp.json()["message"]
    resp = steady.post("/v1/topics/own/groups/g/subscribers/nobody/secret", {})
    assert resp.status_code == 404


def test_an_unsigned_subscriber_gets_no_secret_and_no_signature(steady: LiveNode) -> None:
    receiver = Receiver()
    try:
        answer = steady.subscribe("plain", "g", mode="push", url=receiver.url, signing=False)
        assert "secret" not in answer
        steady.publish("plain", [{"key": "a", "body": 1}])
        wait_until(lambda: len(receiver.messages()) >= 1, timeout=30, what="a push")
        assert "webhook-signature" not in receiver.raw[-1][0]
    finally:
        receiver.stop()
    for bad in ({"signing": "no"}, {"signing": False, "new_secret": True}):
        resp = steady.post("/v1/topics/plain/groups/g/subscribers", {"mode": "push", "url": receiver.url, **bad})
        assert resp.status_code == 400, (bad, resp.text)
