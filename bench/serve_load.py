"""Load on an OpenAI-compatible server (accord serve or llama-server):
STREAMS concurrent greedy completions of TOKENS tokens, then one streamed
request alone for its time to first token. Prints one JSON line.

    serve_load.py URL MODEL_ID STREAMS TOKENS PROMPT
"""
import concurrent.futures
import http.client
import json
import sys
import time
import urllib.parse

url, model, streams, tokens, prompt = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
host = urllib.parse.urlparse(url)


def post(body):
    connection = http.client.HTTPConnection(host.hostname, host.port, timeout=600)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return connection, connection.getresponse()


def completion(_):
    # ignore_eos: llama-server's own field, so both sides generate every token.
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    connection, reply = post(body)
    answer = json.loads(reply.read())
    connection.close()
    if reply.status != 200:
        raise RuntimeError(f"status {reply.status}: {answer}")
    return answer["usage"]["completion_tokens"]


def first_token_seconds():
    started = time.monotonic()
    connection, reply = post({"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True})
    while True:
        line = reply.readline()
        if not line:
            raise RuntimeError("the stream ended before a token")
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                seconds = time.monotonic() - started
                break
    reply.read()
    connection.close()
    return seconds


completion(0)  # warm-up
started = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(streams) as pool:
    generated = sum(pool.map(completion, range(streams)))
elapsed = time.monotonic() - started
ttft = min(first_token_seconds() for _ in range(3))
print(json.dumps({"streams": streams, "tokens": generated, "seconds": elapsed, "tokens_per_second": generated / elapsed,
                  "first_token_seconds": ttft}))
