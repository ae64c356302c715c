"""A protocol diff on LIBERO with an answer known by construction: the instruction source (prompt) under
LIBERO-PRO's language perturbation, where openpi's and LeRobot's scripts send the task's own instruction and
LIBERO-PRO's evaluator the perturbed file's (one task, one episode per run, no camera)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.protocols.diff import protocol_diff
from assay.run import InlineExecutor
from assay.spec import PolicySpec
from assay.spec.protocol import parse_manifest
from assay.store import Store

pytestmark = [pytest.mark.libero, pytest.mark.sim, pytest.mark.slow]
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"


def _manifest(name: str, prompt: str) -> dict:
    return {"schema_version": 1, "name": name, "version": 1, "backend": "libero",
            "suites": [{"name": "object", "tasks": [SOUP], "horizon": 280}],
            "knobs": {"trials_per_task": 1, "seed": 0, "settle_steps": 10, "prompt": prompt, "control_hz": 20.0},
            "variants": [{"label": "language", "factors": {"libero.language": "pro"}}]}


def test_the_instruction_source_is_the_knob_that_matters_under_the_language_perturbation(tmp_path: Path):
    from assay.policies import add_import_root

    add_import_root(Path(__file__).parent)
    harness, openpi = parse_manifest(_manifest("pro-harness", "variant"), "p"), parse_manifest(
        _manifest("pro-openpi", "task"), "q")
    gated = PolicySpec(name="prompted", entrypoint="protocol_policies:PromptGatedExpert", version="1")
    with Store(tmp_path / "store", create=True) as store:
        [diff] = protocol_diff(harness, openpi, [gated], store, InlineExecutor(store.data_root))
        instructions = {r.instruction for r in store.catalog.episodes()}
    # the perturbed file's paraphrase under the evaluator's rule, the original under openpi's
    assert instructions == {"grab alphabet soup and put it into basket",
                            "pick up the alphabet soup and place it in the basket"}
    assert [(e.knob, e.effect.difference) for e in diff.effects] == [("prompt", 1.0)]
    assert diff.total.difference == 1.0 and diff.interaction == 0.0
    assert diff.same == ("horizon", "replan", "image", "settle", "noise", "renderer")
