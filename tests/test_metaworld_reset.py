"""The one-call hand reset leaves MuJoCo's data as Meta-World's own loop does, field for field, on all 50 tasks."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from assay.sim import metaworld_reset
from assay.sim.metaworld_env import sawyer_env
from assay.spec.metaworld_catalog import METAWORLD_TASKS

OWN_HAND_RESET = ("faucet-close-v3", "faucet-open-v3", "window-close-v3")  # their class overrides _reset_hand


def _unused(name: str) -> bool:
    """An array MuJoCo does not write in a dense-Jacobian model without islands (asserted below): the island arrays
    and the sparse structure of the constraint Jacobian, which hold whatever the arena held. Two stock environments
    with the same history differ there (``test_the_unused_fields_differ_between_two_stock_builds``)."""
    sparse_structure = name.startswith(("efc_J", "efc_AR")) and name.endswith(("_rownnz", "_rowadr", "_rowsuper",
                                                                               "_colind"))
    return name in ("dof_island", "dof_islandind", "efc_island", "island_dofind", "island_efcind", "efc_JT") or \
        sparse_structure


def _fields(data) -> dict[str, np.ndarray]:
    """Every array of ``data`` (constraint rows cut to the ``nefc`` in use), its scalars, and every field of its
    contacts (the ``ncon`` in use), warnings and solver statistics; not its timers."""
    fields: dict[str, np.ndarray] = {}
    for name in dir(data):
        if name.startswith("_"):
            continue
        try:
            value = getattr(data, name)
        except Exception:  # noqa: BLE001 - a property that needs arguments or another state
            continue
        if isinstance(value, np.ndarray) and not _unused(name):
            fields[name] = value[: data.nefc].copy() if name.startswith("efc_") else value.copy()
        elif isinstance(value, (int, float)):
            fields[name] = np.asarray(value)
    for part, rows in (("contact", data.ncon), ("warning", None), ("solver", None)):  # arrays of structs: each field
        structs = getattr(data, part)
        for name in dir(structs):
            if not name.startswith("_"):
                fields[f"{part}.{name}"] = np.asarray(getattr(structs, name))[:rows].copy()
    return fields


def _stock(env_name: str):
    env = sawyer_env(env_name)
    vars(env).pop("_reset_hand", None)  # back to Meta-World's own loop
    return env


def _reset(env, seed: int) -> np.ndarray:
    """A seeded reset as the backend does it (the task vector drawn from the seed)."""
    env.np_random = np.random.default_rng(seed)
    env._freeze_rand_vec = False
    env.seeded_rand_vec = True
    observation, _ = env.reset()
    env._freeze_rand_vec = True
    return observation


def _differences(one, other) -> list[str]:
    mine, theirs = _fields(one.data), _fields(other.data)
    assert mine.keys() == theirs.keys()
    return [name for name in mine if not np.array_equal(mine[name], theirs[name], equal_nan=True)]


@pytest.mark.parametrize("env_name", sorted(set(METAWORLD_TASKS) - set(OWN_HAND_RESET)))
def test_the_one_call_hand_reset_leaves_every_field_as_metaworlds_loop(env_name):
    fast, stock = sawyer_env(env_name), _stock(env_name)
    assert "_reset_hand" in vars(fast) and "_reset_hand" not in vars(stock)
    assert not mujoco.mj_isSparse(fast.model) and fast.data.nisland == 0  # what makes _unused's fields unused
    # A fresh build's state comes from Meta-World's unseeded build-time draw (NumPy's global generator), so two
    # builds differ, and a reset's first hand move starts from there; one seeded reset gives both the same start
    # (only a goal marker's stale drawing position can still differ, and the next reset's steps recompute it).
    _reset(fast, 1000), _reset(stock, 1000)
    actions = np.random.default_rng(7).uniform(-1.0, 1.0, (12, 4))
    for seed in (0, 1, 2):
        assert np.array_equal(_reset(fast, seed), _reset(stock, seed))
        assert _differences(fast, stock) == [], seed
        for action in actions:  # and the steps that follow (the next reset starts from where they end)
            mine, theirs = fast.step(action), stock.step(action)
            assert np.array_equal(mine[0], theirs[0]) and mine[1:4] == theirs[1:4] and mine[4] == theirs[4]
        assert _differences(fast, stock) == []
    fast.close()
    stock.close()


def test_the_unused_fields_differ_between_two_stock_builds():
    """The control: what ``_unused`` leaves out differs between two stock environments after the same resets,
    while every other field agrees; so leaving it out hides nothing the simulation computes."""
    one, other = _stock("pick-place-v3"), _stock("pick-place-v3")
    for seed in (1000, 0, 1):  # the first gives both the same start (see above)
        _reset(one, seed), _reset(other, seed)
    assert _differences(one, other) == []
    unused = [name for name in dir(one.data) if _unused(name) and isinstance(getattr(one.data, name), np.ndarray)]
    assert any(not np.array_equal(getattr(one.data, name), getattr(other.data, name)) for name in unused)
    one.close()
    other.close()


@pytest.mark.parametrize("bad_state", [False, True])
@pytest.mark.parametrize("env_name", ["pick-place-v3", "door-lock-v3"])
def test_a_reset_of_mujocos_own_inside_the_call_falls_back_to_the_loop(env_name, bad_state, monkeypatch):
    """A bad state makes ``mj_step`` reset the data (mocap target and control to their defaults); Meta-World's loop
    sets them again within 5 substeps, so the one call gives way to the loop from the same start: the same data,
    warning counters included, whatever they held before. Without a bad state the loop never runs."""
    from metaworld.sawyer_xyz_env import SawyerXYZEnv

    fast, stock = sawyer_env(env_name), _stock(env_name)
    for seed in (1000, 0):  # the first gives both the same start (see above)
        _reset(fast, seed), _reset(stock, seed)
    looped = []
    loop = SawyerXYZEnv._reset_hand
    monkeypatch.setattr(SawyerXYZEnv, "_reset_hand", lambda env, steps=50: (looped.append(env), loop(env, steps)))
    for env in (fast, stock):
        env.data.warning[mujoco.mjtWarning.mjWARN_BADQVEL].number = 3  # counted before, in an earlier episode
        env.data.warning[mujoco.mjtWarning.mjWARN_BADQVEL].lastinfo = 7
        if bad_state:
            env.data.qvel[-1] = np.nan
        env._reset_hand()
    assert looped.count(fast) == int(bad_state) and looped.count(stock) == 1
    assert _differences(fast, stock) == []
    assert np.array_equal(fast.init_tcp, stock.init_tcp)
    monkeypatch.undo()
    assert np.array_equal(_reset(fast, 5), _reset(stock, 5)) and _differences(fast, stock) == []
    fast.close()
    stock.close()


@pytest.mark.parametrize("env_name", OWN_HAND_RESET)
def test_a_task_with_its_own_hand_reset_keeps_it(env_name):
    env = _stock(env_name)
    assert metaworld_reset.install(env) is False
    assert "_reset_hand" not in vars(env)
    env.close()


def test_no_steps_moves_nothing_as_the_loop_does():
    """``_reset_hand(steps=0)``: Meta-World's loop runs no iteration, so neither the target nor the state moves."""
    fast, stock = sawyer_env("reach-v3"), _stock("reach-v3")
    for seed in (1000, 4):  # the first gives both the same start (see above)
        _reset(fast, seed), _reset(stock, seed)
    fast.step(np.array([1.0, 0.5, -0.5, 1.0])), stock.step(np.array([1.0, 0.5, -0.5, 1.0]))
    fast.hand_init_pos = stock.hand_init_pos = np.array([0.1, 0.6, 0.25])
    fast._reset_hand(steps=0), stock._reset_hand(steps=0)
    assert _differences(fast, stock) == []
    assert np.array_equal(fast.init_tcp, stock.init_tcp)
    fast._reset_hand(steps=3), stock._reset_hand(steps=3)
    assert _differences(fast, stock) == []
    fast.close()
    stock.close()
