"""Fixtures of the security tests: an in-process node with tokens, and the tokens themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from broker.app import create_app
from tests.support import NodeProcess

# Each token's secret names what it is, so a failing assertion reads well.
PUB = "pub-orders-7f3a9c"  # publish on orders.*
CON = "con-orders-1b2d4e"  # consume on orders.*
BOTH = "both-orders-a-55aa"  # publish+consume on orders.a only
ADM = "admin-everything-9e8d"  # admin on every topic
CLUSTER = "cluster-secret-0c0c"
TOKENS = (
    f"{PUB}=publish@orders.*",
    f"{CON}=consume@orders.*",
    f"{BOTH}=publish+consume@orders.a",
    f"{ADM}=admin",
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def secure_app(tmp_path: Path) -> Iterator[Flask]:
    """A started in-process node with the tokens above, a cluster token and a loopback push allowlist."""
    app = create_app(
        {
            "data_dir": str(tmp_path),
            "tokens": TOKENS,
            "cluster_token": CLUSTER,
            "push_allow": ("127.0.0.0/8",),
        }
    )
    yield app
    app.extensions["toymb"].stop()


@pytest.fixture
def secure(secure_app: Flask) -> FlaskClient:
    return secure_app.test_client()


def fuzz_node_env(admin_token: str, **extra: str) -> dict[str, str]:
    """Settings of a node that fuzzers attack: one admin token, small limits, quick pushes."""
    return {
        "TOYMB_TOKENS": f"{admin_token}=admin",
        "TOYMB_MAX_WAIT_MS": "50",
        "TOYMB_PUSH_ALLOW": "127.0.0.1/32",
        "TOYMB_DEFAULT_PARTITIONS": "4",
        "TOYMB_MAX_PARTITIONS": "16",
        "TOYMB_PUSH_MAX_ATTEMPTS": "1",
        "TOYMB_PUSH_TIMEOUT_MS": "200",
        "TOYMB_LOG_LEVEL": "WARNING",
        **extra,
    }


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node whose idle and header timeouts are short (1.5 s), so tests can watch them act."""
    env = {"TOYMB_IDLE_TIMEOUT_MS": "1500", "TOYMB_HEADER_TIMEOUT_MS": "1500"}
    with NodeProcess(tmp_path_factory.mktemp("quick"), env=env) as proc:
        yield proc
