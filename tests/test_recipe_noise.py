"""Retraining noise (``assay noise``) and recipe comparisons (``assay compare --recipes``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from assay.cli.app import app  # noqa: E402
from assay.errors import AssayError  # noqa: E402
from assay.learning.noise import Checkpoint, Noise, Recipe, load_recipe, recipe_p  # noqa: E402

runner = CliRunner()
REACH = Recipe(name="r", tasks=("metaworld/reach@1",), demos=3, epochs=5, eval_episodes=6, horizon=60)


def test_the_variance_splits_into_harness_and_retrain_golden():
    found = Noise(REACH, (Checkpoint(0, "a", 2, 10), Checkpoint(1, "b", 6, 10), Checkpoint(2, "c", 4, 10)))
    assert found.mean == pytest.approx(0.4)
    assert found.total_variance == pytest.approx(((0.2 - 0.4) ** 2 + (0.6 - 0.4) ** 2) / 2)  # 0.04
    assert found.harness_variance == pytest.approx((0.2 * 0.8 + 0.6 * 0.4 + 0.4 * 0.6) / 9 / 3)  # unbiased: M - 1
    assert found.retrain_variance == pytest.approx(0.04 - 0.64 / 27)
    same = Noise(REACH, (Checkpoint(0, "a", 5, 10), Checkpoint(1, "b", 5, 10)))
    assert same.retrain_variance == 0.0  # floored: no spread beyond the binomial
    assert Noise(REACH, (Checkpoint(0, "a", 5, 10),)).retrain_variance is None  # one checkpoint: unknown


def _checkpoints(*successes: int, trials: int = 20) -> list[Checkpoint]:
    return [Checkpoint(i, f"c{i}", k, trials) for i, k in enumerate(successes)]


def test_recipe_p_edge_cases():
    p, test = recipe_p(_checkpoints(10, 10), _checkpoints(10, 10))
    assert p == 1.0 and test.startswith("Fisher")  # no spread, equal
    p, test = recipe_p(_checkpoints(20, 20), _checkpoints(19, 19))  # 40/40 against 38/40: no spread is no proof
    assert test.startswith("Fisher") and p == pytest.approx(0.4936708860759494)
    p, test = recipe_p(_checkpoints(2, 4, 6), _checkpoints(2, 4, 6))
    assert p == pytest.approx(1.0) and test.startswith("Welch")
    assert recipe_p(_checkpoints(2, 4, 6), _checkpoints(14, 16, 18))[0] < 0.01
    with pytest.raises(AssayError, match="at least two checkpoints per recipe"):
        recipe_p(_checkpoints(5), _checkpoints(5, 6))


def test_bad_recipes_are_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("tasks: [metaworld/reach@1]\nepoch: 5\n")
    with pytest.raises(AssayError, match=r"recipe .*bad.yaml: unknown key epoch; valid: demo_seed, demos, epochs"):
        load_recipe(tmp_path / "bad.yaml")
    with pytest.raises(AssayError, match="inputs 'pixels' are not valid"):
        Recipe(name="x", tasks=("metaworld/reach@1",), inputs="pixels")
    (tmp_path / "ok.yaml").write_text("tasks: [metaworld/reach@1]\ndemos: 2\n")
    assert load_recipe(tmp_path / "ok.yaml").name == "ok"  # named by its file
    result = runner.invoke(app, ["noise", str(tmp_path / "ok.yaml"), "--seeds", "3", "--store", str(tmp_path / "s")])
    assert result.exit_code == 2 and "give at least two distinct training seeds" in result.output
    result = runner.invoke(app, ["compare", "--store", str(tmp_path / "s")])
    assert result.exit_code == 2 and "compare needs policies A and B (or --recipes A.yaml,B.yaml)" in result.output
    both = runner.invoke(app, ["compare", "expert", "random", "--recipes", "a.yaml,b.yaml", "--store", str(tmp_path)])
    assert both.exit_code == 2 and "give no policies, --campaign or --bundle with it" in both.output


@pytest.mark.sim
def test_noise_and_a_recipe_comparison_on_reach(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ntasks: [metaworld/reach@1]\ndemos: 3\nepochs: 5\neval_episodes: 6\nhorizon: 60\n")
    store = str(tmp_path / "s")
    first = json.loads(runner.invoke(app, ["noise", str(recipe), "--seeds", "0,1", "--store", store, "--json"]).stdout)
    assert [c["seed"] for c in first["checkpoints"]] == [0, 1] and all(c["trials"] == 6 for c in first["checkpoints"])
    again = json.loads(runner.invoke(app, ["noise", str(recipe), "--seeds", "1,0", "--store", store, "--json"]).stdout)
    rates = {c["seed"]: c["successes"] for c in first["checkpoints"]}
    assert {c["seed"]: c["successes"] for c in again["checkpoints"]} == rates  # a seed is its checkpoint
    assert first["harness_variance"] == pytest.approx(sum(c["rate"] * (1 - c["rate"]) / 5
                                                          for c in first["checkpoints"]) / 2)
    twin = tmp_path / "twin.yaml"
    twin.write_text(recipe.read_text().replace("name: r", "name: twin"))
    result = runner.invoke(app, ["compare", "--recipes", f"{recipe},{twin}", "--seeds", "0,1", "--store", store,
                                 "--json"])
    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    # the same recipe and seeds on both sides: the same checkpoints, so no difference and nothing ships
    assert compared["difference"] == 0.0 and compared["p"] == 1.0 and compared["verdict"] == "no difference shown"
    assert compared["checkpoint_only"]["difference"] == 0.0 and compared["checkpoint_only"]["ships"] is False
