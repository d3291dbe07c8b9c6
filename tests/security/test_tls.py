"""HTTPS served directly: ``TOYMB_TLS_CERT``/``TOYMB_TLS_KEY`` make ``toymb serve`` speak TLS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from tests.support import NodeProcess, wait_until

from .conftest import ADM, bearer


def make_cert(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, made with the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=toymb-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.mark.slow
def test_a_node_serves_https_with_tokens(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    env = {"TOYMB_TLS_CERT": str(cert), "TOYMB_TLS_KEY": str(key), "TOYMB_TOKENS": f"{ADM}=admin"}
    node = NodeProcess(tmp_path / "node", env=env).start(wait=False)
    https = node.url.replace("http://", "https://")
    try:

        def ready() -> bool:
            assert node.proc is not None and node.proc.poll() is None, node.log_tail()
            try:
                return requests.get(f"{https}/ready", verify=str(cert), timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout=60, what="the HTTPS node")
        stored = requests.post(
            f"{https}/v1/topics/tls/messages",
            json={"body": {"secure": True}},
            headers=bearer(ADM),
            verify=str(cert),
            timeout=10,
        )
        assert stored.status_code == 201, stored.text
        assert (
            requests.post(
                f"{https}/v1/topics/tls/messages", json={"body": 1}, verify=str(cert), timeout=10
            ).status_code
            == 401
        )
        topic = requests.get(f"{https}/v1/topics/tls", headers=bearer(ADM), verify=str(cert), timeout=10)
        assert topic.json()["end_offsets"][str(stored.json()["partition"])] == 1
        # The certificate is the one configured; an unverified client is refused by the client's check.
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"{https}/health", timeout=10)
        # Plain HTTP on the TLS port gets no HTTP answer.
        with pytest.raises(requests.RequestException):
            requests.get(f"{node.url}/health", timeout=5)
    finally:
        node.stop()
    assert node.proc is not None and node.proc.returncode == 0, node.log_tail()
    log = node.log_tail(200)
    assert f"on https://127.0.0.1:{node.port}" in log
    assert ADM not in log


def test_bad_certificate_files_stop_startup(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    env = {"TOYMB_TLS_CERT": str(tmp_path / "cert.pem"), "TOYMB_TLS_KEY": str(tmp_path / "cert.pem")}
    node = NodeProcess(tmp_path / "node", env=env).start(wait=False)
    try:
        assert node.proc is not None and node.proc.wait(timeout=60) != 0
        assert "cannot load tls_cert/tls_key" in node.log_tail()
    finally:
        node.stop()
