"""The status page of `accord serve` in a real browser: headless Chromium,
driven by Selenium, opens /status of a `--ranks 3` server with stories260K
whose ACCORD_FAULTS stop rank 1 in its first Execution. The page must show
the three ranks with their layers, ready; a completion then loses rank 1,
the slot heals, and the page shows the heal naming rank 1 while it stays
open. The first paint stays under 100 KB and no request leaves the
server's origin. Without heals (--heal-attempts 0) the page shows the
slot poisoned, naming rank 1, then ready once the scheduler reset it. A
mixture of experts over 2 ranks (--expert-ranks 2) gives /metrics the rows
of each expert on each rank and the bytes each rank holds, and the page
draws each rank's experts.
Screenshots go to OUT_DIR.

Run by tests/web/selenium.sh, which finds a python3 with Debian's selenium:
    selenium.sh status_page_test.py ACCORD_BINARY SHARED_DIR OUT_DIR
"""
import json
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_process import Server, check  # noqa: E402
from browser import check_first_paint, run, wait_for  # noqa: E402

ACCORD, SHARED, OUT = sys.argv[1], os.environ.get("ACCORD_SHARED") or sys.argv[2], sys.argv[3]
Server.accord, Server.model = ACCORD, os.path.join(SHARED, "models", "stories260K.bin")
FAULT = "1:Execution:exit"


def complete(server, prompt, max_tokens):
    body = json.dumps({"model": "stories260K", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    request = urllib.request.Request(server.url + "/v1/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return reply.status, json.loads(reply.read())


def ranks(driver):
    return driver.execute_script("""return [...document.querySelectorAll('.rank')].map((e) =>
        ({state: e.dataset.state, text: e.textContent}))""")


def test_status(driver, server):
    driver.get(server.url + "/status")
    wait_for(driver, "return document.body.dataset.state === 'live'", "the page follows the status feed")
    wait_for(driver, "return document.querySelectorAll('.rank').length === 3", "the page shows 3 ranks")
    check_first_paint(driver, server.url)
    shown = ranks(driver)
    check([r["state"] for r in shown] == ["ready"] * 3, f"every rank is ready before a request: {shown}")
    check(all(f"rank {i}" in r["text"] and "layers" in r["text"] for i, r in enumerate(shown)),
          f"each rank shows its number and layers: {shown}")
    check(driver.find_element("id", "no-heals").is_displayed(), "no heal before the fault")
    driver.save_screenshot(os.path.join(OUT, "status_page.png"))

    # The fault fires in the request's prefill: rank 1 stops, the session
    # is poisoned, heals, and the completion still ends well.
    status, reply = complete(server, "Once upon a time", 8)
    check(status == 200 and reply["choices"][0]["text"], f"the completion ends well after the heal: {reply}")
    wait_for(driver, "return document.querySelectorAll('#heals tr.heal').length === 1", "the page shows the heal")
    heal = driver.execute_script("return document.querySelector('#heals tr.heal')?.textContent ?? ''")
    check("healed" in heal and "rank 1" in heal, f"the heal names rank 1 and says it healed: {heal!r}")
    wait_for(driver, "return [...document.querySelectorAll('.rank')].every((e) => e.dataset.state === 'ready')",
             "every rank is ready again after the heal")
    changes = driver.execute_script(
        "return [...document.querySelectorAll('#changes tr.change')].map((e) => e.children[2].textContent)")
    check(changes == ["computing", "healing", "poisoned"], f"the slot turned poisoned, healing, computing: {changes}")
    tiles = driver.find_element("id", "rates").text
    check("heals" in tiles and "tokens / s" in tiles, f"the page shows its rates: {tiles!r}")
    driver.save_screenshot(os.path.join(OUT, "status_page_heal.png"))
    severe = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    check(not severe, f"the console holds no error: {severe}")


def test_poisoned(driver):
    """Without heals a lost rank poisons the session until the scheduler
    resets the slot after the answer: the page's state changes show both."""
    server = Server("--ranks", "3", "--heal-attempts", "0", env={"ACCORD_FAULTS": FAULT})
    try:
        driver.get(server.url + "/status")
        wait_for(driver, "return document.querySelectorAll('.rank').length === 3", "the page shows 3 ranks")
        try:
            complete(server, "Once upon a time", 8)
            check(False, "a completion that loses a rank without heals fails")
        except urllib.error.HTTPError as error:
            check(error.code == 503, f"a poisoned session is answered 503, got {error.code}")
        # The slot is reset once the answer went: the page may show the
        # ranks poisoned only for a moment, but its state changes keep it.
        wait_for(driver, "return document.querySelectorAll('#changes tr.change').length === 2",
                 "the page shows the slot poisoned, then ready")
        changes = driver.execute_script(
            "return [...document.querySelectorAll('#changes tr.change')].map((e) => e.textContent)")
        check(len(changes) == 2 and "ready" in changes[0] and "poisoned" in changes[1] and "rank 1" in changes[1],
              f"the changes say ready after poisoned, naming rank 1: {changes}")
        wait_for(driver, "return [...document.querySelectorAll('.rank')].every((e) => e.dataset.state === 'ready')",
                 "the ranks are ready after the reset")
        driver.save_screenshot(os.path.join(OUT, "status_page_poisoned.png"))
        status, _ = complete(server, "Once upon a time", 8)
        check(status == 200, "the next request succeeds on the reset slot")
    finally:
        server.stop()


def metrics_of(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as reply:
        return reply.read().decode()


def test_experts(driver):
    """A mixture of experts spread over 2 ranks: /metrics gives the rows
    each expert computed on each rank and what each rank holds, and the
    page draws the experts of each rank."""
    model = os.path.join(SHARED, "models", "zoo", "qwen3moe-Q4_K_M.gguf")
    server = Server("--ranks", "2", "--expert-ranks", "2", "--threads", "2", model=model)
    try:
        body = json.dumps({"model": "qwen3moe-Q4_K_M", "prompt": "Once upon a time", "max_tokens": 4,
                           "temperature": 0})
        request = urllib.request.Request(server.url + "/v1/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            check(reply.status == 200, "the mixture of experts completes")
        rows = {0: 0, 1: 0}
        held = {}
        for line in metrics_of(server).splitlines():
            for rank in rows:
                if line.startswith(f'accord_expert_rows_total{{slot="0",rank="{rank}",expert='):
                    rows[rank] += int(line.split()[-1])
                if line.startswith(f'accord_rank_weights_bytes{{slot="0",rank="{rank}"}}'):
                    held[rank] = int(line.split()[-1])
        check(rows[0] > 0 and rows[1] > 0, f"/metrics gives rows per expert on both ranks: {rows}")
        check(len(held) == 2 and all(b > 0 for b in held.values()), f"/metrics gives the bytes each rank holds: {held}")
        driver.get(server.url + "/status")
        wait_for(driver, "return document.querySelectorAll('.rank .experts').length === 2",
                 "the page draws each rank's experts")
        driver.save_screenshot(os.path.join(OUT, "status_page_experts.png"))
    finally:
        server.stop()


def main():
    os.makedirs(OUT, exist_ok=True)
    server = Server("--ranks", "3", "--heal-attempts", "2", env={"ACCORD_FAULTS": FAULT})
    run("status page", OUT, server,
        [test_status, lambda driver, _: test_poisoned(driver), lambda driver, _: test_experts(driver)])


if __name__ == "__main__":
    main()
