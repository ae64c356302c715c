"""``assay equivalence``: one campaign under two environments, a TOST verdict and what differs between them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from assay.cli import render
from assay.cli.common import JsonOpt, user_errors
from assay.cli.options import ExecutorOpt, ProtocolOpt, ProtocolPolicyOpt
from assay.errors import AssayError

EnvOpt = Annotated[str, typer.Option(help="An environment: 'python=/path/to/python VAR=VALUE ...' (python: this "
                                          "interpreter when left out), e.g. 'MUJOCO_GL=egl'.")]


def register(app: typer.Typer) -> None:
    """Add ``equivalence`` to the app."""
    app.command("equivalence")(equivalence_command)


def equivalence_command(
    campaign: Annotated[Path | None, typer.Argument(help="Campaign YAML file (or --protocol).")] = None,
    protocol: ProtocolOpt = None,
    policy: ProtocolPolicyOpt = None,
    env_a: Annotated[str, typer.Option("--env-a", help="Environment A: 'python=PATH VAR=VALUE ...'.")] = "",
    env_b: Annotated[str, typer.Option("--env-b", help="Environment B, the same form.")] = "",
    margin: Annotated[float, typer.Option("--margin", help="The largest difference in success rate that counts as "
                                          "the same (e.g. 0.05).")] = 0.05,
    alpha: Annotated[float, typer.Option("--alpha", help="TOST level: the 1 - 2 alpha interval must lie inside "
                                         "the margin.")] = 0.05,
    out: Annotated[Path, typer.Option("-o", "--out", help="Where the two stores go (OUT/A, OUT/B).")] = Path(
        "equivalence"),
    workers: Annotated[int, typer.Option("--workers", "-w", min=1)] = 1,
    executor: ExecutorOpt = "local",
    frames: Annotated[bool, typer.Option("--frames/--no-frames", help="Compare the videos' pixels too.")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Run one campaign under two environments (package versions, renderer) on paired seeds: a TOST verdict on
    the success rates at --margin, the package and renderer differences, and the trajectories' and pixels'
    differences."""
    from assay.protocols.equivalence import parse_environment, run_equivalence

    with user_errors():
        if (campaign is None) == (protocol is None) or (protocol is not None and policy is None):
            raise AssayError("give a campaign file, or --protocol NAME with --policy P")
        run_args = [str(campaign)] if campaign is not None else ["--protocol", str(protocol), "--policy", str(policy)]
        first, second = parse_environment("A", env_a), parse_environment("B", env_b)
        result = run_equivalence(run_args, first, second, out, margin, alpha, workers, executor, frames)
    if json_out:
        render.print_json(result.to_dict())
        return
    say = render.console.print
    for label, described in result.environments.items():
        say(f"{label}: {escape(described['environment'])}; renderer {', '.join(described['renderers']) or 'none'}",
            highlight=False, soft_wrap=True)
    differing = ", ".join(f"{n} {a} → {b}" for n, a, b in result.packages) or "none"
    say(f"package versions that differ: {escape(differing)}", highlight=False, soft_wrap=True)
    d = result.test.difference
    say(f"campaign {result.campaign}: A {d.rate_a:.3f}, B {d.rate_b:.3f} over {d.pairs} paired episodes "
        f"({d.a_only} only A succeeded, {d.b_only} only B; McNemar p = {d.p_value:.3g})", highlight=False,
        soft_wrap=True)
    style = "green" if result.test.equivalent else "yellow"
    say(f"[{style}]{escape(result.test.verdict)}[/]", highlight=False, soft_wrap=True)
    t = result.trajectories
    say(f"trajectories: {t.identical} of {t.pairs} identical; largest state difference {t.max_state:.3g}, action "
        f"{t.max_action:.3g}; first divergence at step {t.first_divergence if t.first_divergence is not None else '-'}"
        + (f"; frames: {t.frames_compared} compared, largest pixel difference {t.max_pixel}/255, "
           f"{t.share_different:.3%} of pixels over 10/255" if t.frames_compared else ""),
        highlight=False, soft_wrap=True)
