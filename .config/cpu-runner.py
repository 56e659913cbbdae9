#!/usr/bin/env python3
"""A nextest target runner that records each test's CPU time.

Runs the test binary as nextest asks and appends one JSON line per test
process to $CPU_LOG (default /tmp/cpu.jsonl): the test's name, the CPU
seconds of everything it started and waited for (lite-node, anvil, cargo,
node.js, ...), and its wall time. The suite is CPU-bound on two cores, so
this, not nextest's wall time, says what a test costs (docs/benchmarks.md).

  cargo nextest run --workspace \\
    --config 'target.x86_64-unknown-linux-gnu.runner="./.config/cpu-runner.py"'
"""
import json
import os
import resource
import subprocess
import sys
import time

started = time.time()
done = subprocess.run(sys.argv[1:])
used = resource.getrusage(resource.RUSAGE_CHILDREN)
listing = "--list" in sys.argv
test = next((a for a in sys.argv[2:] if not a.startswith("-")), None)
if test is not None and not listing:
    binary = os.path.basename(sys.argv[1]).split("-")[0]
    with open(os.environ.get("CPU_LOG", "/tmp/cpu.jsonl"), "a") as log:
        log.write(json.dumps({
            "test": f"{binary}::{test}",
            "cpu": round(used.ru_utime + used.ru_stime, 1),
            "wall": round(time.time() - started, 1),
        }) + "\n")
sys.exit(done.returncode)
