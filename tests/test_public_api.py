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

# package -> the assay packages it may import (errors, the stability markers (annotations), lazy and the to_dict
# mixin (serialize) are everyone's)
ALLOWED = {
    "spec": set(),
    "sim": {"spec"},
    "policies": {"spec"},
    "store": {"spec"},
    "testing": {"spec", "sim", "policies"},
    "served": {"spec", "sim", "policies"},
    "run": {"spec", "sim", "policies", "store", "served"},
    "metrics": {"spec", "store"},
    "failures": {"spec", "sim", "policies", "store", "metrics"},
    "twin": {"spec", "sim", "policies", "store", "metrics", "failures", "run", "served"},
    "learning": {"spec", "sim", "policies", "store", "run", "metrics", "failures", "served"},
    "protocols": {"spec", "sim", "policies", "store", "run", "metrics", "served"},
    "report": {"spec", "store", "metrics", "failures"},
    "server": {"spec", "sim", "policies", "store", "run", "metrics", "failures", "twin", "learning", "protocols", "report",
               "server", "served"},
    "cli": {"spec", "sim", "policies", "store", "run", "metrics", "failures", "twin", "learning", "protocols", "report",
            "server", "cli", "served"},
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
                    if parts[0] != "assay" or len(parts) < 2 or parts[1] in ("errors", "annotations", "lazy", "serialize",
                                                                              package):
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
        lazy = [n for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
                for n in node.body]  # a package that loads its names on first use (PEP 562) imports them here
        for node in [*tree.body, *lazy]:
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


def test_what_plugin_authors_build_on_carries_a_stability_marker():
    from assay import policies, sim, spec, store, testing
    from assay.annotations import DEVELOPER, PUBLIC, STABILITY, public_api, stability
    from assay.run import Executor, InlineExecutor, LocalExecutor, job_campaign, prepare_campaign, run_campaign

    public = [sim.SimEnv, sim.Transition, sim.SimEnvWrapper, sim.SupportsFramesOnDemand, sim.SupportsSimulator,
              policies.Policy, policies.PolicyContext, policies.PolicyClass, policies.SupportsContract,
              policies.SupportsEpisodeInfo, policies.SupportsFrameNeeds, policies.SupportsMetadata,
              policies.SupportsParams, policies.SupportsResolveVersion, policies.SupportsRowAnswers,
              policies.SupportsStepTrace,
              policies.SupportsTaskCheck, policies.SupportsVersion, policies.PolicyContract,
              spec.TaskSpec, spec.CameraSpec, spec.ActionSpec, spec.Array, spec.BoundedArray, spec.PolicySpec,
              spec.Variant, spec.Perturbation, store.EpisodeRecord, store.Outcome, testing.check_sim_env,
              testing.check_policy, InlineExecutor, LocalExecutor, prepare_campaign, run_campaign, store.Store,
              spec.load_campaign, spec.campaign_from_data, spec.CampaignSpec, sim.Backend, job_campaign]
    developer = [testing.FunctionEnv, testing.ConstantPolicy, testing.ConstantChunkPolicy, testing.ImageChunkPolicy,
                 testing.fake_task, testing.running, Executor, policies.reads_frames]
    assert [o.__qualname__ for o in public if stability(o) != PUBLIC] == []
    assert [o.__qualname__ for o in developer if stability(o) != DEVELOPER] == []
    assert "Public API: stable across minor releases" in (sim.SimEnv.__doc__ or "")
    assert all(level in (PUBLIC, DEVELOPER) for level in STABILITY.values())
    assert stability(assay.make_env) is None  # unmarked: internal (the curated assay.__all__ is its own promise)
    # a marker sets no attribute: a runtime-checkable protocol keeps exactly its members
    assert isinstance(testing.FunctionEnv(testing.fake_task()), sim.SimEnv)
    import pytest

    with pytest.raises(ValueError, match="marked both"):
        from assay.annotations import developer_api

        developer_api(public_api(lambda: None))


# Imports of another package's internal modules (``from assay.store.catalog import X`` in ``assay.cli``) rather than
# its public ``__init__``: each is a coupling the owner cannot see. A ratchet: the count may only shrink; lower it
# here when a change removes some (a change that adds one goes through the package's ``__init__`` instead).
INTERNAL_IMPORTS_CEILING = 257


def _internal_imports() -> list[str]:
    found = []
    for path in SRC.rglob("*.py"):
        package = path.relative_to(SRC).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "assay" and len(parts) >= 3 and parts[1] not in (package, "errors", "annotations",
                                                                                   "lazy", "serialize"):
                    found.append(f"{path.relative_to(SRC)}: {name}")
    return found


def test_imports_of_other_packages_internals_only_shrink():
    found = _internal_imports()
    assert len(found) <= INTERNAL_IMPORTS_CEILING, (
        f"{len(found)} imports of another package's internal modules (ceiling {INTERNAL_IMPORTS_CEILING}): import "
        "through the package's __init__ instead")
