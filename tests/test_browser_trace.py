"""The per-layer timeline in a real browser (Debian's chromium through Playwright): the dashboard's ``/timeline``
page, reached from the failures table, and the report's timelines, reached from the failure gallery."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.failures.ponr import load_ponrs
from assay.report import write_report
from assay.store import Store
from tests.browser_support import ARGS, CHROMIUM, overlapping_labels, shot
from tests.report_support import report_store  # noqa: F401  (session fixture)

pytestmark = [
    pytest.mark.sim,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium missing (make install-test installs it)"),
]
LANES = ["policy", "action", "controller", "physics", "render", "recorder", "executor"]


@pytest.fixture(scope="module")
def server(report_store: Path) -> Iterator[str]:  # noqa: F811
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "assay.cli.app", "serve", "--store", str(report_store),
                                "--port", str(port), "--token", "t"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/api/campaigns", timeout=1).read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"assay serve did not come up: {process.communicate()[0]}")
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=10)
    process.stdout.close()


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.errors = errors
        yield page
        browser.close()


def test_a_failure_links_to_its_timeline_with_a_lane_per_layer(server: str, page: object, report_store: Path,  # noqa: F811
                                                              tmp_path: Path) -> None:
    [analysed] = load_ponrs(report_store).values()  # the fixture found one point of no return
    page.goto(f"{server}/#/c/tiny")
    link = page.locator(f"#failures tr[data-key='{analysed.key}'] a.timeline-link")
    link.wait_for()
    link.click()
    page.locator("#lanes .lane").first.wait_for()
    assert page.url.endswith(f"/timeline#{analysed.key}")
    assert page.locator("#lanes .lane").evaluate_all("ls => ls.map(l => l.dataset.layer)") == LANES
    for layer in ("controller", "physics"):  # Meta-World's mocap controller and MuJoCo's contacts
        assert page.locator(f"svg.lane-plot[data-layer='{layer}'] polyline.series").count() >= 1
    assert page.locator("svg.lane-plot[data-layer='render'] line.event").count() >= 1  # the frames drawn
    assert "executor.batch_size" in page.locator(".lane[data-layer='executor'] .facts").inner_text()
    plotted = page.locator("svg.lane-plot").count()
    assert plotted == len(LANES) - 1  # the executor's part is per episode: facts, no plot
    ponr_lines = page.locator("line.mark-line[data-kind='ponr']").count()
    assert ponr_lines == (plotted if analysed.point is not None else 0)  # across every plotted lane
    if analysed.point is not None:
        assert page.locator(f"svg.marks g.mark[data-kind='ponr'][data-step='{analysed.point}']").count() == 1
    assert overlapping_labels(page, "svg.marks text") == []
    assert overlapping_labels(page, ".lane .keys span") == []
    # a click on a lane seeks the episode's video to that step, and every lane's cursor follows
    page.locator("video#video").wait_for()
    page.wait_for_function("document.getElementById('video').readyState >= 1", timeout=15000)
    page.evaluate("document.getElementById('video').pause()")
    plot = page.locator("svg.lane-plot[data-layer='physics']")
    plot.click(position={"x": plot.bounding_box()["width"] * 0.75, "y": 30})
    page.wait_for_function("document.getElementById('video').currentTime > 0.1", timeout=5000)
    shot(page, "timeline", tmp_path)
    assert page.errors == []


def test_an_unknown_key_is_one_line_on_the_page(server: str, page: object) -> None:
    page.goto(f"{server}/timeline#zzzzzz")
    page.locator("#timeline-error").wait_for()
    assert page.locator("#timeline-error").inner_text().startswith("no episode with key 'zzzzzz'")


def test_the_report_gallery_links_each_failure_to_its_timeline(report_store: Path, page: object,  # noqa: F811
                                                               tmp_path: Path) -> None:
    with Store(report_store, create=False) as store:
        path = write_report(store, "tiny", tmp_path / "report.html")
    page.goto(path.as_uri())
    links = page.locator("#gallery a.timeline-link")
    assert links.count() == page.locator("#gallery .card").count() >= 1
    for href in links.evaluate_all("ls => ls.map(l => l.getAttribute('href'))"):
        target = page.locator(f"[id='{href[1:]}']")
        assert target.count() == 1 and target.evaluate("h => h.nextElementSibling.querySelector('svg') !== null")
    links.first.click()
    assert page.evaluate("location.hash").startswith("#timeline-")
    shot(page, "report-timelines", tmp_path)
    assert overlapping_labels(page, "#timelines svg text") == []
