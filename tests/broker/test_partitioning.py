"""Partitioning matches Kafka's own murmur2, checked against the kafka-clients jar."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.partitioning import key_partition, murmur2, partition_for
from tests.support import ROOT, need_service

JAVA = """
import org.apache.kafka.common.utils.Utils;
import java.nio.charset.StandardCharsets;
import java.io.*;
public class Murmur {
  public static void main(String[] a) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      byte[] b = line.getBytes(StandardCharsets.UTF_8);
      System.out.println(Utils.murmur2(b) + " " + Utils.toPositive(Utils.murmur2(b)) % 100);
    }
  }
}
"""


def _kafka_classpath() -> str:
    cp = os.environ.get("TOYMB_KAFKA_CLASSPATH", "")
    script = ROOT / "services" / "kafka.sh"
    if not cp and script.exists():
        result = subprocess.run(["bash", str(script), "classpath"], capture_output=True, text=True, timeout=300)
        cp = result.stdout.strip().splitlines()[-1] if result.returncode == 0 and result.stdout.strip() else ""
    return cp


def _keys() -> list[str]:
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyzABC0123456789-_.:/ éü中"
    keys = ["", "a", "ab", "abc", "abcd", "customer-7", "orders", "ключ", "😀"]
    keys += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(1000)]
    return keys


def test_murmur2_matches_kafka_clients(tmp_path: Path) -> None:
    cp = _kafka_classpath()
    need_service(bool(cp) and shutil.which("java") is not None, "the kafka-clients jar (services/kafka.sh)")
    source = tmp_path / "Murmur.java"
    source.write_text(JAVA)
    keys = _keys()
    result = subprocess.run(["java", "-cp", cp, str(source)], input="\n".join(keys) + "\n", capture_output=True,
                            text=True, timeout=120, encoding="utf-8")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(keys)
    for key, line in zip(keys, lines, strict=True):
        hash_value, partition = (int(x) for x in line.split())
        assert murmur2(key.encode("utf-8")) == hash_value, key
        assert partition_for(key, 100) == partition, key


@given(st.text(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_is_in_range_and_deterministic(key: str, partitions: int) -> None:
    p = partition_for(key, partitions)
    assert 0 <= p < partitions
    assert partition_for(key, partitions) == p
    # The remembered partition of a key is the same, the first time and from the cache.
    assert key_partition(key, partitions) == p
    assert key_partition(key, partitions) == p


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff" * 7, bytes(range(256))])
def test_murmur2_is_a_signed_32_bit_value(data: bytes) -> None:
    assert -(1 << 31) <= murmur2(data) < (1 << 31)
