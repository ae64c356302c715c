"""The router's similarity, and so its skill on a near tie, never depends on its batch-mates."""

from __future__ import annotations

import pytest

pytest.importorskip("sentence_transformers")


def test_routing_an_instruction_alone_or_beside_others_is_bitwise_equal():
    from assay.policies.router import InstructionRouterPolicy

    router = InstructionRouterPolicy(skills=("push-v3", "reach-v3", "pick-place-v3"))
    alone = router.route(["reach the red goal"])
    beside = router.route(["pick up the puck and put it at the goal", "reach the red goal", "push it"])
    assert alone[0] == beside[1]  # the same skill and the bitwise-same similarity
