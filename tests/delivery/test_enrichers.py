"""Enrichers: real plug-in classes, registered by configuration and by entry point."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from broker.app import create_app
from broker.enrichers import TopicEnricher
from broker.envelope import render_row
from broker.errors import ConfigError

INITS: list[str] = []


class Upper(TopicEnricher):
    """Upper-cases text bodies and stamps a header."""

    def init(self) -> None:
        INITS.append("upper")

    def enrich(self, message: dict[str, Any]) -> dict[str, Any]:
        if isinstance(message.get("body"), str):
            message["body"] = message["body"].upper()
        message["headers"]["enriched-by"] = "upper"
        return message


class Picky(TopicEnricher):
    """Refuses any message whose body mentions "bad"."""

    def enrich(self, message: dict[str, Any]) -> dict[str, Any]:
        if "bad" in str(message.get("body")):
            raise ValueError("no bad messages here")
        return message


class Stamp(TopicEnricher):
    def enrich(self, message: dict[str, Any]) -> dict[str, Any]:
        message["headers"]["stamp"] = "entry-point"
        return message


class BrokenInit(TopicEnricher):
    def init(self) -> None:
        raise RuntimeError("cannot connect to the reference data")


def make_app(tmp_path: Path, *enrichers: str) -> Flask:
    return create_app({"data_dir": str(tmp_path), "enriching_topics": enrichers})


@pytest.fixture
def enriched(tmp_path: Path) -> Iterator[FlaskClient]:
    INITS.clear()
    app = make_app(tmp_path, f"shout={__name__}:Upper", f"strict={__name__}:Picky")
    yield app.test_client()
    app.extensions["toymb"].stop()


def stored(client: FlaskClient, topic: str) -> list[dict[str, Any]]:
    node = client.application.extensions["toymb"]
    ends = node.store.end_offsets(topic)
    return [render_row(r) for p in sorted(ends) for r in node.store.read_range(topic, p, 0, 1000)]


def test_a_configured_enricher_rewrites_messages_and_is_initialised_once(enriched: FlaskClient) -> None:
    for word in ("hello", "world"):
        resp = enriched.post("/v1/topics/shout/messages",
                             json={"id": word, "body": word, "content_type": "text/plain"})
        assert resp.status_code == 201, resp.get_json()
    assert INITS == ["upper"], "init() ran once, at startup"
    rows = stored(enriched, "shout")
    assert sorted(r["body"] for r in rows) == ["HELLO", "WORLD"]
    assert all(r["headers"] == {"enriched-by": "upper"} for r in rows)
    assert enriched.post("/v1/topics/plain/messages", json={"body": "calm", "content_type": "text/plain"}
                         ).status_code == 201
    assert [r["body"] for r in stored(enriched, "plain")] == ["calm"], "other topics are not enriched"


def test_a_failing_enricher_rejects_the_publish_and_nothing_is_stored(enriched: FlaskClient) -> None:
    batch = {"messages": [{"id": "ok-1", "body": "fine"}, {"id": "no", "body": "bad apple"}]}
    resp = enriched.post("/v1/topics/strict/messages", json=batch)
    assert resp.status_code == 422
    assert resp.get_json()["error"] == "enricher_failed"
    assert "no bad messages here" in resp.get_json()["message"]
    assert stored(enriched, "strict") == []
    assert enriched.post("/v1/topics/strict/messages", json={"id": "ok-2", "body": "fine"}).status_code == 201
    assert [r["id"] for r in stored(enriched, "strict")] == ["ok-2"]


def test_an_entry_point_enricher_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    dist = site / "toymb_test_enrichers-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toymb-test-enrichers\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[toymb.enrichers]\nstamped = {__name__}:Stamp\n")
    monkeypatch.syspath_prepend(str(site))
    app = make_app(tmp_path / "data")
    try:
        client = app.test_client()
        assert client.post("/v1/topics/stamped/messages", json={"body": 1}).status_code == 201
        assert [r["headers"] for r in stored(client, "stamped")] == [{"stamp": "entry-point"}]
    finally:
        app.extensions["toymb"].stop()


@pytest.mark.parametrize("target", [f"{__name__}:Missing", "no_such_module_xyz:Thing",
                                    f"{__name__}:BrokenInit"])
def test_a_bad_enricher_stops_startup(tmp_path: Path, target: str) -> None:
    with pytest.raises(ConfigError):
        make_app(tmp_path, f"t={target}")
