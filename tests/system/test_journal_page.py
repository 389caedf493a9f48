"""The owner's journal page in a real headless Chromium, against a real `wakeline serve`.

Skipped, saying so, when Debian's `chromium` and `chromium-driver` are not installed
(`.ci/run` installs them, so CI always runs it).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import comment_event, signed
from tests.support.serve import Served
from tests.system.test_serve import WEBHOOK_SECRET, start_serve  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SKIP_WHY = ("no Chromium: the journal page's browser test needs Debian's chromium and "
            "chromium-driver (apt-get install chromium chromium-driver)")
OPS = '[[routes]]\nname = "ops"\nteams = ["OPS"]\nmode = "issue"\n'
EVIL = "<script>window.pwned = 1</script><b>bold</b> look at this"


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (CHROMIUM and DRIVER):
        pytest.skip(SKIP_WHY)
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.TemporaryDirectory()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", f"--user-data-dir={profile.name}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        profile.cleanup()


def sign_in(driver: Any, token: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()


def test_the_owner_follows_the_journal_live_and_markup_stays_text(
        start_serve: Callable[..., Served], browser: Any) -> None:  # noqa: F811 - the fixture
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    served = start_serve(OPS)
    browser.get(served.operator_url + "/journal")
    assert browser.title == "wakeline journal"

    sign_in(browser, "not-the-token")
    WebDriverWait(browser, 10).until(
        seen.text_to_be_present_in_element((By.ID, "error"), "That token was refused"))
    assert browser.execute_script("return sessionStorage.length") == 0

    sign_in(browser, served.operator_token)
    WebDriverWait(browser, 10).until(seen.visibility_of_element_located((By.ID, "entries")))
    assert browser.execute_script("return sessionStorage.getItem('wakeline.operatorToken')") \
        == served.operator_token
    assert served.operator_token not in browser.current_url and browser.get_cookies() == []

    body = comment_event("issue-7", "OPS-7")
    body["data"]["issue"]["team"] = {"key": "OPS"}
    body["data"]["body"] = EVIL
    raw, headers = signed(body, secret=WEBHOOK_SECRET)
    assert served.post(raw, headers).json() == {"outcome": "accepted"}
    # Followed live: the arrival is on the page within 2 s of its delivery.
    WebDriverWait(browser, 2).until(
        seen.text_to_be_present_in_element((By.ID, "entries"), "look at this"))

    shown = browser.find_element(By.CSS_SELECTOR, "#entries li .text").text
    assert shown == EVIL  # the markup is shown as text
    assert browser.execute_script("return window.pwned") is None
    assert browser.find_elements(By.CSS_SELECTOR, "#entries b, #entries script") == []
    assert "inbound" in browser.find_element(By.CSS_SELECTOR, "#entries li .meta").text
