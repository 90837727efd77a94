"""Issue #50's shared-prefix load on an OpenAI-compatible server (accord
serve or llama-server): REQUESTS completions, CONCURRENCY at a time, each a
system prompt plus a question of its own, TOKENS greedy tokens each. The
i-th request takes system prompt i mod SYSTEMS (default 1: one shared by
all); more system prompts than slots is many conversations on few slots. Then the time to first token of one request alone on a cold
prefix (a system prompt never sent) and on the cached one. Prints one JSON
line.

    shared_prefix.py URL MODEL_ID REQUESTS CONCURRENCY TOKENS SYSTEM_WORDS QUESTION_WORDS [SYSTEMS]
"""
import concurrent.futures
import http.client
import json
import random
import sys
import time
import urllib.parse

url, model = sys.argv[1], sys.argv[2]
requests, concurrency, tokens, system_words, question_words = (int(x) for x in sys.argv[3:8])
systems = int(sys.argv[8]) if len(sys.argv) > 8 else 1
host = urllib.parse.urlparse(url)
WORDS = ["time", "little", "day", "big", "dog", "cat", "sun", "tree", "girl", "boy", "happy", "play", "ball",
         "friend", "house", "park", "bird", "red", "blue", "toy", "mom", "walk", "jump", "sky", "fish"]


def text(seed, words):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


SYSTEMS = [text(1 + 1000 * k, system_words) for k in range(systems)]
SYSTEM = SYSTEMS[0]


def post(body):
    connection = http.client.HTTPConnection(host.hostname, host.port, timeout=3600)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return connection, connection.getresponse()


def completion(i):
    # ignore_eos: llama-server's own field, so both sides generate every token.
    prompt = SYSTEMS[i % systems] + "\n" + text(100 + i, question_words)
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    connection, reply = post(body)
    answer = json.loads(reply.read())
    connection.close()
    if reply.status != 200:
        raise RuntimeError(f"status {reply.status}: {answer}")
    return answer["usage"]["completion_tokens"]


def first_token_seconds(prompt):
    started = time.monotonic()
    connection, reply = post({"model": model, "prompt": prompt, "max_tokens": 2, "temperature": 0, "stream": True})
    seconds = None
    while seconds is None:
        line = reply.readline()
        if not line:
            raise RuntimeError("the stream ended before a token")
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                seconds = time.monotonic() - started
    reply.read()
    connection.close()
    return seconds


cold = first_token_seconds(text(2, system_words) + "\n" + text(3, question_words))
started = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
    generated = sum(pool.map(completion, range(requests)))
elapsed = time.monotonic() - started
cached = first_token_seconds(SYSTEM + "\n" + text(4, question_words))
print(json.dumps({"requests": requests, "tokens": generated, "seconds": elapsed,
                  "tokens_per_second": generated / elapsed, "cold_first_token_seconds": cold,
                  "cached_first_token_seconds": cached}))
