"""Figure labels in a real browser: crowded golden cases for the report's figures, checked by the boxes
chromium draws, with a screenshot of each page kept beside the test's files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.metrics.correlation import correlate
from assay.metrics.results_csv import RateEntry
from assay.report import figures
from assay.report.data import RobustnessRow
from tests.browser_support import ARGS, CHROMIUM, box, clipped_labels, overlapping_labels, shot, text_boxes

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian chromium missing (make install-test installs it)")


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser.new_page(viewport={"width": 1280, "height": 900})
        browser.close()


def _show(page: object, svg: str, name: str, directory: Path) -> None:
    page.set_content(f"<!doctype html><html><body style='margin:0'><div id='figure'>{svg}</div></body></html>")
    shot(page, name, directory)


def test_the_checker_finds_exactly_the_overlapping_pair(page: object) -> None:
    page.set_content("""<svg width="400" height="100" style="font: 12px sans-serif">
      <text x="10" y="20">first label</text><text x="30" y="24">second label</text>
      <text x="250" y="20">apart</text><text x="10" y="80">below</text><text x="10" y="99"> </text></svg>""")
    assert overlapping_labels(page, "svg text") == [["first label", "second label"]]
    assert clipped_labels(page, "svg") == []
    page.set_content('<svg width="100" height="40"><text x="60" y="20">runs off the edge</text></svg>')
    assert clipped_labels(page, "svg") == ["runs off the edge"]


# Ten policies, some on one point, some a label's width apart on one row, some at the panel's corners and
# edges: every way a naive "offset each label up-right" layout overprints or runs into the next panel.
CROWDED = {
    "octo-base-1.5": (0.50, 0.50), "octo-small": (0.50, 0.50), "rt-1-x-checkpoint": (0.53, 0.51),
    "openvla-7b": (0.62, 0.50), "pi0-fast-droid": (0.71, 0.52), "diffusion-policy": (1.00, 1.00),
    "act-aloha-insertion": (1.00, 0.96), "bc-resnet18": (0.00, 0.00), "random-baseline": (0.02, 0.03),
    "scripted-expert-v2": (1.00, 0.05),
}


def _crowded_report() -> object:
    real, sim = [], []
    for task in ("metaworld/pick-place@1", "metaworld/drawer-open@1"):
        for name, (r, s) in CROWDED.items():
            real.append(RateEntry(task, name, r, round(r * 24), 24, source="golden"))
            sim.append(RateEntry(task, name, s, round(s * 24), 24, source="golden"))
    return correlate(real, sim, n_resamples=200)


def test_real_to_sim_labels_neither_collide_nor_leave_the_figure(page: object, tmp_path: Path) -> None:
    _show(page, figures.real_to_sim_svg(_crowded_report(), "nominal only"), "real-to-sim-crowded", tmp_path)
    assert overlapping_labels(page, "#figure svg text") == []
    assert clipped_labels(page, "#figure svg") == []
    shown = " ".join(text for text, *_ in text_boxes(page, "#figure svg text"))
    for name in CROWDED:  # stacking or grouping may join names, but never drops one
        assert shown.count(name) == 2, name


def _robustness_rows(policies: int, variants: int) -> list[RobustnessRow]:
    names = [f"policy-{k}-with-a-long-checkpoint-name" for k in range(policies)]
    factors = [f"visual.lighting={0.2 + 0.1 * v:.1f},camera.fov={50 + 5 * v}" for v in range(variants)]
    return [RobustnessRow(policy, variant, "mixed", "visual.lighting,camera.fov", variant, 24, 0.9,
                          0.9 * (v + 1) / variants, (v + 1) / variants)
            for policy in names for v, variant in enumerate(factors)]


@pytest.mark.parametrize(("policies", "variants"), [(1, 1), (3, 4), (9, 12)])
def test_robustness_legend_never_covers_the_bars_or_another_label(page: object, tmp_path: Path, policies: int,
                                                                   variants: int) -> None:
    rows = _robustness_rows(policies, variants)
    _show(page, figures.robustness_svg(rows), f"robustness-{policies}x{variants}", tmp_path)
    assert overlapping_labels(page, "#figure svg text") == []
    assert clipped_labels(page, "#figure svg") == []
    legend = box(page, "#figure svg g[id^=legend]")
    axes = box(page, "#figure svg g[id^=axes] > g[id^=patch]")  # the axes' background: where the bars stand
    assert legend[0] >= axes[2] - 0.5 or legend[1] >= axes[3] - 0.5, (legend, axes)  # beside or below, never on


def test_robustness_legend_lists_policies_as_the_bars_stand_in_colours_no_two_alike(page: object,
                                                                                     tmp_path: Path) -> None:
    """Twelve policies: Matplotlib's ten-colour cycle would give two pairs of policies one colour each."""
    _show(page, figures.robustness_svg(_robustness_rows(12, 2)), "robustness-12-colours", tmp_path)
    legend = page.evaluate("""() => [...document.querySelectorAll('#figure svg g[id^=legend] text')]
                                     .map(t => t.textContent)""")
    assert legend == sorted((f"policy-{k}-with-a-long-checkpoint-name" for k in range(12)), reverse=True)
    swatches = page.evaluate("""() => [...document.querySelectorAll('#figure svg g[id^=legend] > g[id^=patch] path')]
                                       .slice(1).map(p => getComputedStyle(p).fill)""")  # after the legend's frame
    assert len(swatches) == len(set(swatches)) == 12, swatches
    bars = page.evaluate("""() => [...document.querySelectorAll(
                                     '#figure svg g[id^=axes] > g[id^=patch] path[clip-path]')]
                                   .map(p => [getComputedStyle(p).fill, p.getBoundingClientRect().top])""")
    first_variant = sorted(bars, key=lambda bar: bar[1])[:12]  # the top group of bars, top to bottom
    assert [fill for fill, _ in first_variant] == swatches


def test_open_loop_labels_name_each_policy_once_per_point_and_never_collide(page: object, tmp_path: Path) -> None:
    """As in the demo: the expert and the shaky expert sit on the same point for several tasks (on b1f517c
    each task drew its own label there, one over the other)."""
    from assay.metrics.openloop import OpenLoopRow

    tasks = ("metaworld/reach@1", "metaworld/drawer-open@1", "metaworld/pick-place@1")
    mse = {"expert": 0.0, "shaky-expert": 0.21, "random": 0.65}
    closed = {("expert", t): 1.0 for t in tasks} | {("random", t): 0.0 for t in tasks}
    closed |= {("shaky-expert", tasks[0]): 1.0, ("shaky-expert", tasks[1]): 1.0, ("shaky-expert", tasks[2]): 0.62}
    rows = [OpenLoopRow(policy, task, 8, 400, mse[policy] + (0.004 * k if policy == "random" else 0.0), None,
                        "constant", 0) for policy in mse for k, task in enumerate(tasks)]
    _show(page, figures.openloop_svg(rows, closed), "openloop-crowded", tmp_path)
    assert overlapping_labels(page, "#figure svg text") == []
    assert clipped_labels(page, "#figure svg") == []
    names = [text for text, *_ in text_boxes(page, "#figure svg g[id^=axes] text") if text in mse]
    assert sorted(names) == ["expert", "random", "random", "random", "shaky-expert", "shaky-expert"]
