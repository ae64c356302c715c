"""The HTML report: figures from the real metrics, self-contained, robust to bad input."""

from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from assay.cli.app import app
from assay.metrics import leaderboard, outcome_grid, retention_table, robustness_profile
from assay.report import gather, robustness_rows, write_report
from assay.report.figures import sweep_svg
from assay.spec import campaign_from_data
from assay.store import EpisodeRecord, Outcome, Store
from tests.report_support import report_store  # noqa: F401  (session fixture)

runner = CliRunner()


def _record(policy: str, variant: str, seed: int, outcome: Outcome, factor: str = "action.noise") -> EpisodeRecord:
    perturbations = [] if variant == "nominal" else [{"axis": "behavioral", "factor": factor, "value": 0.5}]
    return EpisodeRecord(
        key=f"{policy}-{variant}-{seed}", campaign="c", task_id="metaworld/reach@1", task_hash="h",
        variant_key=variant, variant_name=variant, variant={"perturbations": perturbations}, policy_name=policy,
        policy_version="v", policy_spec={}, seed=seed, episode_index=seed, instruction="", outcome=outcome,
        reason="", steps=10, total_return=0.0, success_step=None, trajectory_hash="t")


S, F, T, E = Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.ERROR


def test_retention_pairs_variant_and_nominal_on_the_same_seeds() -> None:
    records = [
        *[_record("a", "nominal", s, o) for s, o in enumerate([S, S, S, S, F])],
        # seed 4 fails nominally; seed 5 has no nominal episode (unpaired, ignored); seed 3 errored (unscored)
        *[_record("a", "noise", s, o) for s, o in [(0, S), (1, F), (2, S), (3, E), (4, S), (5, S)]],
        *[_record("b", "nominal", s, F) for s in range(3)],
        *[_record("b", "noise", s, T) for s in range(3)],
    ]
    rows = {r.policy: r for r in robustness_rows(records)}
    a = rows["a"]
    assert (a.pairs, a.nominal_rate, a.variant_rate) == (4, 3 / 4, 3 / 4)  # seeds 0, 1, 2, 4
    assert a.retention == pytest.approx(1.0)
    assert (a.axis, a.factor, a.value) == ("behavioral", "action.noise", "0.5")
    assert rows["b"].pairs == 3 and rows["b"].nominal_rate == 0.0 and rows["b"].retention is None
    assert robustness_rows([_record("a", "nominal", 0, S)]) == []
    assert sweep_svg(list(rows.values())) is None  # one value of one factor is not a sweep


def test_sweep_curves_need_two_values_of_one_factor() -> None:
    records = [_record("a", "nominal", s, S) for s in range(2)]
    for value, outcomes in ((0.2, [S, S]), (0.8, [S, F])):
        for seed, outcome in enumerate(outcomes):
            r = _record("a", f"noise={value}", seed, outcome)
            records.append(EpisodeRecord(**{**r.__dict__, "key": f"{r.key}-{value}", "variant": {
                "perturbations": [{"axis": "behavioral", "factor": "action.noise", "value": value}]}}))
    rows = robustness_rows(records)
    assert [(r.value, r.variant_rate, r.retention) for r in rows] == [("0.2", 1.0, 1.0), ("0.8", 0.5, 0.5)]
    svg = sweep_svg(rows)
    assert svg is not None and svg.startswith("<svg") and "action.noise" in svg


@pytest.mark.sim
def test_gather_uses_the_real_leaderboard_and_counts(report_store: Path) -> None:  # noqa: F811
    with Store(report_store, create=False) as store:
        data = gather(store, "tiny", n_resamples=500)
        records = store.catalog.episodes(campaign="tiny")
    expected = leaderboard(outcome_grid(records, variant="nominal"), n_resamples=500)
    assert [(r.policy, r.score, r.rank_text) for r in data.leaderboard.rows] == \
        [(r.policy, r.score, r.rank_text) for r in expected.rows]
    assert data.progress == (8, 8)
    assert sum(sum(c.values()) for c in data.outcomes_by_policy.values()) == 8
    unsuccessful = [r for r in records if r.outcome is not Outcome.SUCCESS]
    assert len(data.gallery) == len(unsuccessful)
    assert all(item.videos and item.videos[0][0] == "front" for item in data.gallery)
    assert {r.variant for r in data.robustness} == {"action.noise=0.5"}
    assert data.axes == tuple(robustness_profile(retention_table(records)))
    assert [(a.policy, a.axis, a.variants) for a in data.axes] == [("expert", "behavioral", 1), ("random", "behavioral", 1)]
    assert data.provenance["code_revisions"] and data.provenance["seeds"] == sorted({r.seed for r in records})
    # what to collect next: assay priorities' own rows, heaviest first, over every episode, all mined
    listed = json.loads(runner.invoke(app, ["priorities", "--store", str(report_store), "--campaign", "tiny",
                                            "--json"]).stdout)
    ranked = sorted(listed, key=lambda p: (p["score"] is None, -(p["score"] or 0.0), -p["mass"]))
    assert [p.advice for p in data.collect_next] == [p["advice"] for p in ranked][:10] and data.collect_next
    assert data.collect_next_note == f"over all 8 episodes; categories of {len(unsuccessful)} of {len(unsuccessful)} " \
                                     "unsuccessful episodes mined"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.urls: list[str] = []
        self.sections: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        values = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "section" and values.get("id"):
            self.sections.append(values["id"])


@pytest.mark.sim
def test_report_is_one_self_contained_file(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out" / "report.html"
    result = runner.invoke(app, ["report", "tiny", "--store", str(report_store), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    parsed = _Collector()
    parsed.feed(html)
    assert parsed.sections == ["leaderboard", "rates", "reliability", "checkpoints", "robustness", "real-to-sim",
                               "openloop", "failures", "gallery", "timelines", "collect-next", "regression",
                               "integrity", "provenance"]
    # nothing fetched from anywhere: every src/href is an in-page anchor or a data: URI
    assert parsed.urls and all(u.startswith(("#", "data:")) for u in parsed.urls), \
        [u[:40] for u in parsed.urls if not u.startswith(("#", "data:"))]
    # leaderboard, checkpoint forest, robustness, open loop, outcomes, one trace per gallery card, and one per-layer
    # timeline per gallery card (every card links to its own)
    assert parsed.tags["svg"] == 5 + 2 * parsed.tags["video"]
    assert html.count("class='timeline-link'") == parsed.tags["video"]
    assert parsed.tags["video"] >= 4 and parsed.tags["img"] >= 4 * parsed.tags["video"]  # keyframes + a video per card
    assert "data:video/mp4;base64," in html and "<script src" not in html
    assert "not validated for sign-off" in html
    assert re.search(r"assay run tiny\.yaml --store \S+", html)
    # the YAML in the report is the campaign: running it again resumes the same campaign, not a new one
    spec_yaml = unescape(re.search(r"<h3>Campaign \(tiny\.yaml\)</h3><pre>(.*?)</pre>", html, re.S).group(1))
    with Store(report_store, create=False) as store:
        [saved] = [c for c in store.catalog.campaigns() if c.name == "tiny"]
    assert campaign_from_data(yaml.safe_load(spec_yaml)).content_hash() == saved.spec_hash
    assert list(out.parent.iterdir()) == [out]  # no temporary left behind


@pytest.mark.sim
def test_report_can_link_video_instead(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    with Store(report_store, create=False) as store:
        path = write_report(store, "tiny", tmp_path / "linked.html", embed_video=False)
    html = path.read_text()
    assert "data:video/mp4" not in html
    linked = re.findall(r"<video[^>]* src='([^']+)'", html)
    assert linked and all((path.parent / src).resolve().is_file() for src in linked)


@pytest.mark.sim
def test_report_errors_are_one_line(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    result = runner.invoke(app, ["report", "nope", "--store", str(report_store), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "no campaign 'nope'" in result.output and "known: regress-tiny-fails-v1-expert-" in result.output
    assert result.output.rstrip().endswith(", tiny")
    (tmp_path / "adir").mkdir()
    result = runner.invoke(app, ["report", "tiny", "--store", str(report_store), "-o", str(tmp_path / "adir")])
    assert result.exit_code == 2 and "cannot write report" in result.output
    assert list((tmp_path / "adir").iterdir()) == []
    result = runner.invoke(app, ["report", "tiny", "--store", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no store" in result.output


def test_real_to_sim_labels_never_share_a_place():
    """Two policies on one point get one label; nearby points get labels in different places, each inside
    its panel and clear of the others (boxes as Matplotlib measures them; tests/test_figure_layout.py checks
    the same in a browser)."""
    from assay.report.figures import _pyplot
    from assay.report.labels import place, point_groups

    groups = point_groups(["a", "b", "c", "d"], [0.5, 0.5, 0.52, 0.9], [0.5, 0.5, 0.51, 0.1])
    assert groups == [("c", (0.52, 0.51)), ("a, b", (0.5, 0.5)), ("d", (0.9, 0.1))]
    fig, ax = _pyplot().subplots(figsize=(3, 3))
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    texts = place(ax, groups)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    assert texts[2].xy == (0.9, 0.1) and texts[2].xyann == (4, 4)  # alone: the first place
