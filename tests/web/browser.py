"""What the browser tests of `accord serve` share: headless Chromium, a
wait that says what did not happen, and the first paint's checks."""
import shutil
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

from serve_process import check, failures

WAIT_S = 120  # the 2-core machine may be busy with a build


def browser():
    """Headless Chromium; Debian's chromium and chromium-driver, never a download."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        raise RuntimeError("no chromium or chromedriver on PATH: scripts/setup.sh installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,800"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(driver, script, what):
    """Polls `script` (JavaScript returning a boolean) until it holds."""
    try:
        WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(lambda d: d.execute_script(script))
        return True
    except Exception:  # a timeout: say what did not happen, and go on to the next check
        check(False, f"{what} within {WAIT_S} s")
        return False


def check_first_paint(driver, origin):
    """What the page loaded: from its origin only, under 100 KB, painted."""
    entries = driver.execute_script("""return performance.getEntriesByType('navigation')
        .concat(performance.getEntriesByType('resource'))
        .map((e) => ({name: e.name, type: e.initiatorType, bytes: e.transferSize}))""")
    outside = [e["name"] for e in entries if not e["name"].startswith(origin + "/")]
    check(not outside, f"no request leaves {origin}: {outside}")
    page_bytes = sum(e["bytes"] for e in entries if e["type"] in ("navigation", "link", "script"))
    print(f"first paint: {len(entries)} requests, {page_bytes} bytes transferred for the page's files", flush=True)
    check(0 < page_bytes < 100_000, f"the page's files transfer under 100 KB ({page_bytes} bytes)")
    check(driver.execute_script("return performance.getEntriesByType('paint').length > 0"), "the page painted")


def run(name, out, server, tests):
    """Runs each test(driver, server) in one headless Chromium, stops the
    server, and exits 1 when a check failed; screenshots lie in `out`."""
    driver = browser()
    try:
        for test in tests:
            test(driver, server)
    finally:
        server.stop()
        driver.quit()
    print(f"screenshots in {out}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"{name}: every check passed")
