"""The dashboard in a real browser: Debian's chromium driven by Playwright (never a downloaded browser).

One `assay serve` subprocess over the tiny campaign's store; one browser for the module.
Screenshots go to each test's tmp_path, and to $ASSAY_SCREENSHOTS when set (for looking at the layout).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.failures.ponr import load_ponrs
from assay.report import write_report
from assay.store import Outcome, Store
from tests.browser_support import ARGS, CHROMIUM, overlapping_labels, shot
from tests.report_support import REGRESSION_SET, report_store  # noqa: F401  (session fixture)

TOKEN = "browser-test-token"

pytestmark = [
    pytest.mark.sim,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium missing (make install-test installs it)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(report_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    port = _free_port()
    campaigns = tmp_path_factory.mktemp("campaigns")
    process = subprocess.Popen(
        [sys.executable, "-m", "assay.cli.app", "serve", "--store", str(report_store), "--port", str(port),
         "--token", TOKEN, "--campaigns", str(campaigns)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
def page(server: str) -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.errors = errors
        yield page
        browser.close()


def test_dashboard_campaign_and_episode_viewer(server: str, page: object, report_store: Path,  # noqa: F811
                                               tmp_path: Path) -> None:
    with Store(report_store, create=False) as store:
        unsuccessful = [r for r in store.catalog.episodes(campaign="tiny") if r.outcome is not Outcome.SUCCESS]
    page.goto(server + "/")
    row = page.locator("tr[data-campaign='tiny']")
    row.wait_for()
    assert "8 / 8" in row.inner_text()
    shot(page, "dashboard", tmp_path)

    row.locator("a").click()
    page.locator("#leaderboard tbody tr").first.wait_for()
    assert page.locator("#leaderboard tbody tr").count() == 2
    assert page.locator("#leaderboard tbody tr").first.inner_text().startswith("expert")
    page.wait_for_function("document.getElementById('progress-text').textContent.startsWith('8 / 8')")
    page.locator("#failures-section").wait_for()  # the failures section fills in by its own request
    failures = page.locator("#failures tbody tr")
    assert failures.count() == len(unsuccessful) >= 4  # random never reaches in 60 steps
    [analysed] = load_ponrs(report_store).values()  # the fixture found one point of no return
    ponr_cell = page.locator(f"#failures tr[data-key='{analysed.key}'] td.ponr").inner_text()
    expected = "beyond the expert" if analysed.t is None else f"never lost (budget {analysed.budget})" \
        if analysed.lost is False else f"step {analysed.t} of {analysed.steps}"
    assert ponr_cell == expected
    shot(page, "campaign", tmp_path)

    failures.first.locator("a[href^='#/e/']").click()  # the episode viewer (the row also links its timeline)
    video = page.locator("video#video")
    video.wait_for()
    # the video really plays: its clock advances and the plot cursor follows it
    page.wait_for_function("() => { const v = document.getElementById('video'); return v && v.currentTime > 0.2; }",
                           timeout=15000)
    assert page.evaluate("document.getElementById('video').videoWidth") == 64
    for plot in ("action", "reward", "events"):
        assert page.locator(f"svg[data-plot^='{plot}']").count() == 1
    assert page.locator("svg[data-plot='action'] polyline").count() == 4  # one line per action dimension
    assert page.locator("svg[data-plot='events'] g.event").count() >= 2
    cursor_x = float(page.locator("svg[data-plot='action'] line.cursor").get_attribute("x1"))
    assert cursor_x > 40  # moved off the left axis with the video
    shot(page, "episode", tmp_path)
    # the analysed failure: its facts above the plots, its point of no return on the events timeline
    page.goto(f"{server}/#/e/{analysed.key}")  # a hash change: wait for the new view, not the old one's facts
    page.locator(f"h2:has-text('Episode {analysed.key}')").wait_for()
    page.locator("svg[data-plot='events']").wait_for()
    assert "point of no return" in page.locator("#failure-facts").inner_text()
    assert page.locator("svg[data-plot='events'] g.event[data-kind='ponr']").count() == (analysed.point is not None)
    assert overlapping_labels(page, "svg[data-plot='events'] text") == []  # events close in time stack, not overprint
    shot(page, "episode-events", tmp_path)
    assert page.errors == []


def test_regression_sets_view_links_each_rerun_to_the_episode_viewer(
        server: str, page: object, report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    recorded = [json.loads(p.read_text())
                for p in sorted((report_store / "regression" / REGRESSION_SET / "runs").glob("*.json"))]
    last = recorded[-1]
    page.goto(server + "/")
    page.locator("#nav-regression").click()
    row = page.locator(f"#regression tr[data-set='{REGRESSION_SET}']")
    row.wait_for()
    text = row.inner_text()
    assert f"#{last['run']} {last['policy']}" in text and f"{sum(last['passed'].values())} / {len(last['passed'])}" in text
    shot(page, "regression-sets", tmp_path)

    row.locator(f"a[href='#/r/{REGRESSION_SET}']").click()
    page.locator("#cases tbody tr").first.wait_for()
    assert page.locator("#cases tbody tr").count() == len(last["passed"])
    assert page.locator("svg[data-plot='history'] g.run").count() == len(recorded)
    assert page.locator("#cases td.cell-pass").count() == sum(sum(r["passed"].values()) for r in recorded)
    assert page.locator("#cases td.cell-fail").count() == sum(len(r["passed"]) - sum(r["passed"].values()) for r in recorded)
    shot(page, "regression-set", tmp_path)

    case, key = min(last["keys"].items())
    page.locator(f"tr[data-case='{case}'] a[href='#/e/{key}']").click()
    page.wait_for_function(f"document.querySelector('#view h2')?.textContent === 'Episode {key}'")
    page.locator("svg[data-plot='action']").wait_for()

    page.goto(server + "/#/c/tiny")  # the campaign lists the sets mined from it
    page.locator(f"#campaign-sets tr[data-set='{REGRESSION_SET}']").wait_for()
    assert page.errors == []


def test_a_write_without_the_token_is_refused_in_the_browser(server: str, page: object) -> None:
    page.goto(server + "/")
    page.locator("#start").wait_for()
    page.evaluate("sessionStorage.removeItem('assay-token')")
    page.reload()
    page.locator("#start").wait_for()
    page.fill("#path", "campaign.yaml")
    page.fill("#token", "")
    page.click("#start")
    page.wait_for_function("document.getElementById('start-result').textContent.length > 0")
    assert page.locator("#start-result").inner_text().startswith("401")
    page.fill("#token", "wrong")
    page.click("#start")
    page.wait_for_function("document.getElementById('start-result').textContent.startsWith('403')")
    # and straight from the browser's fetch, as any script on the page would
    status = page.evaluate("""async () => (await fetch('/api/runs', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({path: 'x.yaml'})})).status""")
    assert status == 401
    runs = json.loads(urllib.request.urlopen(server + "/api/runs").read())
    assert runs == []  # nothing was started


HOSTILE = '<img src=x onerror="window.__pwned = 1">'


def test_the_dashboard_escapes_every_value_it_shows(server: str, page: object) -> None:
    """html`...` escapes what it interpolates (golden cases), refuses a bare string, and a hostile name in the
    address reaches the page as text: the error line shows it literally and no element is made from it."""
    page.goto(server + "/")
    page.locator("#campaigns").wait_for()
    cases = page.evaluate("""() => ({
        text: html`<b>${`<i>&"'`}</b>`.text,
        nested: html`<p>${html`<i>x</i>`}</p>`.text,
        array: html`${["<a>", html`<b></b>`, 3]}`.text,
        empty: html`[${null}${undefined}]`.text,
        attribute: html`<td title="${'" onmouseover="x'}">`.text,
        refused: (() => { try { show(document.createElement("div"), "<b>raw</b>"); return "shown"; }
                          catch (e) { return e.constructor.name; } })(),
    })""")
    assert cases == {"text": "<b>&lt;i&gt;&amp;&quot;&#39;</b>", "nested": "<p><i>x</i></p>",
                     "array": "&lt;a&gt;<b></b>3", "empty": "[]",
                     "attribute": '<td title="&quot; onmouseover=&quot;x">', "refused": "TypeError"}
    page.goto(server + "/#/c/" + urllib.parse.quote(HOSTILE, safe=""))
    page.locator("#view .warn").wait_for()
    assert HOSTILE in page.locator("#view .warn").inner_text()  # the 404's line names the campaign asked for
    assert HOSTILE in page.locator("#crumbs").inner_text()
    assert page.locator("#view img, #crumbs img").count() == 0
    assert page.evaluate("window.__pwned === undefined")
    assert page.errors == []


def test_report_renders_offline_in_the_browser(report_store: Path, page: object, tmp_path: Path) -> None:  # noqa: F811
    with Store(report_store, create=False) as store:
        path = write_report(store, "tiny", tmp_path / "report.html")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.as_uri())
    page.locator("#gallery video").first.wait_for()
    # leaderboard, checkpoint forest, robustness, open loop, outcomes, a distance trace per gallery card, and each
    # gallery card's per-layer timeline
    cards = page.locator("#gallery .card").count()
    assert page.locator("#timelines svg").count() == cards
    assert page.locator("section svg").count() == 5 + page.locator("#gallery video").count() + cards
    assert page.evaluate("Array.from(document.querySelectorAll('section svg'))"
                         ".every(s => s.getBoundingClientRect().width > 100)")
    assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth === 64)")
    page.evaluate("document.querySelector('#gallery video').play()")
    page.wait_for_function("document.querySelector('#gallery video').currentTime > 0.2", timeout=15000)
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    shot(page, "report", tmp_path)
    assert overlapping_labels(page, "section svg text") == []  # no figure's labels overprint each other



LIVE_CAMPAIGN = """
name: live
seed: 1
episodes: 12
horizon: 400
envs_per_worker: 1
tasks: [metaworld/reach@1]
policies: [random]
"""


@pytest.mark.slow
def test_campaign_tables_refresh_while_and_after_a_run(tmp_path: Path, page: object) -> None:  # noqa: F811
    """On b6a562f a page opened mid-run kept "Episodes (0)" after the run finished. The module's browser
    is reused: a second sync Playwright inside the first one's event loop is refused."""
    (tmp_path / "live.yaml").write_text(LIVE_CAMPAIGN)
    store, port = tmp_path / "store", _free_port()
    Store(store).close()
    serve = subprocess.Popen([sys.executable, "-m", "assay.cli.app", "serve", "--store", str(store), "--port",
                              str(port), "--token", TOKEN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = subprocess.Popen([sys.executable, "-m", "assay.cli.app", "run", str(tmp_path / "live.yaml"), "--store",
                            str(store), "--executor", "inline"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # the campaign is registered before its first episode is written
            try:
                if any(c["name"] == "live" for c in json.loads(urllib.request.urlopen(url + "/api/campaigns").read())):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the campaign never appeared"
            time.sleep(0.1)
        page.goto(f"{url}/#/c/live")
        title = page.locator("#episodes-title")
        title.wait_for()
        at_open = int(title.inner_text().split("(")[1].rstrip(")"))
        assert at_open < 12, "the run finished before the page opened: nothing to check"
        page.wait_for_function("document.getElementById('episodes-title') && "
                               "document.getElementById('episodes-title').textContent === 'Episodes (12)'",
                               timeout=120_000)
        assert page.locator("#episodes tbody tr").count() == 12
        assert page.locator("#rates tbody tr").first.inner_text().endswith("/12")
        shot(page, "live-campaign", tmp_path)
        assert run.wait(timeout=120) == 0
    finally:
        for process in (run, serve):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
