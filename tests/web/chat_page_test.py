"""The chat page of `accord serve` in a real browser: headless Chromium,
driven by Selenium, chats with stories260K (the plain template) and must
show `accord generate`'s greedy text; regenerate gives it again, stop ends a
reply, the first paint stays under 100 KB and no request leaves the
server's origin. With --api-key the page asks for the key once, refuses a
wrong one, and then chats. Screenshots go to OUT_DIR.

Run by tests/web/selenium.sh, which finds a python3 with Debian's selenium:
    selenium.sh chat_page_test.py ACCORD_BINARY SHARED_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_process import Server, check  # noqa: E402
from browser import check_first_paint, run, wait_for  # noqa: E402

ACCORD, SHARED, OUT = sys.argv[1], os.environ.get("ACCORD_SHARED") or sys.argv[2], sys.argv[3]
MODEL = os.path.join(SHARED, "models", "stories260K.bin")
PROMPT = "Once upon a time"
MAX_TOKENS = 24
Server.accord, Server.model = ACCORD, MODEL


def chat_expected(content, max_tokens):
    """The reply chat gives greedily: generate's text after the plain
    template's prompt, cut at its stop sequence."""
    prompt = f"User: {content}\nAssistant:"
    out = subprocess.run([ACCORD, "generate", "--model", MODEL, "--prompt", prompt, "--max-tokens", str(max_tokens),
                          "--temperature", "0", "--json"], check=True, capture_output=True, text=True)
    text = json.loads(out.stdout)["text"]
    assert text.startswith(prompt), (text, prompt)
    return text[len(prompt):].split("\nUser:")[0]


def status_of(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def set_field(driver, field, value):
    element = driver.find_element(By.ID, field)
    element.clear()
    element.send_keys(value)


def replies(driver):
    return driver.execute_script(
        "return [...document.querySelectorAll('.message.assistant .text')].map((e) => e.textContent)")


def chat_once(driver, content, max_tokens):
    """Sends `content` greedily; returns the reply the page shows."""
    before = len(replies(driver))
    set_field(driver, "temperature", "0")
    set_field(driver, "max-tokens", str(max_tokens))
    set_field(driver, "prompt", content)
    driver.find_element(By.ID, "send").click()
    wait_for(driver, f"return document.body.dataset.state === 'idle' && "
                     f"document.querySelectorAll('.message.assistant').length === {before + 1}", "the reply ends")
    shown = replies(driver)
    return shown[-1] if len(shown) > before else None


def test_chat(driver, server):
    driver.get(server.url + "/")
    wait_for(driver, "return document.body.dataset.state === 'idle'", "the page loads the model")
    check(driver.find_element(By.ID, "model").text == "stories260K", "the page names the model")
    check(driver.find_element(By.ID, "context").text.startswith("context "), "the page gives the context")
    check_first_paint(driver, server.url)

    expected = chat_expected(PROMPT, MAX_TOKENS)
    shown = chat_once(driver, PROMPT, MAX_TOKENS)
    check(shown == expected, f"the page's reply {shown!r} is generate's {expected!r}")
    driver.save_screenshot(os.path.join(OUT, "chat_page.png"))

    driver.find_element(By.ID, "regenerate").click()
    wait_for(driver, "return document.body.dataset.state === 'idle'", "regenerate ends")
    check(replies(driver) == [expected], f"regenerate replaces the reply with the same greedy text: {replies(driver)}")

    # Stop: a long reply (the rest of the context), stopped at once; what
    # came is kept, and the page is ready for the next message.
    set_field(driver, "max-tokens", "")
    set_field(driver, "prompt", "Tell me a long story")
    driver.find_element(By.ID, "send").click()
    stoppable = driver.find_element(By.ID, "stop").is_enabled()
    driver.find_element(By.ID, "stop").click()
    wait_for(driver, "return document.body.dataset.state === 'idle'", "stop ends the reply")
    print(f"stop: {'the reply was streaming' if stoppable else 'the reply had ended'} when stop was clicked",
          flush=True)
    check(len(replies(driver)) == 2, f"a stopped reply stays: {replies(driver)}")
    check(not driver.find_elements(By.CSS_SELECTOR, ".message .error"), "stop shows no error")
    severe = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    check(not severe, f"the console holds no error: {severe}")


def test_api_key(driver, key_file):
    server = Server("--api-key-file", key_file)
    try:
        check(status_of(server.url + "/") == 200, "/ is open with a key")
        check(status_of(server.url + "/chat.js") == 200, "the page's files are open with a key")
        check(status_of(server.url + "/v1/models") == 401, "/v1/models asks for the key")
        driver.get(server.url + "/")
        wait_for(driver, "return document.getElementById('key-dialog')?.open", "the page asks for the key")
        driver.save_screenshot(os.path.join(OUT, "chat_page_key.png"))
        set_field(driver, "key", "wrong-key")
        driver.find_element(By.ID, "key-ok").click()
        wait_for(driver, "return document.getElementById('key-dialog')?.open && "
                         "!document.getElementById('key-refused').hidden", "a wrong key is refused and asked again")
        set_field(driver, "key", "web-test-key")
        driver.find_element(By.ID, "key-ok").click()
        wait_for(driver, "return document.body.dataset.state === 'idle'", "the page loads the model with the key")
        expected = chat_expected("Hi", 8)
        shown = chat_once(driver, "Hi", 8)
        check(shown == expected, f"with the key, the page's reply {shown!r} is generate's {expected!r}")
        driver.refresh()
        wait_for(driver, "return document.body.dataset.state === 'idle'", "a reload keeps the key (sessionStorage)")
        check(not driver.execute_script("return document.getElementById('key-dialog')?.open"),
              "the key is asked for once")
    finally:
        server.stop()


def main():
    os.makedirs(OUT, exist_ok=True)
    key_file = os.path.join(OUT, "api-key")
    with open(key_file, "w") as file:
        file.write("web-test-key\n")
    run("chat page", OUT, Server(), [test_chat, lambda driver, _: test_api_key(driver, key_file)])


if __name__ == "__main__":
    main()
