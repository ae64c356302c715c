"""Open-loop vs closed-loop over BC checkpoints: rankings, Kendall tau, MMRV, misranked pairs."""

from __future__ import annotations

import json

import pytest
from scipy.stats import kendalltau
from typer.testing import CliRunner

pytest.importorskip("torch")

from assay.cli.app import app  # noqa: E402
from assay.errors import AssayError  # noqa: E402
from assay.learning.olcl import OLCLConfig, misranked  # noqa: E402

runner = CliRunner()


def test_misranked_pairs_and_config_checks():
    mse = {"a": 0.1, "b": 0.2, "c": 0.3}
    success = {"a": 0.5, "b": 0.9, "c": 0.1}
    assert misranked(list(mse), mse, success) == [("a", "b")]  # a has lower MSE but lower success than b
    assert misranked(list(mse), mse, {"a": 0.9, "b": 0.5, "c": 0.5}) == []  # ties in success are not misranks
    with pytest.raises(AssayError, match="at least 5 checkpoints"):
        OLCLConfig("metaworld/reach@1", sizes=(1, 2), epochs=(1, 2))


@pytest.mark.sim
@pytest.mark.slow
def test_olcl_end_to_end_on_a_tiny_budget(tmp_path):
    result = runner.invoke(app, ["olcl", "--task", "metaworld/reach@1", "--sizes", "1,4", "--epochs", "1,5,30",
                                 "--heldout", "2", "--eval", "4", "--horizon", "80", "--store", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["checkpoints"] == ["n1-e1", "n1-e5", "n1-e30", "n4-e1", "n4-e5", "n4-e30"]
    mse = {r["policy"]: r["mse"] for r in doc["open_loop"]}
    rate = {name: cell["rate"] for name, cell in doc["closed_loop"].items()}
    assert all(cell["trials"] == 4 for cell in doc["closed_loop"].values())
    assert mse["n4-e30"] < mse["n1-e1"]  # more data and training: lower held-out action error
    names = doc["checkpoints"]
    if len(set(rate.values())) > 1:
        tau = kendalltau([rate[n] for n in names], [-mse[n] for n in names]).statistic
        assert doc["kendall_tau"] == pytest.approx(tau)
    assert doc["misranked"] == [list(p) for p in misranked(names, mse, rate)]
    assert 0.0 <= doc["mmrv"] <= 1.0
