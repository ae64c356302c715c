"""The listings: ``assay tasks``, ``assay policies`` and ``assay factors``.

They answer at once: this module imports the task registry and the factor catalogue (``policies`` imports the
built-in policy classes), never the runner, the store or the statistics.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

import typer
from rich.markup import escape
from rich.table import Table

from assay.cli import render
from assay.cli.options import JsonOpt, user_errors
from assay.errors import AssayError
from assay.sim import FACTORS, default_registry
from assay.sim.factors import not_applicable, object_free_tasks


def register(app: typer.Typer) -> None:
    """Add ``tasks``, ``policies`` and ``factors`` to the ``assay`` command."""
    app.command()(tasks)
    app.command()(policies)
    app.command()(factors)


def tasks(
    backend: Annotated[str | None, typer.Option(help="metaworld | gymnasium")] = None,
    skill: Annotated[str | None, typer.Option()] = None,
    family: Annotated[str | None, typer.Option()] = None,
    level: Annotated[str | None, typer.Option(help="atomic | composite | long-horizon")] = None,
    contains: Annotated[str | None, typer.Option(help="Substring of the id or instruction.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List registered tasks (any gymnasium/<ID> also resolves on demand)."""
    with user_errors():
        found = default_registry().list(backend=backend, skill=skill, family=family, level=level, contains=contains)
        if json_out:
            render.print_json({"tasks": [render.task_dict(t) for t in found]})
        else:
            render.console.print(render.tasks_table(found))


def policies(json_out: JsonOpt = False) -> None:
    """List built-in policies and their parameters."""
    from assay.policies import BUILTIN_POLICIES, PolicyClass  # imports every policy class: only this listing

    rows: list[dict[str, Any]] = []
    for name, builtin in sorted(BUILTIN_POLICIES.items()):
        cls = cast(PolicyClass, builtin)
        params = {field: {"default": "(required)" if info.is_required() else info.default,
                          "description": info.description or ""}
                  for field, info in cls.Params.model_fields.items()}
        rows.append({"name": name, "version": cls.version, "doc": (cls.__doc__ or "").strip(), "params": params})
    if json_out:
        render.print_json({"policies": rows,
                           "entrypoints": "any 'package.module:attr' building an object with reset() and act()"})
        return
    table = render.Table(title="built-in policies (or 'package.module:attr')", title_justify="left")
    for column in ("name", "version", "parameters", "description"):
        table.add_column(column)
    for row in rows:
        shown = ", ".join(f"{k}={v['default']}" for k, v in row["params"].items()) or "-"
        table.add_row(row["name"], row["version"], shown, row["doc"])
    render.console.print(table)


def factors(
    axis: Annotated[str | None, typer.Option(help="visual | behavioral | semantic")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Say whether each factor applies to this task.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List perturbation factors: axis, unit, valid range, default, when and where each applies."""
    with user_errors():
        if axis is not None and axis not in {"visual", "behavioral", "semantic"}:
            raise AssayError(f"--axis {axis!r} is not valid; valid: visual, behavioral, semantic")
        chosen = [f for f in FACTORS.values() if axis is None or f.axis.value == axis]
        spec = default_registry().get(task) if task else None
        why = {f.name: not_applicable(f, spec) for f in chosen} if spec else {}
        excluded = object_free_tasks()
        if json_out:
            render.print_json({"task": spec.id if spec else None, "factors": [
                {"name": f.name, "axis": f.axis.value, "category": f.category or None, "kind": f.kind.value,
                 "unit": f.unit, "valid": f.valid,
                 "default": f.default, "stage": f.stage.value, "backends": sorted(f.backends),
                 "not_applicable_tasks": excluded if f.needs_object else [],
                 **({"applies": why[f.name] is None, "why_not": why[f.name]} if spec else {}),
                 "description": f.description} for f in chosen]})
            return
        title = f"{len(chosen)} perturbation factors" + (f" on {spec.id}" if spec else "")
        table = Table(title=title, title_justify="left")
        for column in ("factor", "axis", "valid", "default", "applies", "backends", "what it does"):
            table.add_column(column)
        for f in chosen:
            if spec:
                applies = "yes" if why[f.name] is None else f"[yellow]no: {why[f.name]}[/]"
            else:
                applies = f"at {f.stage.value}" + (f", not on {len(excluded)} Meta-World tasks without an object "
                                                   "body (--task to check one)" if f.needs_object else "")
            axis_text = f"{f.axis.value} ({f.category})" if f.category else f.axis.value
            table.add_row(f.name, axis_text, escape(f.valid), escape(str(f.default)), applies,
                          ",".join(sorted(f.backends)), f.description)
        render.console.print(table)
