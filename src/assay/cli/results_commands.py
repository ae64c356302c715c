"""``assay results``: the rate table of a stored campaign, with its leaderboard, sign-off, routing, safety, leakage
and renderer notes (``results_view``), and on request pass^k, the robustness profile and a results CSV.

It reads counts from the catalog. The modules it imports load neither the runner nor ``scipy.stats`` (its intervals take
``scipy.special``'s quantiles); docs/PERFORMANCE.md, "CLI start-up", has what that costs.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, split_list, user_errors
from assay.cli.gates import FailUnderOpt, check_rates, is_stdout
from assay.cli.results_view import add_pass_k, interval_document, results_extras, return_scored
from assay.cli.scoring import AllowPartialOpt, Scored, VariantScopeOpt, scored_campaign
from assay.errors import AssayError
from assay.metrics import entries_of, format_results_csv, missing_rows, rate_rows, write_results_csv
from assay.store import Store


def register(app: typer.Typer) -> None:
    """Add ``results`` to the ``assay`` command."""
    app.command()(results)


def results(
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaign: Annotated[str | None, typer.Option(help="Campaign name (default: the latest).")] = None,
    by: Annotated[str, typer.Option(help="Group by any of policy,task,variant,campaign.")] = "policy,task",
    profile: Annotated[bool, typer.Option(
        "--profile", help="Robustness retention per variant and axis (paired seeds).")] = False,
    variant: VariantScopeOpt = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Also write task,policy,successes,trials to this "
                                                    "file (one variant: what `assay correlate` reads); `-`: "
                                                    "stdout, the tables then go to stderr.")] = None,
    errors_as_failures: Annotated[bool, typer.Option("--errors-as-failures", help="Score error episodes as failures "
                                                     "(default: left out of the denominator, marked *).")] = False,
    pass_k: Annotated[int | None, typer.Option("--pass-k", min=1, max=1000, metavar="K", help="Also pass^k: the "
                                               "probability that K independent episodes all succeed, per cell and "
                                               "per policy.")] = None,
    interval: Annotated[str, typer.Option("--interval", help="The rate interval (and pass^k cells'): midp (default), "
                                          "exact (Clopper–Pearson: ≥ 0.95 at every rate and n), wilson, jeffreys; "
                                          "a table says when its interval dips below 0.93 at the n it shows.")
                        ] = "midp",
    allow_partial: AllowPartialOpt = False,
    fail_under: FailUnderOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Success rates with mid-p 95% intervals and mean returns with t intervals, from the catalog, with each
    row's recorded/planned episodes; nominal variant unless --variant (grouped by variant: each one)."""
    with user_errors():
        groups = split_list(by)
        with open_store(store, catalog) as opened:
            scored = scored_campaign(opened, campaign, variant, separately="variant" in groups)
            name, cells = scored.name, scored.scoped
            if csv_out is not None:
                if len(scored.scope.variants) > 1:
                    raise AssayError(f"campaign {name!r} has variants {', '.join(scored.scope.variants)}; a results "
                                     "CSV holds one rate per (task, policy): pick one with --variant")
                if is_stdout(csv_out):
                    sys.stdout.write(format_results_csv(entries_of(cells, name)))
                else:
                    write_results_csv(csv_out, entries_of(cells, name))
            covered = scored.within()
            rows = rate_rows(cells, by=groups, method=interval, errors_as_failures=errors_as_failures)
            rows += missing_rows(covered, groups, rows)
            extras = results_extras(opened, scored, allow_partial)
            if pass_k is not None:
                add_pass_k(extras, cells, pass_k, groups, scored.title(f"campaign {name}"), interval)
            robustness = _profile(opened, scored, interval) if profile else None
        method = interval_document(interval, [r.scored for r in rows])
        if json_out:
            render.print_json({"campaign": name, "by": groups, "errors_as_failures": errors_as_failures,
                               **scored.document(covered), "interval": method,
                               "results": [r.to_dict() | covered.of(r.group).summary() for r in rows],
                               **extras.document, **(robustness or {})})
        else:
            no_success = frozenset(t for t in {c.task for c in cells} if return_scored(t))
            # With the CSV on stdout, the tables go to stderr (the console writes to whatever sys.stdout is).
            with contextlib.redirect_stdout(sys.stderr) if is_stdout(csv_out) else contextlib.nullcontext():
                render.console.print(render.rate_table(rows, scored.title(f"campaign {name}"), no_success,
                                                       errors_as_failures, covered, method["label"]))
                if method["coverage_note"]:
                    render.console.print(f"[yellow]{method['coverage_note']}[/]", highlight=False, soft_wrap=True)
                scored.say(covered)
                extras.print()
                if robustness is not None:
                    from assay.cli.robustness_commands import print_profile

                    print_profile(robustness)
        check_rates(rows, fail_under)


def _profile(store: Store, scored: Scored, interval: str) -> dict[str, Any]:
    """``--profile``'s robustness document (``robustness_commands`` loads the runner: only when asked)."""
    from assay.cli.robustness_commands import stored_profile

    return stored_profile(store, scored, interval)
