"""The ``assay`` command. User mistakes print one line and exit with status 2.

The command starts at once: this module imports Typer and nothing heavy, and each command's module is
imported only when that command runs (``cli.lazy``). ``assay --help`` lists ``COMMANDS`` below.

Adding a command (the registration pattern):

1. write the function in a ``*_commands.py`` module (its heavy imports at that module's top are fine) and
   add it in the module's ``register(app)``: ``app.command("name")(function)``, or a group with
   ``app.add_typer(group, name="name")``;
2. add its line to ``COMMANDS``: the name, the first paragraph of its docstring (or the group's help), and
   the module(s) that register it. ``tests/test_cli_lazy.py`` checks the table against what the modules
   register, help included.

A group several modules fill (``episodes``) is one Typer object that the first of them creates and the
others find on the app: ``cli.lazy.subgroup(app, name, help)``.
"""

from __future__ import annotations

import warnings
from typing import Annotated

import typer

from assay.cli.gates import plain_help, show_warning, version_callback
from assay.cli.lazy import LazyCommand, LazyGroup


def _entry(help: str, *modules: str) -> LazyCommand:
    return LazyCommand(help, modules)


COMMANDS: dict[str, LazyCommand] = {
    "run": _entry("Run a campaign; rerunning the same command resumes it (finished episodes are skipped).",
                  "campaign_commands"),
    "tasks": _entry("List registered tasks (any gymnasium/<ID> also resolves on demand).", "listing_commands"),
    "policies": _entry("List built-in policies and their parameters.", "listing_commands"),
    "results": _entry("Success rates with mid-p 95% intervals and mean returns with t intervals, from the catalog, "
                      "with each row's recorded/planned episodes; nominal variant unless --variant (grouped by "
                      "variant: each one).", "results_commands"),
    "compare": _entry("Per-task and suite differences A − B with intervals, p-values and verdicts. Tasks without a "
                      "success signal (gymnasium ids) are compared on paired mean return instead (``returns`` in "
                      "--json).", "stats_commands"),
    "leaderboard": _entry("Suite scores with bootstrap intervals, rank intervals, P(A better than B) and the "
                          "sign-off gate (``--model irt|bt``: a ranking model over policies × tasks that tolerates "
                          "missing cells).", "leaderboard_commands"),
    "budget": _entry("How many episodes per cell detect a difference of --delta with --power.", "stats_commands"),
    "correlate": _entry("Pearson, Spearman, Kendall and MMRV between real and sim success rates, per task and "
                        "averaged, with what limits them: k, a Fisher-z interval, drop-one leverage and the exact "
                        "permutation p-value (floor 1/k!).", "stats_commands"),
    "estimate-real": _entry("Prediction-powered estimate and interval of real success from sim episodes and paired "
                            "real trials, with the classical real-only interval beside it and the real trials the "
                            "sim episodes were worth.", "real_commands"),
    "reproduce": _entry('Check a campaign against a published evaluation: its protocol field by field, its rate by '
                        'an exact test against the published one; says "reproduced", "not reproduced" or "protocol '
                        'differs".', "reproduce_commands"),
    "lint-rate": _entry("Whether a reported success rate can come from that many trials (rate × n near a whole "
                        "number); exit 1 if not.", "reproduce_commands"),
    "stability": _entry("Kendall τ and MMRV between two leaderboards (two seed sets, variants or twin versions).",
                        "stats_commands"),
    "openloop": _entry("Action MSE and R² of policies on recorded observations, beside the closed-loop ranking "
                       "(one variant).", "stats_commands"),
    "serve-policy": _entry("Serve POLICY (openpi protocol: websocket + msgpack) with a dynamic batcher across all "
                           "connections.", "serve_commands"),
    "serve-sim": _entry("Serve BACKEND's environments to campaigns (`simulators: {BACKEND: ws://HOST:PORT}`), a "
                        "process per client.", "sim_commands"),
    "sim-parity": _entry("Run N seeded episodes in process and on the served simulator with the same actions; "
                         "report the first difference (exit 1), or that every observation, reward, flag and info "
                         "value was identical.", "sim_commands"),
    "env": _entry("A backend's own Python environment.", "sim_commands"),
    "factors": _entry("List perturbation factors: axis, unit, valid range, default, when and where each applies.",
                      "listing_commands"),
    "sweep": _entry("Run a single-factor sweep (nominal plus each level, on the same seeds) and print the curve.",
                    "robustness_commands"),
    "priorities": _entry('What to collect next, per policy: "collect N demos of task T in region R (why)", by '
                         "failure mass x recoverability over factor and initial-condition regions.",
                         "failures_commands"),
    "boundary": _entry("Bisect one factor for the level where success falls below a threshold (paired seeds at "
                       "every level).", "failures_commands"),
    "report": _entry("Write one self-contained HTML report of a campaign (works offline: inline SVG figures, "
                     "embedded video).", "report_commands"),
    "serve": _entry("Serve the dashboard and JSON API (OpenAPI at /docs) over a store.", "report_commands"),
    "leakage": _entry("Which of the checkpoint's own episodes in a campaign are scenes it was trained on (task, "
                      "seed and the factors it perceives by its contract; not the horizon): their successes say "
                      "nothing about generalisation.", "learning_commands"),
    "olcl": _entry("Open-loop action MSE vs closed-loop success over BC checkpoints of different quality: Kendall "
                   "tau, MMRV.", "learning_commands"),
    "train-bc": _entry("Train a behaviour-cloning policy on the store's data; run it as policy 'bc:OUT' (or "
                       "'pixel-bc:OUT').", "learning_commands"),
    "validity": _entry("Probes of the benchmark's own validity: the same episodes with the instruction withheld "
                       "(empty, and another task's: a policy that keeps its success was not tested on language) and, "
                       "on tasks with fixed initial states, with layouts resampled (a policy that does worse learned "
                       "the fixed set); paired intervals.", "validity_commands"),
    "noise": _entry("Train a recipe once per training seed on the same demos, evaluate every checkpoint on the same "
                    "episodes, and split its success variance into harness (binomial) and retrain parts.",
                    "noise_commands"),
    "ladder": _entry("The learning sanity ladder: expert demos, a BC trained on them, then rung 1 (its own demos' "
                     "initial states: at least --own-min must succeed, else exit 1) and rung 2 (held-out initial "
                     "states, with intervals).", "ladder_commands"),
    "flywheel": _entry("The flywheel: --design runs a designed experiment (base on a slice; random, targeted, "
                       "recovery, ponr and oracle arms at an equal budget; replicates); --task runs base vs "
                       "recovery demos vs fresh demos on one task.", "learning_commands"),
    "semantic-profile": _entry("Train BC conditioned on the instruction's MiniLM embedding; its semantic retention "
                               "beside router and expert.", "semantic_commands"),
    "episodes": _entry("Inspect recorded episodes.", "episodes_commands", "store_commands"),
    "failures": _entry("Mine failures: categories, attribution, point of no return.", "failures_commands"),
    "regress": _entry("Regression sets of failing cases.", "failures_commands"),
    "twin": _entry("Layered digital twin: calibrate, attribute the sim-to-real gap, check asset swaps.",
                   "twin_commands"),
    "export": _entry("Export episodes to other formats.", "learning_commands"),
    "zoo": _entry("The policy zoo: BC checkpoints of graded skill (Meta-World pixels; LIBERO state and pixels).",
                  "zoo_commands"),
    "store": _entry("Check the store itself, and prune old step files and videos.", "store_commands"),
    "protocol": _entry("Protocol manifests: list, show, and the knob-by-knob difference between two (diff).",
                       "protocol_commands"),
    "bundle": _entry("Write a campaign's verifiable result vector (``assay bundle CAMPAIGN -o DIR``: per-episode "
                     "outcomes, package versions, the manifest, rates with intervals, the stamp, a SHA-256 manifest) "
                     "or check one offline (``assay bundle verify DIR``: every checksum, every interval and the stamp "
                     "recomputed, no store needed).", "protocol_commands"),
    "equivalence": _entry("Run one campaign under two environments (package versions, renderer) on paired seeds: a "
                          "TOST verdict on the success rates at --margin, the package and renderer differences, and "
                          "the trajectories' and pixels' differences.", "equivalence_commands"),
    "trace": _entry("Per-layer traces: export them, and find where two runs part.", "trace_commands"),
}


class AssayGroup(LazyGroup):
    """The ``assay`` group: the commands of ``COMMANDS``, each loaded when it runs."""

    lazy = COMMANDS


plain_help()
app = typer.Typer(cls=AssayGroup, no_args_is_help=True, help="Closed-loop simulation evaluation for robot policies.",
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Closed-loop simulation evaluation for robot policies. Exit status: 0 ok, 1 a gate failed, 2 a user error."""


def main() -> None:
    """The console script ``assay`` (also ``python -m assay``)."""
    warnings.showwarning = show_warning  # Assay's warnings as one line
    app(prog_name="assay")


if __name__ == "__main__":
    main()
