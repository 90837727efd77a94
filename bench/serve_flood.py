#!/usr/bin/env python3
"""accord serve under a flood of long prompts: does /health stay quick, and
does SIGTERM end the process within the grace period?

    bench/serve_flood.py ACCORD [SECONDS]

Writes a synthetic 15M-shaped model (`accord synth`, random weights) into a
temporary folder, serves it with --parallel 4, and has 4 clients send 68 KB
prompts of prose (max_tokens 1) back to back for SECONDS (default 60) while
a prober asks GET /health every 50 ms on a connection of its own. The
context is 40960: the synthetic vocabulary makes 68 KB of prose 34,259
tokens, past 32768, and the flood must be of prompts the server admits
(tokenizes and prefills), not of ones it refuses. Then the clients stop,
SIGTERM is sent (grace 10 s), and the script prints the probes' latency
percentiles, the flood's answers by status (those cut at the grace period
are 503) and how long the process took to end. Only loopback is used.
"""
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ACCORD = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
CLIENTS = 4
PROMPT_BYTES = 68 * 1024
GRACE_MS = 10000

PARAGRAPH = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
             "One day, she saw a big, red ball in the park and asked her mom if she could play with it. ")


def post(url, body, timeout):
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def flood(url, stop, answers):
    prompt = (PARAGRAPH * (PROMPT_BYTES // len(PARAGRAPH) + 1))[:PROMPT_BYTES]
    while not stop.is_set():
        answers.append(post(url, {"model": "flood", "prompt": prompt, "max_tokens": 1}, timeout=600))


def probe(host, port, stop, latencies):
    while not stop.is_set():
        started = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=30) as connection:
                connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                answer = connection.recv(4096)
            if answer.startswith(b"HTTP/1.1 200"):
                latencies.append(time.monotonic() - started)
        except OSError:
            pass
        time.sleep(0.05)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    folder = tempfile.mkdtemp(prefix="accord-flood-")
    try:
        model = os.path.join(folder, "flood.bin")
        subprocess.run([ACCORD, "synth", "--dim", "288", "--hidden", "768", "--layers", "6", "--heads", "6",
                        "--vocab", "32000", "--seq", "40960", "--out", model], check=True, capture_output=True)
        server = subprocess.Popen([ACCORD, "serve", "--model", model, "--listen", "127.0.0.1:0", "--parallel",
                                   str(CLIENTS), "--log-level", "warn", "--shutdown-grace-ms", str(GRACE_MS)],
                                  stdout=subprocess.PIPE, text=True)
        address = server.stdout.readline().split("http://", 1)[1].strip()
        host, port = address.split(":")
        stop = threading.Event()
        answers, latencies = [], []
        with concurrent.futures.ThreadPoolExecutor(CLIENTS + 1) as pool:
            pool.submit(probe, host, int(port), stop, latencies)
            for _ in range(CLIENTS):
                pool.submit(flood, "http://" + address, stop, answers)
            time.sleep(SECONDS)
            stop.set()
            signalled = time.monotonic()
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=120)
            ended = time.monotonic() - signalled
        statuses = {status: answers.count(status) for status in set(answers)}
        print(f"flood: {CLIENTS} clients of {PROMPT_BYTES // 1024} KB prompts for {SECONDS:.0f} s; "
              f"answers by status {statuses}")
        if latencies:
            print(f"/health: {len(latencies)} probes, p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
                  f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
        print(f"SIGTERM to exit: {ended:.2f} s (grace {GRACE_MS / 1000:.0f} s), status {code}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
