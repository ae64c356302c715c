"""docs/POLICY.md's Python blocks run as written, and its example policy passes the conformance kit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from assay.sim import default_registry
from assay.testing import check_policy

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "POLICY.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_the_guide_has_its_examples():
    names = {name for block in BLOCKS for name in re.findall(r"^class (\w+)", block, flags=re.M)}
    assert {"Still", "NoisyStill", "BatchCentred"} <= names


@pytest.mark.sim
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_python_block_of_the_guide_runs(index, monkeypatch):
    monkeypatch.chdir(REPO)  # the blocks name paths from the repository root, as a reader's shell would
    monkeypatch.syspath_prepend(str(REPO))  # restored afterwards (a block may insert "examples")
    namespace: dict = {"__name__": f"policy_guide_{index}"}
    exec(compile(BLOCKS[index], f"{GUIDE}:block{index}", "exec"), namespace)
    for name in ("Still", "NoisyStill"):  # the guide's example policies keep the contract they describe
        if name in namespace:
            check_policy(namespace[name](), default_registry().get("metaworld/reach@1"), bounded=True)
