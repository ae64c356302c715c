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
    "run_campaign", "success_interval",
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
