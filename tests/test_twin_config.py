"""Twin configuration: layers own factors, the version is the variant key, files load with one-line errors."""

from __future__ import annotations

import pytest

from assay.errors import SpecError
from assay.sim import FACTORS, default_registry, resolve_variant
from assay.twin import (
    Layer,
    Twin,
    TwinError,
    layer_of,
    load_twin,
    nominal_twin,
    save_twin,
    twin_from_values,
    twin_of_record,
)

TASK = "metaworld/push@1"


def test_layers_own_the_issue_factors():
    assert {f for f in FACTORS if f.startswith("control.") or f == "action.noise"} == \
        {f for f in FACTORS if _layer(f) is Layer.CONTROL}
    assert {f for f in FACTORS if _layer(f) is Layer.DYNAMICS} == {"object.mass", "friction", "joint.damping"}
    assert {f for f in FACTORS if _layer(f) is Layer.RENDERING} == {
        f for f in FACTORS if f.startswith(("light.", "camera.")) or f.endswith(".color")}
    with pytest.raises(TwinError, match="belongs to no twin layer; valid: control"):
        layer_of("instruction.paraphrase")
    with pytest.raises(SpecError, match="unknown factor"):
        layer_of("control.gian")


def _layer(name: str) -> Layer | None:
    try:
        return layer_of(name)
    except TwinError:
        return None


def test_version_is_the_variant_key_and_ignores_the_name():
    task = default_registry().get(TASK)
    twin = Twin(name="a", task=TASK, control={"control.gain": 0.7}, rendering={"object.color": [0, 1, 0]})
    assert twin.version == resolve_variant({"control.gain": 0.7, "object.color": [0, 1, 0]}, task).key
    assert twin.version == twin.variant(task).key
    assert twin.model_copy(update={"name": "b"}).version == twin.version
    assert twin.with_layer(Layer.CONTROL, {"control.gain": 0.8}).version != twin.version
    assert nominal_twin(TASK).version == "nominal"
    recorded = twin.variant(task).model_dump(mode="json")
    assert twin_of_record(recorded, TASK).version == twin.version
    assert twin_from_values(TASK, twin.values()).layer(Layer.RENDERING) == {"object.color": [0.0, 1.0, 0.0]}


def test_a_factor_in_the_wrong_layer_or_out_of_range_is_refused():
    with pytest.raises(ValueError, match="friction belongs to the dynamics layer, not control"):
        Twin(task=TASK, control={"friction": 0.5})
    with pytest.raises(SpecError, match=r"control.gain: value 9.0 is not valid; valid: \[0.25, 4\]"):
        Twin(task=TASK, control={"control.gain": 9.0})


def test_twin_files_round_trip_and_errors_name_the_file(tmp_path):
    twin = Twin(name="cell", task=TASK, control={"control.gain": 0.7}, dynamics={"friction": 1.2})
    path = save_twin(twin, tmp_path / "cell.yaml")
    assert load_twin(path) == twin
    with pytest.raises(TwinError, match="cannot read twin file"):
        load_twin(tmp_path / "missing.yaml")


@pytest.mark.parametrize(("text", "message"), [
    # an unknown key: the closest valid key and every valid one, at its line (as campaign files)
    ("name: x\ntask: metaworld/push@1\ncontrl: {control.gain: 0.5}\n",
     "bad.yaml:3: contrl: unknown field; did you mean 'control'? valid: control, dynamics, name, rendering, task"),
    ("name: x\ntask: metaworld/push@1\ngeometry: {}\n",
     "bad.yaml:3: geometry: unknown field; valid: control, dynamics, name, rendering, task"),
    # a factor in the wrong layer, an unknown factor and a value out of range: the factor's own line
    ("name: x\ntask: metaworld/push@1\ndynamics:\n  friction: 0.5\n  control.gain: 0.5\n",
     "bad.yaml:5: dynamics: factor control.gain belongs to the control layer, not dynamics"),
    ("name: x\ntask: metaworld/push@1\ncontrol:\n  control.gian: 0.5\n",
     "bad.yaml:4: control: unknown factor 'control.gian'; did you mean control.gain"),
    ("name: x\ntask: metaworld/push@1\n\ncontrol: {control.gain: 9}\n",
     "bad.yaml:4: control: factor control.gain: value 9 is not valid; valid: [0.25, 4]"),
    # a missing field and a bad name: the pydantic error at its line
    ("name: x\ncontrol: {}\n", "bad.yaml:1: task: required field is missing"),
    ("task: metaworld/push@1\nname: 'no spaces'\n", "bad.yaml:2: name: String should match pattern"),
    ("name: [x\n", "bad.yaml:2: malformed YAML"),
    ("- a\n- b\n", "bad.yaml:1: a twin file is a mapping with name, task, control, dynamics, rendering"),
])
def test_twin_file_errors_are_one_line_with_the_file_line_and_closest_names(tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(TwinError) as caught:
        load_twin(bad)
    assert str(caught.value).startswith(str(tmp_path / message.split(":")[0])), str(caught.value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_twin_and_results_files_are_written_by_the_stores_atomic_writer(tmp_path, monkeypatch):
    """save_twin and write_results_csv go through assay.store.write_blob (no hand-written temporary files)."""
    import assay.twin.config as config
    import assay.twin.running as running
    from assay.metrics.results_csv import RateEntry
    from assay.store import write_blob

    written = []

    def spy(root, relpath, data, what=""):
        written.append((str(root), relpath, what))
        return write_blob(root, relpath, data, what)

    monkeypatch.setattr(config, "write_blob", spy)
    monkeypatch.setattr(running, "write_blob", spy)
    twin = Twin(name="cell", task=TASK, dynamics={"friction": 1.2})
    assert load_twin(config.save_twin(twin, tmp_path / "cell.yaml")) == twin
    out = running.write_results_csv([RateEntry(TASK, "e", 0.5, 1, 2)], tmp_path / "real.csv")
    assert out.read_text().splitlines() == ["task,policy,successes,trials", f"{TASK},e,1,2"]
    assert written == [(str(tmp_path), "cell.yaml", "twin file"), (str(tmp_path), "real.csv", "results CSV")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.yaml", "real.csv"]  # no temporary left behind


def test_asset_swaps_may_change_rendering_only():
    from assay.twin import swap_twins

    base = Twin(name="base", task=TASK, control={"control.gain": 0.7})
    swapped = swap_twins(base, [{"table.color": [0.5, 0.4, 0.3]}, {"camera.yaw": 15}])
    assert [t.name for t in swapped] == ["swap-1", "swap-2"]
    assert all(t.control == base.control and t.dynamics == base.dynamics for t in swapped)
    assert swapped[1].rendering == {"camera.yaw": 15.0}
    with pytest.raises(TwinError, match="asset swap 1: friction is a dynamics factor"):
        swap_twins(base, [{"friction": 0.5}])


def test_a_twin_study_campaign_must_run_the_twins_task():
    from assay.spec import CampaignSpec, PolicySpec
    from assay.twin import settings_from_campaign

    spec = CampaignSpec(name="s", episodes=2, tasks=("metaworld/reach@1",), horizon=20,
                        policies=(PolicySpec(name="expert", builtin="expert"),))
    with pytest.raises(TwinError, match=r"tasks: \[metaworld/push@1\]"):
        settings_from_campaign(spec, TASK)
    settings = settings_from_campaign(spec.model_copy(update={"tasks": (TASK,)}), TASK)
    assert (settings.episodes, settings.horizon) == (2, 20)
