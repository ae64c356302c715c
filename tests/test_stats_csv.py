"""Results CSVs: one-line errors with the row number, through the API and the CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.metrics import ResultsCsvError, read_results_csv

runner = CliRunner()

SIM = "task,policy,successes,trials\nt1,a,9,10\nt1,b,5,10\nt1,c,1,10\nt2,a,8,10\nt2,b,7,10\nt2,c,2,10\n"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("task,successes,trials\nt1,1,2\n", "real.csv row 1: missing column policy"),
    ("task,policy\nt1,a\n", "real.csv row 1: missing column successes, trials"),
    ("task,policy,successes,trials\nt1,a,1,2\nt1,b,5,4\n", "real.csv row 3: trials (4) < successes (5)"),
    ("task,policy,successes,trials\nt1,a,1,2\nt9,b,1,4\n", "real.csv row 3: unknown task 't9'; sim results have t1, t2"),
    ("task,policy,successes,trials\nt1,a,x,2\n", "real.csv row 2: successes 'x' is not a whole number"),
    ("task,policy,successes,trials\nt1,a,1,0\n", "real.csv row 2: trials is 0"),
    ("task,policy,successes,trials\nt1,a,1,2\nt1,a,1,3\n", "real.csv row 3: task 't1' policy 'a' already given on row 2"),
    ("task,policy,success_rate\nt1,a,1.5\n", "real.csv row 2: success_rate 1.5 is out of range; valid: [0, 1]"),
    ("task,policy,successes,trials\nt1,zz,1,2\n", "real.csv row 2: policy 'zz' has no sim result on t1; sim has a, b, c"),
    ("", "real.csv row 1: empty file"),
])
def test_csv_errors_are_one_line_with_the_row(tmp_path, text, message):
    real = _write(tmp_path, "real.csv", text)
    sim = _write(tmp_path, "sim.csv", SIM)
    result = runner.invoke(app, ["correlate", "--real", str(real), "--sim", str(sim)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_rate_only_csv_and_extra_columns_are_read(tmp_path):
    path = _write(tmp_path, "r.csv", "task,policy,success_rate,notes\nt1,a,0.5,x\nt1,b,0.25,\n")
    entries = read_results_csv(path)
    assert [(e.task, e.policy, e.rate, e.trials, e.row) for e in entries] == [("t1", "a", 0.5, None, 2),
                                                                               ("t1", "b", 0.25, None, 3)]
    with pytest.raises(ResultsCsvError, match="cannot read results CSV"):
        read_results_csv(tmp_path / "missing.csv")


def test_correlate_json_is_one_document_with_per_task_and_average(tmp_path):
    real = _write(tmp_path, "real.csv", "task,policy,successes,trials\nt1,a,8,10\nt1,b,6,10\nt1,c,0,10\n"
                                        "t2,a,9,10\nt2,b,9,10\nt2,c,1,10\n")
    sim = _write(tmp_path, "sim.csv", SIM)
    result = runner.invoke(app, ["correlate", "--real", str(real), "--sim", str(sim), "--json", "--resamples", "300"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [t["task"] for t in doc["tasks"]] == ["t1", "t2"]
    assert doc["tasks"][0]["stats"]["mmrv"]["value"] == 0.0
    assert doc["average"]["kendall"]["value"] == pytest.approx((1.0 + doc["tasks"][1]["stats"]["kendall"]["value"]) / 2)
    assert doc["n_resamples"] == 300 and doc["calibration_file"] is None
    text = runner.invoke(app, ["correlate", "--real", str(real), "--sim", str(sim), "--resamples", "300"])
    assert "mean over tasks" in text.stdout
    both = runner.invoke(app, ["correlate", "--real", str(real)])
    assert both.exit_code == 2 and "give exactly one of --sim SIM.csv or --campaign NAME" in both.stderr
