"""LIBERO-Plus's seven axes as factors: the catalogue, the category map, bad levels, the profile, and on the real
simulator each factor changing what it declares, the same twice per seed, another per seed, and nominal after."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import SpecError, UnsupportedError
from assay.metrics import RetentionRow, category_profile
from assay.sim import default_registry, instruct, make_env, resolve_variant
from assay.sim.factors import FACTORS
from assay.sim.libero_plus import plus_language
from assay.spec import CameraSpec
from assay.spec.libero_catalog import PLUS_CATEGORIES, plus_category

REGISTRY = default_registry()
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
DRAWER = "libero/goal/open_the_middle_drawer_of_the_cabinet@2"


def test_the_seven_axes_are_factors_with_levels_an_axis_and_a_stable_category():
    assert PLUS_CATEGORIES == {  # the stable map: a change regroups every stored profile
        "libero_plus.layout": "layout", "libero_plus.camera": "camera", "libero_plus.robot_init": "robot",
        "libero_plus.language": "language", "libero_plus.light": "light", "libero_plus.background": "background",
        "libero_plus.noise": "noise", "libero_plus.corruption": "noise"}  # corruption: upstream's released noise
    axes = {name: FACTORS[name].axis.value for name in PLUS_CATEGORIES}
    assert axes == {"libero_plus.layout": "behavioral", "libero_plus.camera": "visual",
                    "libero_plus.robot_init": "behavioral", "libero_plus.language": "semantic",
                    "libero_plus.light": "visual", "libero_plus.background": "visual", "libero_plus.noise": "visual",
                    "libero_plus.corruption": "visual"}
    assert (FACTORS["libero_plus.corruption"].valid, FACTORS["libero_plus.corruption"].category) == (
        "[0, 50] index", "noise")
    for name, category in ((n, c) for n, c in PLUS_CATEGORIES.items() if n != "libero_plus.corruption"):
        factor = FACTORS[name]
        assert (factor.valid, factor.default, factor.category, sorted(factor.backends)) == (
            "[0, 5] level", 0, category, ["libero"])
    assert plus_category(["libero_plus.camera"]) == "camera"
    assert plus_category(["libero_plus.noise", "libero_plus.light", "action.noise"]) == "light+noise"
    assert plus_category(["libero.swap"]) is None


def test_bad_levels_and_tasks_are_one_line_errors():
    task = REGISTRY.get(SOUP)
    with pytest.raises(SpecError, match=r"^factor libero_plus.camera: value 6 is not valid; valid: \[0, 5\] level$"):
        resolve_variant({"libero_plus.camera": 6}, task)
    with pytest.raises(SpecError, match=r"^factor libero_plus.noise: value 1.5 is not valid; valid: \[0, 5\] level$"):
        resolve_variant({"libero_plus.noise": 1.5}, task)
    with pytest.raises(UnsupportedError, match="^factor libero_plus.layout does not apply to libero/goal/open_the_"
                                               "middle_drawer_of_the_cabinet@2: its goal moves no object"):
        resolve_variant({"libero_plus.layout": 2}, REGISTRY.get(DRAWER))
    with pytest.raises(UnsupportedError, match="does not apply to metaworld/reach@1: backend metaworld"):
        resolve_variant({"libero_plus.light": 1}, REGISTRY.get("metaworld/reach@1"))


def test_language_levels_rewrite_more_with_each_level_deterministically_per_seed():
    task = REGISTRY.get(SOUP)
    text = task.instruction
    rewrites = {level: plus_language(text, level, seed=3) for level in range(6)}
    assert rewrites[0] == text and len(set(rewrites.values())) == 6  # every level says it another way
    assert all(plus_language(text, level, seed=3) == rewrites[level] for level in range(6))  # the same per seed
    assert plus_language(text, 3, seed=4) != rewrites[3]  # drawn from the seed
    # context sentences from level 3 (LIBERO's own set, tests/test_libero_language.py): one, two, three
    assert [rewrites[level].count(". ") + rewrites[level].count("? ") for level in (3, 4, 5)] == [1, 2, 3]
    variant = resolve_variant({"libero_plus.language": 2}, task)
    assert instruct(task, variant, 3) == rewrites[2]  # the campaign's path


def test_sweep_and_grid_plan_paired_jobs_and_the_profile_pools_each_category():
    from assay.run.campaign import prepare_campaign
    from assay.spec import campaign_from_data

    spec = campaign_from_data({
        "name": "plus", "episodes": 2, "tasks": [SOUP], "policies": ["random"],
        "variants": ["nominal", {"sweep": {"libero_plus.camera": [1, 5], "libero_plus.noise": [2]}},
                     {"grid": {"libero_plus.light": [1, 2], "libero_plus.background": [3]}}]})
    jobs = prepare_campaign(spec).jobs
    assert len(jobs) == 2 * (1 + 3 + 2) and {job.seed for job in jobs} == {0, 1}
    assert len({job.key for job in jobs}) == len(jobs)

    def row(variant: str, factors: str, nominal: int, kept: int, pairs: int = 10) -> RetentionRow:
        return RetentionRow("p", variant, "visual", factors, pairs, nominal, kept, kept / nominal, None, None,
                            nominal - kept, 0, 1.0)

    profile = category_profile([row("camera=1", "libero_plus.camera", 8, 6),
                                row("camera=5", "libero_plus.camera", 8, 2),
                                row("noise=2", "libero_plus.noise", 8, 8), row("swap", "libero.swap", 8, 1)])
    assert [(c.category, c.variants, c.pairs, c.nominal_successes, c.variant_successes) for c in profile] == [
        ("camera", 2, 20, 16, 8), ("noise", 1, 10, 8, 8)]
    camera, noise = profile
    assert camera.retention == 0.5 and camera.worst_variant == "camera=5" and camera.worst_retention == 0.25
    assert camera.ci_low < 0.5 < camera.ci_high and noise.retention == 1.0 and noise.ci_high >= 1.0 > noise.ci_low


@pytest.fixture(scope="module")
def soup_env():
    task = REGISTRY.get(SOUP).model_copy(update={"cameras": (CameraSpec(name="agentview", width=64, height=64),
                                                             CameraSpec(name="wrist", width=64, height=64))})
    env = make_env(task)
    yield env
    env.close()


def _snapshot(env, observation) -> dict[str, np.ndarray]:
    """What the seven factors change: the frames, the camera, lights, materials, the arm and the goal's object."""
    model, data, scene = env.simulator.sim.model._model, env.simulator.sim.data._data, env._scene
    camera = model.camera("agentview").id
    return {"agentview": observation["image.agentview"].copy(), "wrist": observation["image.wrist"].copy(),
            "camera": np.concatenate([model.cam_pos[camera], model.cam_quat[camera]]),
            "light": np.concatenate([model.light_diffuse.ravel(), model.light_dir.ravel()]),
            "materials": np.concatenate([model.mat_rgba[scene.plus._materials].ravel(),
                                         model.mat_texid[scene.plus._materials].ravel()]),
            "arm": data.qpos[scene.plus._arm].copy(), "object": observation["privileged.goal"][:3].copy()}


# factor -> what it must change (everything else stays nominal)
DECLARED = {
    "libero_plus.layout": {"object", "agentview", "wrist"},
    "libero_plus.camera": {"camera", "agentview"},
    "libero_plus.robot_init": {"arm", "agentview", "wrist"},
    "libero_plus.light": {"light", "agentview", "wrist"},
    "libero_plus.background": {"materials", "agentview", "wrist"},
    "libero_plus.noise": {"agentview", "wrist"},
}


@pytest.mark.libero
@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("factor", list(DECLARED))
def test_each_factor_changes_what_it_declares_per_seed_and_nominal_comes_back(soup_env, factor):
    task = soup_env.task
    variant = resolve_variant({factor: 4}, task)
    nominal = _snapshot(soup_env, soup_env.reset(2))
    first = _snapshot(soup_env, soup_env.reset(2, variant))
    # The arm and the soup share one contact solver with everything else: moving one shifts the other by
    # round-off (1e-7 rad, m) while settling, which is not a change the factor declares.
    tolerance = {"arm": 1e-4, "object": 1e-4}
    changed = {key for key in nominal
               if not np.allclose(nominal[key], first[key], rtol=0.0, atol=tolerance.get(key, 0.0))}
    assert changed == DECLARED[factor], changed
    again = _snapshot(soup_env, soup_env.reset(2, variant))
    assert all(np.array_equal(first[key], again[key]) for key in first)  # the same per seed
    other_nominal = _snapshot(soup_env, soup_env.reset(3))
    other = _snapshot(soup_env, soup_env.reset(3, variant))
    drawn = {key for key in DECLARED[factor] - {"agentview", "wrist"}}
    for key in drawn:  # another seed draws another perturbation (not just the same offset on another state)
        assert not np.allclose(other[key] - other_nominal[key], first[key] - nominal[key]), key
    back = _snapshot(soup_env, soup_env.reset(2))
    assert all(np.array_equal(nominal[key], back[key]) for key in nominal)  # nominal comes back


@pytest.mark.libero
@pytest.mark.sim
@pytest.mark.slow
def test_upstreams_released_corruption_blurs_the_agent_view_only(soup_env):
    """libero_plus.corruption 13 (LIBERO-Plus's gaussian blur at severity 3) on the agent view's frame, not the
    wrist's; the same per seed and step; nominal comes back."""
    nominal = soup_env.reset(2)
    variant = resolve_variant({"libero_plus.corruption": 13}, soup_env.task)
    blurred = soup_env.reset(2, variant)
    assert np.array_equal(blurred["image.wrist"], nominal["image.wrist"])
    assert not np.array_equal(blurred["image.agentview"], nominal["image.agentview"])
    assert blurred["image.agentview"].astype(float).std() < nominal["image.agentview"].astype(float).std()
    assert np.array_equal(soup_env.reset(2, variant)["image.agentview"], blurred["image.agentview"])
    assert np.array_equal(soup_env.reset(2)["image.agentview"], nominal["image.agentview"])


def test_the_report_and_results_profile_show_the_categories():
    from types import SimpleNamespace

    from assay.cli.robustness_commands import profile_document
    from assay.metrics import CategoryProfile
    from assay.report.html import _categories

    row = CategoryProfile("bc", "camera", 1, 10, 8, 4, 0.5, 0.21, 0.79, "libero_plus.camera=3", 0.5)
    html = _categories(SimpleNamespace(categories=(row,)))
    assert "By category: LIBERO-Plus-style axes (procedural)" in html and "camera" in html and "[0.21, 0.79]" in html
    assert _categories(SimpleNamespace(categories=())) == ""
    assert profile_document([])["categories"] == []
