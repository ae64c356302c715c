"""A Meta-World environment built from a copied model is the one a fresh compile builds (``sim.mujoco_compile``).

The saved models (MuJoCo's binary format, every array) of a copy and of a fresh compile are the same bytes, and
an expert episode on each steps through the same states bit for bit; an edited file is compiled again, a call
with in-memory assets always is, and the patch is gone after the block.
"""

from __future__ import annotations

import os
from pathlib import Path

import mujoco
import numpy as np
import pytest

from assay.sim import default_registry, make_env, mujoco_compile
from assay.sim.mujoco_compile import compiled_once

pytestmark = [pytest.mark.sim, pytest.mark.filterwarnings("ignore:Constant\\(s\\) may be too high")]


def _saved(model: mujoco.MjModel) -> bytes:
    buffer = np.zeros(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buffer)
    return buffer.tobytes()


def _episode(env, steps: int = 80) -> bytes:
    from metaworld.policies import ENV_POLICY_MAP

    expert = ENV_POLICY_MAP[env.task.env_name]()
    state = env.reset(7)["state"]
    states = [state]
    for _ in range(steps):
        state = env.step(expert.get_action(state)).observation["state"]
        states.append(state)
    return np.stack(states).tobytes()


def test_a_second_environment_from_a_copied_model_equals_one_compiled_afresh():
    task = default_registry().get("metaworld/pick-place@1")
    mujoco_compile.forget()
    compile_file = mujoco.MjModel.from_xml_path
    first = make_env(task)  # compiled, and kept
    with compiled_once():
        counted = mujoco.MjModel.from_xml_path
    second = make_env(task)  # copied from the kept model
    path = first.simulator.fullpath
    try:
        assert counted is not compile_file and mujoco.MjModel.from_xml_path is compile_file  # patched only inside
        assert second.simulator.model is not first.simulator.model
        with compiled_once():
            copied = mujoco.MjModel.from_xml_path(path)
        assert _saved(copied) == _saved(compile_file(path))  # a copy is a fresh compile, byte for byte
        mujoco_compile.forget()
        third = make_env(task)  # compiled afresh (nothing kept)
        assert _episode(second) == _episode(third) == _episode(first)
        # and after the same episode, the same model: every array (an environment's goal sites move with the
        # task vector each reset draws, so models are compared after one)
        assert _saved(second.simulator.model) == _saved(third.simulator.model) == _saved(first.simulator.model)
        third.close()
    finally:
        first.close()
        second.close()


def test_an_edited_file_is_compiled_again_and_assets_always_are(tmp_path: Path):
    xml = tmp_path / "ball.xml"
    xml.write_text("<mujoco><worldbody><body><joint type='free'/><geom size='.1'/></body></worldbody></mujoco>")
    mujoco_compile.forget()
    with compiled_once():
        a = mujoco.MjModel.from_xml_path(str(xml))
        assert a.geom_size[0][0] == pytest.approx(0.1)
        xml.write_text("<mujoco><worldbody><body><joint type='free'/><geom size='.25'/></body></worldbody></mujoco>")
        os.utime(xml, ns=(1, 1))  # another modification time, whatever the clock's resolution
        b = mujoco.MjModel.from_xml_path(str(xml))
        assert b.geom_size[0][0] == pytest.approx(0.25)
        c = mujoco.MjModel.from_xml_path(str(xml))
        assert c is not b and _saved(c) == _saved(b)
        text = "<mujoco><worldbody><geom size='.5'/></worldbody></mujoco>"
        d = mujoco.MjModel.from_xml_path("inline.xml", {"inline.xml": text.encode()})
        assert d.geom_size[0][0] == pytest.approx(0.5)
    mujoco_compile.forget()


def test_the_kept_model_is_used_and_what_it_cannot_key_or_another_thread_asks_is_compiled_as_always(tmp_path: Path):
    import threading

    xml = tmp_path / "ball.xml"
    xml.write_text("<mujoco><worldbody><body><joint type='free'/><geom size='.1'/></body></worldbody></mujoco>")
    original, compile_file = mujoco.MjModel.__dict__["from_xml_path"], mujoco.MjModel.from_xml_path
    compiled: list[str] = []

    def counting(filename: str, assets: dict | None = None) -> mujoco.MjModel:
        compiled.append(filename)
        return compile_file(filename) if assets is None else compile_file(filename, assets)

    mujoco_compile.forget()
    mujoco.MjModel.from_xml_path = staticmethod(counting)
    try:
        with compiled_once():
            for _ in range(3):
                mujoco.MjModel.from_xml_path(str(xml))
            assert compiled == [str(xml)]  # compiled once, copied twice
            elsewhere: list[object] = []
            thread = threading.Thread(target=lambda: elsewhere.append(mujoco.MjModel.from_xml_path(str(xml))))
            thread.start()
            thread.join()
            assert compiled == [str(xml)] * 2 and isinstance(elsewhere[0], mujoco.MjModel)  # not the kept one's
            with pytest.raises(ValueError) as inside:  # MuJoCo's own error for a file that is not there
                mujoco.MjModel.from_xml_path(str(tmp_path / "missing.xml"))
            with compiled_once():  # re-entrant on the same thread
                mujoco.MjModel.from_xml_path(str(xml))
            assert compiled == [str(xml)] * 2 + [str(tmp_path / "missing.xml")]
        with pytest.raises(ValueError) as outside:
            mujoco.MjModel.from_xml_path(str(tmp_path / "missing.xml"))
        assert str(inside.value) == str(outside.value)
    finally:
        mujoco.MjModel.from_xml_path = original
        mujoco_compile.forget()
