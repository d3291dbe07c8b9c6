"""The benches' CPU figures count the work of descendants that ended during the run.

The journal bench samples its process tree's CPU before and after a run; Spark's Python workers and
its streaming-source runner end (and are waited for by the JVM) before the last sample, and their
CPU was left out of "CPU-s per 1,000 rows".
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bench.journal_lag import tree_cpu_s

BURN = textwrap.dedent("""
    import subprocess, sys
    # A child that works a known amount of CPU and ends; this process waits for it, as the JVM does.
    subprocess.run([sys.executable, "-c",
                    "import time\\nwhile time.process_time() < 0.4: pass"], check=True)
    print("done", flush=True)
    sys.stdin.read()   # stay alive until the test has taken its sample
""")


def test_the_cpu_of_an_ended_and_reaped_descendant_is_counted() -> None:
    parent = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"done\n"
        # The parent itself only started Python (well under 0.4 CPU-s); the rest is its ended child's.
        assert tree_cpu_s(parent.pid) >= 0.4
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(30)
