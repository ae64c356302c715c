"""A served ``steps`` answer in columns: every step's transition comes back exactly (arrays, reward, flags, info with
its key order) through the real codec, and a batch that cannot be columns (a failed step, observations or infos
that differ, a value that is not a number) is answered per step, each step as ``step`` answers it."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import SimulatorRefused
from assay.served.protocol import decode_steps, decode_transition, encode_steps, encode_transition, packb, unpackb
from assay.sim.protocol import Transition

WHERE = "the test server"


def _transition(seed: int, *, image: tuple[int, ...] = (4, 5, 3), info: dict[str, float] | None = None) -> Transition:
    rng = np.random.default_rng(seed)
    return Transition({"state": rng.normal(size=39), "image": rng.integers(0, 256, image, dtype=np.uint8)},
                      float(rng.normal()), bool(seed % 2), bool(seed % 3 == 0), bool(seed % 5 == 0),
                      info if info is not None else {"grasped": float(seed), "near_object": 0.5 * seed,
                                                     "collision": 0.0})


def _wire(outcomes: list[Transition | str]) -> dict:
    return unpackb(packb(encode_steps(outcomes)))


def _per_step(transition: Transition) -> Transition:
    """``transition`` as a lone ``step`` answers it: what the columns must equal."""
    return decode_transition(unpackb(packb(encode_transition(transition))), WHERE)


def _same(a: Transition, b: Transition) -> None:
    assert a.observation.keys() == b.observation.keys()
    for name in a.observation:
        assert a.observation[name].dtype == b.observation[name].dtype
        assert np.array_equal(a.observation[name], b.observation[name])
    assert (a.reward, a.terminated, a.truncated, a.success) == (b.reward, b.terminated, b.truncated, b.success)
    assert list(a.info.items()) == list(b.info.items())  # values and key order


@pytest.mark.parametrize("count", [1, 2, 7])
def test_a_batch_of_one_task_comes_back_exactly_in_columns(count: int) -> None:
    sent = [_transition(seed) for seed in range(count)]
    reply = _wire(sent)
    assert "replies" not in reply and reply["info_keys"] == ["grasped", "near_object", "collision"]
    assert reply["observation"]["image"].shape == (count, 4, 5, 3) and reply["values"].shape == (count, 4 + 3)
    got = decode_steps(reply, count, WHERE)
    for a, b in zip(got, sent, strict=True):
        assert isinstance(a, Transition)
        _same(a, b)
        _same(a, _per_step(b))
        assert not any(array.flags.writeable for array in a.observation.values())  # the frame's, read-only
        assert type(a.reward) is float and all(type(v) is float for v in a.info.values())
        assert all(type(flag) is bool for flag in (a.terminated, a.truncated, a.success))


def test_no_info_and_no_observation_are_columns_too() -> None:
    sent = [Transition({}, 1.0, False, False, True, {}), Transition({}, 2.0, True, False, False, {})]
    got = decode_steps(_wire(sent), 2, WHERE)
    assert [(t.observation, t.reward, t.terminated, t.success, t.info) for t in got] == [  # type: ignore[union-attr]
        ({}, 1.0, False, True, {}), ({}, 2.0, True, False, {})]


@pytest.mark.parametrize("odd", ["an error line", "another image shape", "another image dtype", "other info keys",
                                 "info keys in another order", "an info value that is not a number"])
def test_a_batch_that_cannot_be_columns_is_answered_per_step(odd: str) -> None:
    sent: list[Transition | str] = [_transition(0), _transition(1), _transition(2)]
    if odd == "an error line":
        sent[1] = "E_SIM: step raised ValueError: bad action"
    elif odd == "another image shape":
        sent[1] = _transition(1, image=(5, 4, 3))
    elif odd == "another image dtype":
        sent[1].observation["image"] = sent[1].observation["image"].astype(np.int16)  # type: ignore[union-attr]
    elif odd == "other info keys":
        sent[1] = _transition(1, info={"grasped": 1.0})
    elif odd == "info keys in another order":
        sent[1] = _transition(1, info={"near_object": 0.5, "grasped": 1.0, "collision": 0.0})
    else:
        sent[1] = _transition(1, info={"grasped": 1.0, "near_object": "far", "collision": 0.0})  # type: ignore[dict-item]
    replies = decode_steps(_wire(sent), 3, WHERE)
    assert isinstance(replies[0], dict) and isinstance(replies[2], dict)
    _same(decode_transition(replies[0], WHERE), sent[0])  # type: ignore[arg-type]
    _same(decode_transition(replies[2], WHERE), sent[2])  # type: ignore[arg-type]
    if odd == "an error line":
        assert replies[1] == "E_SIM: step raised ValueError: bad action"
    elif odd == "an info value that is not a number":
        assert isinstance(replies[1], str) and replies[1].startswith("E_SIM: step answered a value the wire cannot")
    else:
        _same(decode_transition(replies[1], WHERE), sent[1])  # type: ignore[arg-type]


@pytest.mark.parametrize("broken", ["values one row short", "values one column short", "values of float32",
                                    "no info_keys", "an observation one row short",
                                    "an observation that is not an array", "replies one short"])
def test_a_malformed_answer_is_refused_in_one_line(broken: str) -> None:
    reply = _wire([_transition(0), _transition(1)])
    if broken == "values one row short":
        reply["values"] = reply["values"][:1]
    elif broken == "values one column short":
        reply["values"] = reply["values"][:, :-1]
    elif broken == "values of float32":
        reply["values"] = reply["values"].astype(np.float32)
    elif broken == "an observation one row short":
        reply["observation"]["image"] = reply["observation"]["image"][:1]
    elif broken == "no info_keys":
        del reply["info_keys"]
    elif broken == "an observation that is not an array":
        reply["observation"]["state"] = [0.0] * 39
    else:
        reply = {"replies": [{}]}
    refused = "^the test server (answered 2 steps with|sent an observation that is not a map).*assay-sim/2"
    with pytest.raises(SimulatorRefused, match=refused) as caught:
        decode_steps(reply, 2, WHERE)
    assert "\n" not in str(caught.value)


def test_values_of_other_types_come_back_as_a_lone_step_gives_them() -> None:
    """numpy scalars, a 0-d observation, a missing flag: the columns give what the per-step answer gives."""
    sent = [Transition({"scalar": np.array(3.5), "state": np.arange(3, dtype=np.float32)}, np.float32(0.1),
                       np.bool_(True), None, np.int64(0), {"grasped": np.float32(0.7), "moved": np.bool_(True)})
            for _ in range(3)]  # type: ignore[arg-type]
    got = decode_steps(_wire(sent), 3, WHERE)
    for a, b in zip(got, sent, strict=True):
        assert isinstance(a, Transition)
        expected = _per_step(b)
        _same(a, expected)
        assert a.observation["scalar"].shape == () and isinstance(a.observation["scalar"], np.ndarray)
        assert (a.terminated, a.truncated, a.success) == (True, False, False)


def test_a_value_that_is_not_a_number_is_that_steps_fault_alone() -> None:
    sent: list[Transition | str] = [_transition(0), _transition(1), _transition(2)]
    alike = sent[1]
    assert isinstance(alike, Transition)
    sent[1] = Transition(alike.observation, None, False, False, False, alike.info)  # type: ignore[arg-type]
    replies = decode_steps(_wire(sent), 3, WHERE)
    assert isinstance(replies[1], str) and replies[1].startswith("E_SIM: ")
    _same(decode_transition(replies[0], WHERE), sent[0])  # type: ignore[arg-type]
