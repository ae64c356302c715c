"""What ``assay run`` runs: a campaign file, or a campaign built from a protocol manifest (``--protocol``)."""

from __future__ import annotations

import json
from pathlib import Path

from assay.cli.common import campaign_errors, campaign_file, policy_option
from assay.errors import AssayError, ManifestError, SpecError
from assay.metrics.stamp import STORE_MANIFESTS
from assay.run import CampaignPlan, prepare_campaign
from assay.spec import CampaignSpec
from assay.spec.protocol import Manifest, read_manifest, shipped_protocols
from assay.store import write_blob


def resolve_protocol(value: str) -> tuple[Manifest, tuple[str, ...] | None]:
    """A ``--protocol`` value: ``NAME[@VERSION]`` of a shipped manifest or a manifest ``FILE.json``, each with an
    optional ``:SUITE,SUITE``; the manifest and the suites (None: all)."""
    head, _, suites = value.partition(":") if not Path(value).is_file() else (value, "", "")
    manifest = read_manifest(head) if head.endswith(".json") or Path(head).is_file() else shipped_protocols().get(head)
    chosen = tuple(s.strip() for s in suites.split(",") if s.strip()) or None
    manifest.chosen(chosen)  # an unknown suite: one line naming the valid ones
    return manifest, chosen


def campaign_plan(campaign: Path | None, protocol: str | None, policy: str | None, upstream: Path | None,
                  simulators: list[str] | None = None) -> tuple[CampaignSpec, CampaignPlan, Manifest | None]:
    """The campaign ``assay run`` runs, planned: from its file, or built from ``--protocol`` and ``--policy`` (and
    the manifest, kept in the store); ``--simulator BACKEND=URL`` options (``simulators``) over its served
    simulators either way."""
    given = simulators or []
    if protocol is None:
        if campaign is None or policy is not None or upstream is not None:
            raise AssayError("give a campaign file, or --protocol NAME with --policy P (`assay protocol list`)")
        spec = with_simulators(campaign_file(campaign), given)
        with campaign_errors(campaign):
            return spec, prepare_campaign(spec), None
    if campaign is not None:
        raise AssayError(f"give a campaign file or --protocol, not both ({campaign} and --protocol {protocol})")
    if policy is None:
        raise AssayError(f"--protocol {protocol} needs --policy (the policy to run under it)")
    from assay.protocols import build_campaign
    from assay.protocols.upstream import with_upstream_variants

    manifest, suites = resolve_protocol(protocol)
    expanded = manifest
    if manifest.variant_set is not None:
        expanded = with_upstream_variants(manifest, upstream)
    elif upstream is not None:
        raise AssayError(f"protocol {manifest.ref} lists its own variants; --upstream is for a released variant set")
    planned = build_campaign(expanded, policy_option(policy).spec, suites, reference=manifest,
                             simulators=served_simulators(given) or None)
    return planned.spec, planned, manifest


def served_simulators(given: list[str], served: dict[str, str] | None = None) -> dict[str, str]:
    """``served`` (a campaign's ``simulators:``) with ``--simulator BACKEND=URL`` options over it."""
    served = dict(served or {})
    for item in given:
        backend, _, url = item.partition("=")
        if not url.startswith(("ws://", "wss://")):
            raise SpecError(f"--simulator {item!r}: write BACKEND=ws://HOST:PORT (where `assay serve-sim BACKEND "
                            "--port PORT` listens)")
        served[backend.strip()] = url.strip()
    return served


def with_simulators(spec: CampaignSpec, given: list[str]) -> CampaignSpec:
    """``spec`` with ``--simulator BACKEND=URL`` options over its ``simulators:``."""
    if not given:
        return spec
    return spec.model_copy(update={"simulators": served_simulators(given, spec.simulators)})


def keep_manifest(root: Path, manifest: Manifest | None) -> None:
    """Keep the manifest a campaign ran in ``STORE/protocols/NAME.vVERSION.json`` (what its stamp reads, whatever
    manifests a later Assay ships); a store that holds another manifest of that ``name@version`` refuses it."""
    if manifest is None:
        return
    relpath = f"{STORE_MANIFESTS}/{manifest.name}.v{manifest.version}.json"
    path = Path(root) / relpath
    if path.is_file():
        kept = read_manifest(path)
        if kept.content_hash() != manifest.content_hash():
            raise ManifestError(f"the store keeps another manifest {manifest.ref} ({kept.content_hash()}, this one "
                                f"{manifest.content_hash()}); a changed protocol is a new version")
        return
    document = manifest.model_copy(update={"hash": manifest.content_hash()}).model_dump(mode="json")
    write_blob(root, relpath, (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode(), "protocol manifest")
