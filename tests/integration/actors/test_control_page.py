"""The owner's control page in a real headless Chromium, against a running service (real
waitress on 127.0.0.1, real agent processes): sign-in, the list, a running turn's tool calls
live, stop, retry of a stalled head, and a cross-site form post that changes nothing.

Skipped, saying so, when Debian's `chromium` and `chromium-driver` are not installed, as the
journal page's test is (`.ci/run` installs them).
"""

from __future__ import annotations

import http.server
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.conftest import OPERATOR_TOKEN, comment_event
from tests.helpers import wait_until
from tests.system.test_journal_page import browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

FAKES = Path(__file__).resolve().parents[2] / "fakes"


def issue_comment(identifier: str, team: str) -> dict[str, Any]:
    body = comment_event(f"issue-{identifier}", identifier)
    body["data"]["issue"]["team"] = {"key": team}
    return body


@pytest.fixture
def foreign_site() -> Iterator[Callable[[str], str]]:
    """Another loopback origin (its own port) serving a page whose form posts at once to
    the URL it is given: the URL of that page."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="test-foreign-site", daemon=True)
    thread.start()

    def page(target: str) -> str:
        pages["/"] = (f'<!doctype html><form id="f" method="post" action="{target}">'
                      '<input name="x" value="1"></form>'
                      '<script>document.getElementById("f").submit()</script>').encode()
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield page
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_the_owner_watches_and_steers_from_the_control_page(
        harness: Callable[..., Any], browser: Any, tmp_path: Path,  # noqa: F811 - the fixture
        foreign_site: Callable[[str], str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    healed = tmp_path / "healed"
    flaky = ["/bin/sh", "-c", f'[ -f "{healed}" ] || kill -9 $$; exec "{sys.executable}" '
                              f'"{FAKES / "agent.py"}" ok']
    h = harness(routes=[
        {"name": "ops", "teams": ["OPS"], "mode": "issue", "output": "claude",
         "command": [sys.executable, str(FAKES / "stream_agent.py"), "slow", "600"]},
        {"name": "qa", "teams": ["QA"], "mode": "issue", "command": flaky}])
    h.service.turn_env.backoff_seconds = ()  # the first failed attempt stalls the head
    url = h.service.operator.url

    # The page swaps the board in whole when the server reports a change, so each look and
    # each click is one script: no element is held across a swap.
    def texts(selector: str) -> list[str]:
        return list(browser.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)",
            selector))

    def click(selector: str) -> None:
        browser.execute_script("document.querySelector(arguments[0]).click()", selector)

    def select(key: str) -> None:
        browser.execute_script("[...document.querySelectorAll('#conversations a[data-select]')]"
                               ".find((a) => a.textContent === arguments[0]).click()", key)

    def shown_state() -> str:
        # Read in one go: the board is swapped in whole when the server reports a change.
        return str(browser.execute_script(
            "const s = document.getElementById('state'); return s ? s.dataset.state : ''"))

    def sign_in(token: str) -> None:
        field = browser.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        browser.find_element(By.CSS_SELECTOR, "#sign-in button[type=submit]").click()

    # Sign in by typing the token; a wrong one is refused.
    browser.get(url + "/control")
    sign_in("not-the-token")
    WebDriverWait(browser, 10).until(
        seen.text_to_be_present_in_element((By.ID, "error"), "That token was refused"))
    sign_in(OPERATOR_TOKEN)
    WebDriverWait(browser, 10).until(seen.presence_of_element_located((By.ID, "board")))
    assert OPERATOR_TOKEN not in browser.current_url + browser.page_source
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly
    browser.execute_script("window.notReloaded = true")

    # Two conversations show up without a reload, within 2 s of their deliveries.
    h.deliver(issue_comment("OPS-7", "OPS"))
    h.deliver(issue_comment("QA-1", "QA"))
    # (the Linear inbox's conversation is listed too).
    WebDriverWait(browser, 2).until(lambda _: {"OPS-7", "QA-1"} <= {
        row.split()[0] for row in texts("#conversations tbody tr")})

    # The running turn's tool calls appear as the agent prints them.
    select("OPS-7")
    WebDriverWait(browser, 5).until(lambda _: len(texts("#progress li.action")) >= 2)
    shown = len(texts("#progress li.action"))
    WebDriverWait(browser, 2).until(lambda _: len(texts("#progress li.action")) > shown)
    assert "echo step" in texts("#progress li.action .parameter")[0]
    assert shown_state() == "running"

    # Retry of a healthy head: refused with the reason, on the page.
    click("button[data-label=retry]")
    WebDriverWait(browser, 5).until(
        seen.text_to_be_present_in_element((By.ID, "notice"), "not stalled (409)"))

    # Stop: the page shows the turn over only once the server says so, i.e. after it ended.
    ops = browser.execute_script("return document.getElementById('selected').dataset.conversation")
    browser.execute_script("""
        window.leftRunningAt = null;
        new MutationObserver(() => {
          const s = document.getElementById("state");
          if (window.leftRunningAt === null && s && s.dataset.state !== "running") {
            window.leftRunningAt = Date.now();
          }
        }).observe(document.body, {subtree: true, childList: true, attributes: true});""")
    click("button[data-label=stop]")
    WebDriverWait(browser, 10).until(lambda _: shown_state() not in ("", "running"))
    ended = h.conversation(ops)
    assert ended["state"] != "running" and ended["turns"][0]["finishedAt"]
    finished_ms = datetime.fromisoformat(ended["turns"][0]["finishedAt"].replace("Z", "+00:00"))
    assert browser.execute_script("return window.leftRunningAt") >= finished_ms.timestamp() * 1000
    assert ended["turns"][0]["result"] in texts("#selected .turns td")

    # Retry of a stalled head runs a new turn.
    qa = wait_until(lambda: [c for c in h.api("GET", "/v1/conversations").json()["conversations"]
                             if c["state"] == "stalled"], timeout=20)[0]["id"]
    healed.touch()
    select("QA-1")
    WebDriverWait(browser, 5).until(
        lambda _: shown_state() == "stalled")
    click("button[data-label=retry]")
    WebDriverWait(browser, 10).until(lambda _: len(texts("#selected .turns tr[data-result]")) == 1)
    assert h.conversation(qa)["turns"][0]["result"] == browser.execute_script(
        "return document.querySelector('#selected .turns tr[data-result]').dataset.result")
    assert browser.execute_script("return window.notReloaded") is True

    # A form another loopback origin posts: the browser sends the cookie (same site), the
    # service refuses it, and nothing changes.
    before = h.conversation(ops)
    browser.get(foreign_site(f"{url}/v1/conversations/{ops}/abandon"))
    WebDriverWait(browser, 10).until(lambda _: "action_refused" in browser.page_source)
    after = h.conversation(ops)
    assert after["fifo"] == before["fifo"] and after["state"] == before["state"]
    assert all(f.get("completion") != "abandoned" for f in after["fifo"])
