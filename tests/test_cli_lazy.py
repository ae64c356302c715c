"""The ``assay`` command loads a command's module only when it runs; its table names every command.

Start-up time itself is a benchmark (``benchmarks/cli_startup.py``, docs/PERFORMANCE.md), never a test:
these tests check what is imported, which is what the time follows from.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from assay.cli.app import COMMANDS, AssayGroup, app
from assay.cli.lazy import load

runner = CliRunner()


def _first_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


def test_the_table_names_every_registered_command_with_its_help():
    """Adding a command means a line in ``cli.app.COMMANDS``: this fails until its name, help and modules are
    there (the listing shows the table's help without importing the module)."""
    group = AssayGroup()
    everything = load(group.all_modules()).commands
    assert set(everything) == set(COMMANDS), (
        f"add to cli.app.COMMANDS: {sorted(set(everything) - set(COMMANDS))}; "
        f"no longer registered: {sorted(set(COMMANDS) - set(everything))}")
    for name, entry in COMMANDS.items():
        assert name in load(entry.modules).commands, f"{name}: not registered by {entry.modules}"
        assert entry.help == _first_paragraph(everything[name].help or ""), (
            f"cli.app.COMMANDS[{name!r}].help must be its docstring's first paragraph: "
            f"{_first_paragraph(everything[name].help or '')!r}")


def test_a_group_filled_by_two_modules_has_all_its_commands():
    group = AssayGroup()
    episodes = group.get_command(typer.Context(group), "episodes")
    assert isinstance(episodes, TyperGroup)
    assert sorted(episodes.commands) == ["ls", "replay", "show"]


def test_help_lists_every_command_in_the_tables_order():
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "300"}).stdout
    positions = [m.start() if (m := re.search(rf"^│ {re.escape(name)} ", text, re.M)) else -1 for name in COMMANDS]
    assert all(p >= 0 for p in positions), [n for n, p in zip(COMMANDS, positions, strict=True) if p < 0]
    assert positions == sorted(positions)


def test_a_mistyped_command_still_gets_a_suggestion():
    result = runner.invoke(app, ["sweeep"])
    assert result.exit_code == 2
    assert "No such command 'sweeep'" in result.output and "Did you mean 'sweep'?" in result.output


PROBE = """
import json, sys
from assay.cli.app import app
try:
    app(sys.argv[1:], prog_name="assay", standalone_mode=False)
except SystemExit:
    pass
heavy = ("scipy", "sqlalchemy", "torch", "pyarrow", "mujoco", "ray", "assay.store", "assay.run", "assay.metrics",
         "assay.policies", "assay.sim", "assay.cli.campaign_commands", "assay.cli.stats_commands")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


def _imported(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_listings_import_only_what_they_show():
    """``--version`` and ``--help`` import no command module; ``tasks``/``factors`` the task registry and the
    factor catalogue (MuJoCo only when a task is built); ``policies`` the policy classes. None imports the
    store, the runner or the statistics."""
    assert _imported("--version") == []
    assert _imported("--help") == []
    assert _imported("tasks") == ["assay.sim"]
    assert _imported("factors") == ["assay.sim"]
    assert _imported("policies") == ["assay.policies", "assay.sim"]


def test_python_dash_m_assay_is_the_command():
    from assay import __version__

    done = subprocess.run([sys.executable, "-m", "assay", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout == f"assay {__version__}\n"


SHADOWED = """
import assay.metrics.correlation, assay.metrics.stability  # the submodules first, as a lazy package allows
import assay.metrics as metrics
from assay.metrics import completeness, correlation, posterior, stability
loaded = "assay.metrics.ranking" in __import__("sys").modules
print([callable(f) and f.__module__ for f in (completeness, correlation, posterior, stability, metrics.correlation)],
      loaded)
"""


def test_a_lazy_package_keeps_a_function_named_like_its_module():
    """``metrics.correlation`` is the function (as it was when the package imported everything), even after the
    submodule of the same name was imported; reading it loads no other module of the package."""
    done = subprocess.run([sys.executable, "-c", SHADOWED], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['assay.metrics.completeness',", "'assay.metrics.correlation',",
                                   "'assay.metrics.posterior',", "'assay.metrics.stability',",
                                   "'assay.metrics.correlation']", "False"]


def test_reading_commands_load_neither_the_runner_nor_scipy_stats(tmp_path):
    """``results``, ``leaderboard`` and ``episodes ls`` read the catalog: none imports the worker, a policy,
    torch or ``scipy.stats`` (their intervals take scipy.special's quantiles), and ``episodes ls`` no pyarrow and
    no scipy at all. What the CPU time follows from (figures in docs/PERFORMANCE.md, "CLI start-up")."""
    from tests.record_store import fake_store
    from tests.stats_fixtures import records

    store = fake_store(tmp_path / "s", "small", records({("a", "metaworld/reach@1"): "SSFS",
                                                         ("b", "metaworld/reach@1"): "FSFF"}))
    probe = PROBE.replace('"assay.cli.stats_commands")', '"assay.cli.stats_commands", "scipy.stats", '
                          '"assay.run.worker", "assay.policies.builtin", "assay.learning.bc", "pyarrow.parquet")')

    def imported(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", probe, *args, "--store", str(store)], capture_output=True,
                              text=True, check=True)
        return json.loads(done.stderr.strip().splitlines()[-1])

    # `assay.run` is its lazy package alone (cli.progress's observers); `assay.sim` the task registry, which says
    # whether a task has a success signal
    reading = ["assay.metrics", "assay.run", "assay.store", "scipy", "sqlalchemy"]
    assert imported("results") == sorted(["assay.sim", *reading])
    assert imported("leaderboard") == sorted(reading)
    assert imported("episodes", "ls") == ["assay.run", "assay.store", "sqlalchemy"]
