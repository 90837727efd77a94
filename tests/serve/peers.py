"""accord serve --peers on three loopback nodes with --parallel 4 (each node
--slots 4): four greedy completions at once each give the text `accord
generate` gives alone; nodes with too few --slots are a clear error.

    peers.py ACCORD_BINARY SHARED_DIR
ACCORD_SHARED, where set, overrides SHARED_DIR as it does for every test.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import urllib.request

ACCORD, SHARED = sys.argv[1], os.environ.get("ACCORD_SHARED") or sys.argv[2]
MODEL = os.path.join(SHARED, "models", "stories260K.bin")
PROMPTS = ["Once upon a time", "The little dog", "One day, Lily", "Tom had a red ball"]
MAX_TOKENS = 24
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, flush=True)


def started(command, marker):
    """A process of `command` and the rest of the first stdout line holding `marker`."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if marker in line:
            return process, line.split(marker, 1)[1].strip()
    process.kill()
    raise RuntimeError(" ".join(command[:2]) + " did not start")


def node(slots):
    """An `accord node` on a free loopback port serving the shared models with `slots`."""
    return started([ACCORD, "node", "--listen", "127.0.0.1:0", "--model-dir", os.path.dirname(MODEL), "--slots",
                    str(slots)], "listening on ")


def generate_text(prompt):
    """What `accord generate` gives greedily after `prompt`, prompt excluded."""
    out = subprocess.run([ACCORD, "generate", "--model", MODEL, "--prompt", prompt, "--max-tokens", str(MAX_TOKENS),
                          "--temperature", "0", "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["text"][len(prompt):]


def complete(url, prompt):
    body = json.dumps({"model": "stories260K", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
    request = urllib.request.Request(url + "/v1/completions", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())["choices"][0]["text"]


def serve_on(peers, parallel):
    return [ACCORD, "serve", "--model", MODEL, "--listen", "127.0.0.1:0", "--log-level", "warn", "--peers",
            ",".join(peers), "--parallel", str(parallel)]


def four_at_once(expected):
    nodes = [node(4) for _ in range(3)]
    server = None
    try:
        server, url = started(serve_on([address for _, address in nodes], 4), "serving on ")
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            texts = list(pool.map(lambda prompt: complete(url, prompt), PROMPTS))
        for prompt, text in zip(PROMPTS, texts):
            check(text == expected[prompt], f"{prompt!r}: {text!r} is not generate's {expected[prompt]!r}")
        server.terminate()
        check(server.wait(timeout=60) == 0, "accord serve exits 0 on SIGTERM")
    finally:
        for process in [server] + [process for process, _ in nodes]:
            if process and process.poll() is None:
                process.kill()
                process.wait()


def too_few_slots():
    process, address = node(1)
    try:
        out = subprocess.run(serve_on([address], 2), capture_output=True, text=True, timeout=120)
        said = out.stdout + out.stderr
        check(out.returncode != 0, "serve --parallel 2 on a node of one slot fails")
        check("slot 2 of 2" in said and address in said and "--slots" in said,
              f"the error names the slot, the node and --slots: {said!r}")
    finally:
        process.kill()
        process.wait()


def main():
    expected = {prompt: generate_text(prompt) for prompt in PROMPTS}
    four_at_once(expected)
    too_few_slots()
    print("accord serve --peers --parallel 4:", "FAILED " + "; ".join(failures) if failures else "passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
