"""An exact, faster ``touching_object`` for Meta-World's Sawyer environments.

Meta-World v3 decides "the gripper holds the object" (``touching_object``, called at every step by the
reward or ``evaluate_state`` of 14 tasks: pick-place, push, sweep, soccer, ...) by walking
``data.contact`` in Python twice, one ``MjContact`` wrapper per contact. Timed on ``pick-place`` at
2-3.5 contacts a step that costs 270-350 µs a call, a quarter to a third of the whole step
(``benchmarks/metaworld_contacts.py``). :func:`install`
gives an environment the same test on MuJoCo's contact arrays (~25 µs): the same contacts are chosen
(integer geom ids), and each pad's contact forces are added one by one in contact order starting from
``0``, exactly as Python's ``sum`` over the generator did, so the answer is the same bit for bit
(``tests/test_metaworld_contacts.py`` checks every step of every such task's expert episodes, and
``tests/test_sim.py`` the trajectories against Meta-World's own MT1 set-up).
"""

from __future__ import annotations

from typing import Any

PADS = ("leftpad_geom", "rightpad_geom")


def _pad_force(contact: Any, forces: Any, touches_object: Any, first: Any, second: Any, pad: int) -> Any:
    """Meta-World's ``sum(efc_force[c.efc_address] for c in contacts of pad and object)``, same order."""
    total: Any = 0
    for address in contact.efc_address[touches_object & ((first == pad) | (second == pad))]:
        total += forces[address]
    return total


def install(env: Any) -> None:
    """Replace ``env.touching_object`` (a Meta-World ``SawyerXYZEnv``) with the array version, on this
    instance only; an environment without both gripper pads keeps its own."""
    try:
        left, right = (env.model.geom(name).id for name in PADS)
    except KeyError:
        return

    def touching_object(object_geom_id: int) -> Any:
        data = env.data
        contact = data.contact
        first, second = contact.geom1, contact.geom2  # each read builds an array view: once per call
        touches_object = (first == object_geom_id) | (second == object_geom_id)
        forces = data.efc_force
        left_force = _pad_force(contact, forces, touches_object, first, second, left)
        right_force = _pad_force(contact, forces, touches_object, first, second, right)
        return left_force > 0 and right_force > 0  # the original's comparison: the same value and type

    env.touching_object = touching_object
