"""The dashboard's pass^k table in a real browser (the fixtures of tests/test_browser.py: one `assay serve`
over the tiny campaign's store, Debian's chromium driven by Playwright)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import report_support, test_browser
from tests.browser_support import CHROMIUM

# the fixtures this module's test uses, by name: the store, the served dashboard, the browser page
report_store = report_support.report_store
server = test_browser.server
page = test_browser.page

pytestmark = [
    pytest.mark.sim,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium missing (make install-test installs it)"),
]


def test_campaign_page_shows_pass_k_and_its_k_input_changes_it(server: str, page: object) -> None:
    page.goto(server + "/#/c/tiny")
    cells = page.locator("#pass-k-cells tbody tr")
    cells.first.wait_for()
    assert cells.count() == 2 and page.locator("#pass-k-policies tbody tr").count() == 2
    assert "pass^3" in page.locator("#pass-k-cells thead").inner_text()
    page.fill("#pass-k", "1")
    page.dispatch_event("#pass-k", "change")
    page.wait_for_function("document.querySelector('#pass-k-cells thead').textContent.includes('pass^1')")
    first = page.locator("#pass-k-cells tbody tr").first.inner_text()
    assert "/" in first  # succ/n and the C(c,1)/C(n,1) fraction
    assert page.errors == []
