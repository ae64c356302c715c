"""A campaign built from a protocol manifest: ``assay run --protocol NAME --policy P``.

Each knob of the manifest becomes what Assay runs (``assay.spec.protocol``):

* the suites' tasks, each with its suite's horizon, the settle steps and the success rule (a task registry
  of exactly these tasks, so the campaign's resolved document records them and their hashes);
* ``trials_per_task`` episodes from ``seed`` (with fixed initial states: episode i starts from state seed + i);
* the cameras at the rendered size (``fast: true`` for the ``fast`` renderer); when the harness resizes
  with ``resize_with_pad``, a remote policy's ``image_size`` param is set to the policy's input size (Assay's
  remote client then does openpi's resize); a local policy receives the rendered frames, and the stamp says so;
* ``replan_steps`` as the campaign's ``replan_every``, ``prompt`` as its ``prompt``;
* the variants (a request each), and for variants that belong to some tasks only, the plan cut to those
  (task, variant) pairs;
* the campaign's ``protocol`` field: the manifest's name, version and hash, and the suites chosen.

A manifest can also be changed one knob at a time (:func:`with_knob`), which ``assay protocol diff`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from assay.errors import ManifestError, SpecError
from assay.run import CampaignPlan, prepare_campaign
from assay.sim import TaskRegistry, default_registry, resolve_variant
from assay.spec import CameraSpec, CampaignSpec, PolicySpec, SuccessMode, TaskSpec
from assay.spec.protocol import Manifest, ProtocolRef, VariantEntry

NOISE_FACTORS = {"upstream": "libero_plus.corruption", "assay": "libero_plus.noise"}


def protocol_tasks(manifest: Manifest, suites: tuple[str, ...] | None = None) -> list[TaskSpec]:
    """The manifest's tasks as it runs them: each suite's horizon, its settle steps and success rule; a one-line
    ManifestError for a task the registry lacks, or one whose backend or control rate is not the manifest's."""
    registry = default_registry()
    knobs = manifest.knobs
    tasks = []
    for suite in manifest.chosen(suites):
        for ref in suite.tasks:
            try:
                task = registry.get(ref)
            except SpecError as exc:
                raise ManifestError(f"protocol {manifest.ref}: {exc}") from None
            if task.backend != manifest.backend:
                raise ManifestError(f"protocol {manifest.ref} is a {manifest.backend} protocol; task {ref} is "
                                    f"{task.backend}'s")
            if abs(task.control_hz - knobs.control_hz) > 1e-9:
                raise ManifestError(f"protocol {manifest.ref} controls at {knobs.control_hz:g} Hz; {ref} runs at "
                                    f"{task.control_hz:g} Hz and Assay cannot change it")
            tasks.append(task.model_copy(update={"horizon": suite.horizon, "settle_steps": knobs.settle_steps,
                                                 "success": SuccessMode(knobs.success)}))
    return tasks


def protocol_cameras(manifest: Manifest) -> tuple[CameraSpec, ...]:
    """The cameras every task renders (none when the manifest has no image)."""
    image = manifest.knobs.image
    if image is None:
        return ()
    fast = manifest.knobs.renderer == "fast"
    return tuple(CameraSpec(name=name, width=image.render[1], height=image.render[0], fast=fast)
                 for name in image.cameras)


def protocol_policy(manifest: Manifest, policy: PolicySpec) -> PolicySpec:
    """``policy`` as the harness drives it: a remote policy resizes to the policy input size when the harness
    does (``resize_with_pad``); a size it was given already must be that one."""
    image = manifest.knobs.image
    if image is None or image.resize != "resize_with_pad" or policy.remote is None:
        return policy
    wanted = list(image.policy_input)
    given = policy.params.get("image_size")
    if given is not None and list(given) != wanted:
        raise ManifestError(f"protocol {manifest.ref} sends {image.received} images; policy {policy.name!r} asks "
                            f"for image_size {list(given)} (leave it out)")
    return policy.model_copy(update={"params": {**policy.params, "image_size": wanted}})


def variant_requests(manifest: Manifest) -> list[dict[str, Any]]:
    """The distinct factor requests of the manifest's variants, in order."""
    requests: list[dict[str, Any]] = []
    for entry in manifest.variants:
        if entry.factors not in requests:
            requests.append(dict(entry.factors))
    return requests


def campaign_spec(manifest: Manifest, policy: PolicySpec | Sequence[PolicySpec], suites: tuple[str, ...] | None = None,
                  name: str | None = None, reference: Manifest | None = None,
                  video_fps: float | None = None, simulators: dict[str, str] | None = None) -> CampaignSpec:
    """The campaign that runs ``policy`` under ``manifest`` (these suites, or all); its ``protocol`` names
    ``reference`` (default: ``manifest``; the pinned manifest when ``manifest`` is it with an upstream variant
    list read in). ``video_fps`` sets how often frames are recorded (not a knob: it changes no outcome; unset, each
    task's own rate); ``simulators`` names served simulators by backend (an execution setting, and no knob
    either: the episodes are the same)."""
    knobs = manifest.knobs
    chosen = tuple(s.name for s in manifest.chosen(suites)) if suites else None
    named = reference or manifest
    ref = ProtocolRef(name=named.name, version=named.version, hash=named.content_hash(), suites=chosen)
    policies = tuple(protocol_policy(manifest, p) for p in ([policy] if isinstance(policy, PolicySpec) else policy))
    default = f"{manifest.name}-v{manifest.version}" + (f"-{'-'.join(chosen)}" if chosen else "") + \
        f"-{'-'.join(p.name for p in policies)}"
    return CampaignSpec(
        name=name or default[:100], seed=knobs.seed, episodes=knobs.trials_per_task, video_fps=video_fps,
        tasks=tuple(manifest.task_ids(suites)), policies=policies, variants=tuple(variant_requests(manifest)),
        cameras=protocol_cameras(manifest), replan_every=knobs.replan_steps, prompt=knobs.prompt, protocol=ref,
        simulators=simulators, description=f"{manifest.title or manifest.ref} ({ref.hash})")


def build_campaign(manifest: Manifest, policy: PolicySpec | Sequence[PolicySpec], suites: tuple[str, ...] | None = None,
                   name: str | None = None, reference: Manifest | None = None,
                   video_fps: float | None = None, simulators: dict[str, str] | None = None) -> CampaignPlan:
    """Resolve and plan the campaign of :func:`campaign_spec` (spec errors surface here, before any episode); the
    jobs are cut to the manifest's (task, variant) pairs."""
    if not manifest.variants:
        where = manifest.variant_set.path if manifest.variant_set is not None else "no file"
        raise ManifestError(f"protocol {manifest.ref} lists its variants in upstream's {where}; give an upstream "
                            "checkout with --upstream DIR")
    spec = campaign_spec(manifest, policy, suites, name, reference, video_fps, simulators)
    tasks = protocol_tasks(manifest, suites)
    planned = prepare_campaign(spec, TaskRegistry(tasks))
    wanted = _pairs(manifest, tasks, suites)
    if wanted is None:
        return planned
    jobs = tuple(job for job in planned.jobs if (job.task.id, job.variant.key) in wanted)
    return CampaignPlan(planned.spec, planned.tasks, planned.policies, planned.variants, jobs)


def _pairs(manifest: Manifest, tasks: Sequence[TaskSpec], suites: tuple[str, ...] | None,
           ) -> set[tuple[str, str]] | None:
    """The (task id, variant key) pairs to run when some variant belongs to some tasks only (None: every pair)."""
    if all(entry.tasks is None for entry in manifest.variants):
        return None
    by_id = {t.id: t for t in tasks}
    return {(task, resolve_variant(entry.factors, by_id[task]).key) for task, entry in manifest.cells(suites)}


KNOB_FIELDS = {"horizon": "suites", "replan": "replan_steps", "image": "image", "settle": "settle_steps",
               "prompt": "prompt", "noise": "noise", "renderer": "renderer"}


def knob_value(manifest: Manifest, knob: str) -> Any:
    """A knob's value in ``manifest`` (horizon: ``{suite: horizon}``; image: the image knob as data)."""
    if knob == "horizon":
        return {s.name: s.horizon for s in manifest.suites}
    value = getattr(manifest.knobs, KNOB_FIELDS[knob])
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def with_knob(manifest: Manifest, knob: str, source: Manifest) -> Manifest:
    """``manifest`` with one knob set to ``source``'s value (the horizon suite by suite; the noise knob rewrites the
    sensor-noise variants to ``source``'s implementation); its hash is the new content's."""
    if knob not in KNOB_FIELDS:
        raise ManifestError(f"unknown knob {knob!r}; valid: {', '.join(KNOB_FIELDS)}")
    if knob == "horizon":
        horizons = {s.name: s.horizon for s in source.suites}
        suites = tuple(s.model_copy(update={"horizon": horizons.get(s.name, s.horizon)}) for s in manifest.suites)
        return manifest.model_copy(update={"suites": suites, "hash": None})
    field = KNOB_FIELDS[knob]
    knobs = manifest.knobs.model_copy(update={field: getattr(source.knobs, field)})
    update: dict[str, Any] = {"knobs": knobs, "hash": None}
    if knob == "noise" and source.knobs.noise is not None:
        update["variants"] = tuple(realise_noise(entry, source.knobs.noise) for entry in manifest.variants)
    return manifest.model_copy(update=update)


def realise_noise(entry: VariantEntry, implementation: str) -> VariantEntry:
    """A sensor-noise variant (category ``noise``, with its level and upstream index) under ``implementation``:
    ``upstream`` sets ``libero_plus.corruption`` to the upstream index, ``assay`` sets ``libero_plus.noise`` to
    the level; any other variant is returned as it is."""
    if entry.category != "noise" or entry.level is None:
        return entry
    factors = {k: v for k, v in entry.factors.items() if k not in NOISE_FACTORS.values()}
    if implementation == "upstream":
        index = int(entry.upstream.rsplit("_", 1)[-1]) if entry.upstream and "_noise_" in entry.upstream else None
        if index is None:
            raise ManifestError(f"variant {entry.label!r} names no upstream noise index (…_noise_N)")
        factors[NOISE_FACTORS["upstream"]] = index
    else:
        factors[NOISE_FACTORS["assay"]] = entry.level
    return entry.model_copy(update={"factors": factors})
