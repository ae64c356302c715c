"""The public surface and the one-way layering (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import assay

SRC = Path(assay.__file__).parent

EXPECTED = {
    "AssayError", "CampaignSpec", "EpisodeJob", "EpisodeRecord", "InlineExecutor", "LocalExecutor", "Outcome",
    "Perturbation", "Policy", "PolicyContext", "PolicySpec", "SimEnv", "SpecError", "Store", "StoreError",
    "TaskRegistry", "TaskSpec", "UnknownPolicyError", "UnknownTaskError", "UnsupportedError", "Variant",
    "default_registry", "load_campaign", "make_env", "make_policy", "prepare_campaign", "rate_table",
    "run_campaign", "success_interval", "campaign_from_data", "results_table", "make_executor",
}

# package -> the assay packages it may import (errors is everyone's)
ALLOWED = {
    "spec": set(),
    "sim": {"spec"},
    "policies": {"spec"},
    "store": {"spec"},
    "testing": {"spec", "sim", "policies"},
    "run": {"spec", "sim", "policies", "store"},
    "metrics": {"spec", "store"},
    "failures": {"spec", "sim", "policies", "store", "metrics"},
    "twin": {"spec", "sim", "policies", "store", "metrics", "failures", "run"},
    "learning": {"spec", "sim", "policies", "store", "run", "metrics", "failures"},
    "report": {"spec", "store", "metrics", "failures"},
    "server": {"spec", "sim", "policies", "store", "run", "metrics", "failures", "twin", "learning", "report", "server"},
    "cli": {"spec", "sim", "policies", "store", "run", "metrics", "failures", "twin", "learning", "report", "server", "cli"},
}


def test_exported_members_are_curated():
    assert set(assay.__all__) == EXPECTED
    assert all(hasattr(assay, name) for name in assay.__all__)


def test_layers_import_one_way():
    for package, allowed in ALLOWED.items():
        for path in (SRC / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for name in names:
                    parts = name.split(".")
                    if parts[0] != "assay" or len(parts) < 2 or parts[1] in ("errors", package):
                        continue
                    assert parts[1] in allowed, f"{path.relative_to(SRC)} imports assay.{parts[1]}"


def _packages() -> list[str]:
    return sorted(p.parent.name for p in SRC.glob("*/__init__.py"))


def test_every_package_lists_exactly_what_it_re_exports():
    """``__all__`` names every name a package's ``__init__`` defines or takes from its own submodules,
    and nothing else but errors it passes on from ``assay.errors``; each name in it exists."""
    import importlib

    for package in _packages():
        module = importlib.import_module(f"assay.{package}")
        tree = ast.parse((SRC / package / "__init__.py").read_text())
        exported: set[str] = set()
        errors: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"assay.{package}."):
                exported |= {alias.asname or alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module == "assay.errors":
                errors |= {alias.asname or alias.name for alias in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                exported.add(node.name)
        exported = {name for name in exported if not name.startswith("_")}
        listed = set(getattr(module, "__all__", ()))
        if not listed and not exported:
            continue
        assert exported <= listed <= exported | errors, (
            f"assay.{package}.__all__: missing {sorted(exported - listed)}, not exported {sorted(listed - exported - errors)}")
        assert all(hasattr(module, name) for name in listed), f"assay.{package}.__all__ names a missing member"


def test_no_package_imports_another_packages_private_names():
    """Across packages only public modules and names are imported (``_name`` is its package's own)."""
    for path in SRC.rglob("*.py"):
        package = path.relative_to(SRC).parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("assay.")):
                continue
            parts = node.module.split(".")
            if parts[1] == package:
                continue
            private = [p for p in parts[2:] if p.startswith("_")] + [a.name for a in node.names if a.name.startswith("_")]
            assert not private, f"{path.relative_to(SRC)} imports {node.module}: {', '.join(private)} is private"
