"""Throughput of `accord serve --peers` on three loopback nodes (--slots 4)
with --parallel 1 and 4: 16 greedy completions of 64 tokens of stories260K
from 4 clients at once, each configuration twice.

    python3 bench/serve_peers.py ACCORD SHARED_DIR
"""
import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
import peers  # noqa: E402 - reads ACCORD and SHARED from sys.argv

peers.MAX_TOKENS = 64
REQUESTS, CLIENTS = 16, 4

for parallel in (1, 4, 1, 4):
    nodes = [peers.node(4) for _ in range(3)]
    server, url = peers.started(peers.serve_on([address for _, address in nodes], parallel), "serving on ")
    try:
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(lambda i: peers.complete(url, peers.PROMPTS[i % len(peers.PROMPTS)]), range(REQUESTS)))
        seconds = time.monotonic() - started
        print(f"--parallel {parallel}: {REQUESTS} requests x {peers.MAX_TOKENS} tokens, {CLIENTS} clients: "
              f"{seconds:.2f} s, {REQUESTS * peers.MAX_TOKENS / seconds:.0f} tokens/s", flush=True)
    finally:
        for process in [server] + [process for process, _ in nodes]:
            process.kill()
            process.wait()
