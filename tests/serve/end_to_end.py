"""accord serve with real clients: the openai package and curl, bad input,
a slow client, a bounded load test, and the same load with faults injected.

Run by tests/serve/end_to_end.sh, which makes the virtual environment:
    end_to_end.py ACCORD_BINARY SHARED_DIR
"""
import concurrent.futures
import http.client as http_client
import json
import os
import socket
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai

from serve_process import Server, check, failures

ACCORD, SHARED = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SHARED, "models", "stories260K.bin")
MODEL_ID = "stories260K"
PROMPTS = ["Once upon a time", "The little dog", "One day, Lily", "Tom had a red ball"]
Server.accord, Server.model = ACCORD, MODEL


def generate_text(prompt, max_tokens, *options):
    """What `accord generate` gives greedily after `prompt`, prompt excluded."""
    out = subprocess.run([ACCORD, "generate", "--model", MODEL, "--prompt", prompt, "--max-tokens", str(max_tokens),
                          "--temperature", "0", "--json", *options], check=True, capture_output=True, text=True)
    text = json.loads(out.stdout)["text"]
    assert text.startswith(prompt), (text, prompt)
    return text[len(prompt):]


def http(server, method, path, body=None, headers=None):
    """(status, body) of one request."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def curl(server, path, body, *flags):
    out = subprocess.run(["curl", "-sS", *flags, server.url + path, "-H", "Content-Type: application/json",
                          "-d", json.dumps(body)], check=True, capture_output=True, text=True, timeout=120)
    return out.stdout


def test_clients(server, client):
    expected = generate_text(PROMPTS[0], 24)
    reply = client.completions.create(model=MODEL_ID, prompt=PROMPTS[0], max_tokens=24, temperature=0)
    check(reply.choices[0].text == expected, f"openai completion {reply.choices[0].text!r} == generate's {expected!r}")
    check(reply.usage.completion_tokens == 24, "usage counts the completion's tokens")
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
        model=MODEL_ID, prompt=PROMPTS[0], max_tokens=24, temperature=0, stream=True) if chunk.choices)
    check(streamed == expected, f"openai streamed completion {streamed!r} == {expected!r}")

    chat_prompt = "User: Hi\nAssistant:"
    chat_expected = generate_text(chat_prompt, 12).split("\nUser:")[0]
    messages = [{"role": "user", "content": "Hi"}]
    chat = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=12, temperature=0)
    check(chat.choices[0].message.content == chat_expected,
          f"openai chat {chat.choices[0].message.content!r} == {chat_expected!r}")
    chat_streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model=MODEL_ID, messages=messages, max_tokens=12, temperature=0, stream=True) if chunk.choices)
    check(chat_streamed == chat_expected, f"openai streamed chat {chat_streamed!r} == {chat_expected!r}")

    plain = json.loads(curl(server, "/v1/completions",
                            {"model": MODEL_ID, "prompt": PROMPTS[0], "max_tokens": 24, "temperature": 0}))
    check(plain["choices"][0]["text"] == expected, "curl completion equals generate's")
    events = curl(server, "/v1/completions", {"model": MODEL_ID, "prompt": PROMPTS[0], "max_tokens": 24,
                                              "temperature": 0, "stream": True}, "-N")
    check(events.rstrip().endswith("data: [DONE]"), "curl's stream ends in [DONE]")
    scored = client.completions.create(model=MODEL_ID, prompt=PROMPTS[0], max_tokens=4, temperature=0, logprobs=2,
                                       echo=True).choices[0]
    check("".join(scored.logprobs.tokens) == scored.text and len(scored.logprobs.token_logprobs) == 4 + 4,
          f"completion log-probabilities with echo: {scored.logprobs.tokens!r} make {scored.text!r}")
    chat_scored = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=4, temperature=0,
                                                 logprobs=True, top_logprobs=2)
    check(len(chat_scored.choices[0].logprobs.content) == chat_scored.usage.completion_tokens and
          all(len(token.top_logprobs) == 2 for token in chat_scored.choices[0].logprobs.content),
          "chat log-probabilities, two alternatives a token")
    seeded = [client.completions.create(model=MODEL_ID, prompt="Once", max_tokens=20, temperature=1.0, seed=42)
              .choices[0].text for _ in range(2)]
    check(seeded[0] == seeded[1], "the same seed gives the same sampled text")


def test_bad_input(server, client):
    cases = [
        ("malformed JSON", b"{nope", 400),
        ("wrong type", {"model": MODEL_ID, "prompt": "x", "max_tokens": "many"}, 400),
        ("max_tokens 0", {"model": MODEL_ID, "prompt": "x", "max_tokens": 0}, 400),
        ("unknown model", {"model": "gpt-9", "prompt": "x"}, 404),
        ("prompt past the context", {"model": MODEL_ID, "prompt": "a " * 2000}, 400),
        ("body over the limit", {"model": MODEL_ID, "prompt": "a" * 70000}, 413),
    ]
    for what, body, status in cases:
        code, text = http(server, "POST", "/v1/completions", body)
        check(code == status, f"{what}: status {code} == {status}")
        try:
            error = json.loads(text)["error"]
            check(bool(error["message"]) and "type" in error, f"{what}: an OpenAI error body")
        except (ValueError, KeyError):
            check(False, f"{what}: an OpenAI error body, got {text!r}")
    try:
        client.completions.create(model=MODEL_ID, prompt="x", max_tokens=-1)
        check(False, "openai raises on max_tokens -1")
    except openai.BadRequestError as error:
        check(error.body["param"] == "max_tokens" if isinstance(error.body, dict) else True, "the error names max_tokens")

    # A client that sends a byte at a time is cut off at the deadline (2 s
    # here); the server keeps serving meanwhile. It stops sending before
    # the deadline: bytes sent after the server closed would reset the
    # connection and lose the 408.
    with socket.create_connection(server.address.split(":")) as slow:
        slow.settimeout(60)
        answer = b""
        for byte in b"POST /v1/":
            slow.sendall(bytes([byte]))
            time.sleep(0.1)
        check(http(server, "GET", "/health")[0] == 200, "the server answers others while a client is slow")
        try:
            answer = slow.recv(4096)
        except OSError:
            pass
        check(answer.startswith(b"HTTP/1.1 408"), f"a slow client gets 408, got {answer[:40]!r}")
    # The HTTP parser's refusals are counted too.
    with socket.create_connection(server.address.split(":")) as garbage:
        garbage.settimeout(60)
        garbage.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        check(garbage.recv(4096).startswith(b"HTTP/1.1 400"), "a malformed request gets 400")
    metrics = http(server, "GET", "/metrics")[1]
    for status in ("400", "408", "413"):
        check(f'status="{status}"' in metrics, f"/metrics counts the {status} answers")
    check(http(server, "GET", "/ready")[0] == 200, "ready after the bad input")


def test_keep_alive(server):
    """Whole answers keep the connection where the client asks (HTTP/1.1's default); streams close it."""
    connection = http_client.HTTPConnection(*server.address.split(":"), timeout=120)
    body = json.dumps({"model": MODEL_ID, "prompt": PROMPTS[1], "max_tokens": 4, "temperature": 0})
    sockets = []
    for _ in range(3):
        connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        reply = connection.getresponse()
        check(reply.status == 200 and reply.getheader("Connection") == "keep-alive",
              f"a completion keeps the connection ({reply.status}, {reply.getheader('Connection')})")
        reply.read()
        sockets.append(connection.sock)
    check(sockets[0] is not None and all(sock is sockets[0] for sock in sockets),
          "three completions on one connection")
    connection.request("GET", "/health")
    check(connection.getresponse().read() == b'{"status":"ok"}', "a GET after them on the same connection")
    connection.close()


def test_disconnect(server):
    with socket.create_connection(server.address.split(":")) as client:
        body = json.dumps({"model": MODEL_ID, "prompt": "Once", "max_tokens": 250, "stream": True}).encode()
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        client.recv(100)
    for _ in range(100):
        metrics = http(server, "GET", "/metrics")[1]
        if 'status="499"' in metrics:
            break
        time.sleep(0.1)
    check('status="499"' in metrics, "a client that went away is counted 499")


def test_api_key():
    """--api-key-file: OpenAI clients send the key as a Bearer token; /health stays open."""
    key_file = tempfile.NamedTemporaryFile("w", suffix=".key", delete=False)
    key_file.write("k3y-for-the-tests\n")
    key_file.close()
    server = Server("--api-key-file", key_file.name)
    try:
        good = openai.OpenAI(base_url=server.url + "/v1", api_key="k3y-for-the-tests", max_retries=0)
        reply = good.completions.create(model=MODEL_ID, prompt="Once", max_tokens=3, temperature=0)
        check(reply.usage.completion_tokens == 3, "the right key is served")
        try:
            openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
            check(False, "a wrong key is refused")
        except openai.AuthenticationError as error:
            check(error.status_code == 401, f"a wrong key gets 401 ({error.status_code})")
        check(http(server, "GET", "/health")[0] == 200, "/health needs no key")
        check(http(server, "GET", "/metrics")[0] == 401, "/metrics needs the key")
    finally:
        server.stop()
        os.unlink(key_file.name)
    # Beyond loopback without a key: a warning, before any request.
    with tempfile.TemporaryFile("w+") as log:
        exposed = Server(listen="0.0.0.0:0", stderr=log)
        exposed.stop()
        log.seek(0)
        check("without an API key" in log.read(), "listening beyond loopback without a key warns")


def raw_request(server, body, timeout=120):
    """A socket that sent one completion request, for answers read as they come."""
    connection = socket.create_connection(server.address.split(":"))
    connection.settimeout(timeout)
    data = json.dumps(body).encode()
    connection.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return connection


def read_to_close(connection):
    answer = b""
    try:
        while chunk := connection.recv(65536):
            answer += chunk
    except OSError:
        pass
    connection.close()
    return answer


def wait_for(condition, what, seconds=120):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            check(False, what)
            return False
        time.sleep(0.02)
    return True


def slow_model(folder):
    """A synthetic model slow enough that a request is still running when the tests signal."""
    path = os.path.join(folder, "slow.bin")
    subprocess.run([ACCORD, "synth", "--dim", "288", "--hidden", "768", "--layers", "6", "--heads", "6",
                    "--vocab", "512", "--seq", "4096", "--out", path], check=True, capture_output=True)
    return path


def test_shutdown(model):
    """SIGTERM: queued requests 503, running ones finish within the grace period or are cut; exit 0.
    A second SIGTERM ends at once."""
    # Greedy: the random weights never sample the end of the text from "Once" (4000 tokens, a few seconds).
    long_stream = {"model": "slow", "prompt": "Once", "max_tokens": 4000, "stream": True, "temperature": 0}
    server = Server("--parallel", "1", "--shutdown-grace-ms", "1000", model=model)
    stream = raw_request(server, long_stream)
    check(stream.recv(4096).startswith(b"HTTP/1.1 200"), "the long stream began")
    queued = concurrent.futures.ThreadPoolExecutor(1).submit(
        http, server, "POST", "/v1/completions", {"model": "slow", "prompt": "Once", "max_tokens": 5})
    wait_for(lambda: metric(server, "accord_queued_requests") == 1, "the second request is queued")
    signalled = time.monotonic()
    server.process.terminate()
    status, body = queued.result(timeout=120)
    check(status == 503 and "shutting down" in body, f"a queued request is answered 503 ({status} {body})")
    events = read_to_close(stream).decode(errors="replace")
    check('"error"' in events and events.rstrip().endswith("data: [DONE]"),
          f"a stream past the grace period ends with an error event and [DONE]: ...{events[-300:]!r}")
    code = server.process.wait(timeout=60)
    seconds = time.monotonic() - signalled
    check(code == 0, f"exit 0 after the grace period ({code})")
    check(seconds < 30, f"the process ended soon after the grace period ({seconds:.1f} s)")

    # Within the grace period a running request finishes whole.
    server = Server("--parallel", "1", "--shutdown-grace-ms", "120000", model=model)
    running = concurrent.futures.ThreadPoolExecutor(1).submit(
        http, server, "POST", "/v1/completions", {"model": "slow", "prompt": "Once", "max_tokens": 300,
                                                  "temperature": 0})
    wait_for(lambda: metric(server, "accord_active_requests") == 1, "the request runs")
    server.process.terminate()
    status, body = running.result(timeout=300)
    check(status == 200 and json.loads(body)["usage"]["completion_tokens"] == 300,
          f"a request running at SIGTERM finishes whole ({status})")
    check(server.process.wait(timeout=60) == 0, "exit 0 after a clean drain")

    # A second signal does not wait.
    server = Server("--parallel", "1", "--shutdown-grace-ms", "120000", model=model)
    stream = raw_request(server, long_stream)
    check(stream.recv(4096).startswith(b"HTTP/1.1 200"), "the long stream began")
    server.process.terminate()
    time.sleep(0.5)
    server.process.terminate()
    code = server.process.wait(timeout=60)
    check(code == 1, f"a second SIGTERM ends at once, status 1 ({code})")
    stream.close()


def load(server, clients, requests, max_tokens, expected):
    """clients threads × requests greedy completions; returns latencies."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)

    def one(i):
        prompt = PROMPTS[i % len(PROMPTS)]
        started = time.monotonic()
        reply = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=max_tokens, temperature=0)
        return time.monotonic() - started, reply.choices[0].text == expected[prompt]

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(one, i) for i in range(clients * requests)]
        results, errors = [], 0
        for future in futures:
            try:
                results.append(future.result())
            except Exception as error:  # noqa: BLE001 - every failure counts
                errors += 1
                print("request failed:", error, flush=True)
    latencies = sorted(seconds for seconds, _ in results)
    wrong = sum(1 for _, same in results if not same)
    if latencies:
        pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
        print(f"  {len(results)} requests, {errors} errors, {wrong} texts unlike generate's; latency p50 "
              f"{pick(0.5) * 1000:.0f} ms, p90 {pick(0.9) * 1000:.0f} ms, p99 {pick(0.99) * 1000:.0f} ms, "
              f"mean {statistics.mean(latencies) * 1000:.0f} ms", flush=True)
    return errors, wrong


def metric(server, name):
    for line in http(server, "GET", "/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def load_with_faults(expected, faults, slots, *args):
    faulty = Server(*args, env={"ACCORD_FAULTS": faults})
    try:
        print(f"load with ACCORD_FAULTS={faults}: 16 clients x 4 requests, {slots}", flush=True)
        errors, wrong = load(faulty, 16, 4, 16, expected)
        check(errors == 0 and wrong == 0, "the load with faults: no errors, greedy texts unchanged")
        retries = metric(faulty, "accord_retries_total")
        check(retries is not None and retries >= 2, f"the faults' steps were retried ({retries})")
        check(http(faulty, "GET", "/ready")[0] == 200, "ready after the faults")
    finally:
        faulty.stop()


def main():
    expected = {prompt: generate_text(prompt, 16) for prompt in PROMPTS}
    cache = tempfile.mkdtemp(prefix="accord-serve-cache-")
    server = Server("--parallel", "4", "--max-body-bytes", "65536", "--request-timeout-ms", "2000",
                    "--prompt-cache", cache)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
        check([m.id for m in client.models.list()] == [MODEL_ID], "/v1/models lists the model")
        test_clients(server, client)
        # A repeated prompt finds its prefix on the slot that holds it, or in the prompt cache.
        reused = metric(server, "accord_prompt_tokens_cached_total")
        check(reused is not None and reused > 0, f"repeated prompts are not prefilled again ({reused} tokens)")
        test_bad_input(server, client)
        test_keep_alive(server)
        test_disconnect(server)
        print("load: 32 clients x 8 requests, 4 slots", flush=True)
        errors, wrong = load(server, 32, 8, 16, expected)
        check(errors == 0 and wrong == 0, "the load test: no errors, greedy texts unchanged")
        batches, batched = metric(server, "accord_batches_total"), metric(server, "accord_batched_steps_total")
        check(None not in (batches, batched) and batched > batches,
              f"the slots' steps ran in batches ({batched} steps in {batches})")
        executions = metric(server, 'accord_phase_seconds_count{phase="Execution"}')
        check(None not in (executions, batched) and executions >= batched, f"every Execution phase was timed ({executions})")
    finally:
        server.stop()
        shutil.rmtree(cache, ignore_errors=True)

    test_api_key()
    folder = tempfile.mkdtemp(prefix="accord-serve-slow-")
    try:
        test_shutdown(slow_model(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    load_with_faults(expected, "1:Execution:error:3;0:Commit:error:7", "2 slots of 2 ranks", "--parallel", "2",
                     "--ranks", "2")
    load_with_faults(expected, "0:Execution:error:3;0:OutputPublication:error:9", "3 batched slots",
                     "--parallel", "3")

    print("accord serve end to end:", "FAILED " + "; ".join(failures) if failures else "passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
