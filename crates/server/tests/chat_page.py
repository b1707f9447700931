"""The chat page at / in headless Chromium (Debian's chromium + chromedriver,
driven by selenium): it loads, lists the served model, sends a prompt typed
into the page, and shows the streamed answer with its tokens/s. The answer in
the DOM must equal the same greedy request through the API; a screenshot of
the page is kept.

Usage: python chat_page.py BASE_URL CHROMEDRIVER SCREENSHOT_PNG
Prints "N passed, M failed"; exits 1 on a failure.
"""

import json
import re
import sys
import tempfile
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE, DRIVER, SHOT = sys.argv[1:4]
PROMPT = "What is the capital of France?"
MAX_TOKENS = 24


def api_answer():
    body = json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": PROMPT}],
                       "temperature": 0, "top_p": 0.95, "max_tokens": MAX_TOKENS}).encode()
    req = urllib.request.Request(BASE + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def main():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="gpack-chromium-")
    # The flags this machine kind needs (no sandbox as root; no background
    # networking: the network is closed).
    for a in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1100,800", f"--user-data-dir={profile}"]:
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        drv.set_page_load_timeout(60)
        drv.get(BASE + "/")
        assert drv.title == "gpack chat", drv.title
        wait = WebDriverWait(drv, 120)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
        assert drv.find_element(By.CSS_SELECTOR, "#model option").text == "smollm2"
        for field, value in [("temperature", "0"), ("max_tokens", str(MAX_TOKENS))]:
            el = drv.find_element(By.ID, field)
            el.clear()
            el.send_keys(value)
        drv.find_element(By.ID, "prompt").send_keys(PROMPT)
        drv.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#answer-1 .stats"))
        answer = drv.find_element(By.CSS_SELECTOR, "#answer-1 .content").text
        stats = drv.find_element(By.CSS_SELECTOR, "#answer-1 .stats").text
        drv.save_screenshot(SHOT)
        print(f"  answer: {answer!r}; {stats}", flush=True)
        assert "error" not in stats, stats
        assert re.fullmatch(r"\d+ tokens · \d+\.\d tok/s · first token \d+\.\d\d s", stats), stats
        assert int(stats.split()[0]) > 1 and float(stats.split()[3]) > 0, stats
        # The DOM shows the streamed answer: the same text as the API's
        # (greedy) answer to the same request. (The DOM's text trims the
        # ends, as a browser renders them.)
        assert answer.strip() == api_answer().strip(), (answer, api_answer())
        user = drv.find_element(By.CSS_SELECTOR, ".msg.user").text
        assert user == PROMPT, user
    finally:
        drv.quit()


try:
    main()
except Exception as e:  # noqa: BLE001 - report, then fail
    print(f"FAIL chat_page: {e!r}", flush=True)
    print("0 passed, 1 failed")
    sys.exit(1)
print("ok chat_page")
print("1 passed, 0 failed")
