"""Protocol conformance and a reproduction registry: does a campaign reproduce a published number?

The same checkpoint scores differently in two harnesses because the protocols differ (the horizon, the
settle steps, how many actions of a chunk run before replanning, the control frequency) and because a
small n cannot tell 96% from 98%. ``metrics/data/reproduction.json`` (schema_version 2) holds published
LIBERO protocols (``protocols``: per suite, the fields below with the file and commit each was read
from, and ``manifest``: the protocol manifest and suite it is, ``assay protocol show``) and published success
rates of named checkpoints (``results``: rate as published, its n and where n comes from, ``source`` primary
or secondary with its ``citation``, ``unverified``: what could not be checked, and ``reproduced``: null unless
a run here filled it, ``metrics.reproduced``). A schema_version 1 file (``verified`` for ``source``, ``source``
for ``citation``) is read as version 2.

* **Protocol check**, field by field, from the campaign's resolved spec in the catalog: ``horizon``
  (policy steps after settling), ``settle_steps``, ``init_states`` (``fixed from state S``: episode i
  starts from the benchmark's state S + i, S the campaign seed; or ``sampled from the seed``),
  ``episodes_per_task``, ``camera_size`` (``WxH`` of every image the policy receives: the cameras' size, or
  a remote policy's ``image_size`` when it resizes them, as openpi's client does), ``replan_steps`` (the campaign's
  ``replan_every``; ``whole chunk`` when unset), ``control_hz`` and ``tasks`` (how many of the suite's
  tasks ran). A field that differs is named with both values.
* **Variant**: published numbers are unperturbed, so the campaign's episodes are scored in the nominal variant
  when it plans one (``metrics.scope``, the default of every scoring command); a campaign of perturbed
  variants only is scored pooled over them and its ``variant`` field differs (``protocol differs``).
* **Completeness** (``metrics.completeness``): the policy's cells on the suite's tasks, recorded against
  planned. A campaign with a cell that has no episode yet is refused unless ``allow_partial`` (its missing
  cells are not missing at random: cells run in plan order, successes finish first); an incomplete one is
  marked in the result and its notes.
* **Rate test**: the policy's successes over scored episodes on the suite's tasks (in that variant scope) against
  the published rate. With the published n, Fisher's exact test of the two proportions (the published
  successes are rate × n rounded); without it, the exact binomial test of the measured count against the
  published rate. Beside it, the measured rate's mid-p interval and whether the published rate is in it.
* **Verdict**: ``protocol differs`` when any field differs (the numbers are not comparable; the test is
  still shown); otherwise ``reproduced`` when p ≥ α (default 0.05), ``not reproduced`` when p < α. A
  registry entry without a protocol is tested on the rate alone, and says so.
* **Impossible rates** (``lint_rate``): a rate reported with d decimals from n trials must be k/n for some
  whole k, rounded. 43.9% of 500 is not (k would be 219.5; 219/500 = 43.8%, 220/500 = 44.0%). Every
  published rate in the registry passes this lint for its n (a test keeps it so).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

from scipy import stats

from assay.errors import AssayError
from assay.metrics.completeness import campaign_completeness
from assay.metrics.rates import success_interval
from assay.metrics.scope import NOMINAL, planned_variants, variant_scope
from assay.store import EpisodeRecord, Outcome

SCHEMA_VERSION = 2
SOURCES = ("primary", "secondary")
REPRODUCED_FIELDS = ("policy", "campaign", "protocol", "protocol_hash", "successes", "trials", "rate", "low", "high",
                     "bundle_sha256", "verdict")
FIELDS = ("horizon", "settle_steps", "init_states", "episodes_per_task", "camera_size", "replan_steps",
          "control_hz", "tasks")
VERDICTS = ("reproduced", "not reproduced", "protocol differs")


@dataclass(frozen=True)
class RateLint:
    """Whether a reported rate can be k/n for a whole k at the precision it was reported with."""

    reported: str
    n: int
    decimals: int
    possible: bool
    successes_needed: float  # rate × n
    nearest: tuple[str, ...]  # the possible rates either side, at the same precision
    fitting: tuple[int, ...] = ()  # the whole k whose k/n rounds to the reported rate

    @property
    def message(self) -> str:
        """One line: why it is possible or not."""
        if self.possible:
            fits = " or ".join(map(str, self.fitting))
            return f"{self.reported} of {self.n} is possible: {fits} of {self.n} trials succeeded"
        return (f"{self.reported} of {self.n} is impossible: it needs {self.successes_needed:g} successes; "
                f"the nearest possible rates are {' and '.join(self.nearest)}")

    def to_dict(self) -> dict[str, object]:

        """A JSON-ready dict of every field."""
        return {**asdict(self), "message": self.message}


def parse_rate(text: str) -> tuple[Decimal, int, bool]:
    """(rate as a fraction, decimals as printed, whether in percent) of ``'43.9%'``, ``'43.9'`` or ``'0.439'``."""
    raw = str(text).strip()
    percent = raw.endswith("%")
    number = raw.rstrip("%").strip()
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise AssayError(f"rate {text!r} is not a number; give e.g. 43.9% or 0.439") from None
    if not value.is_finite() or value < 0:
        raise AssayError(f"rate {text!r} is not valid; a rate is between 0 and 100% (or 0 and 1)")
    exponent = value.as_tuple().exponent
    decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    if not percent and value > 1:
        percent = True  # 43.9 without '%' is a percentage
    fraction = value / 100 if percent else value
    if fraction > 1:
        raise AssayError(f"rate {text!r} is above 100%")
    return fraction, decimals, percent


def _rounds_to(value: Fraction, printed: int) -> bool:
    """Whether ``value`` (in units of the last printed digit) prints as ``printed``, rounding half up or half even.

    Half down is not a rounding anyone publishes with: 13.5 units prints as 14 both ways, never as 13.
    """
    half_up = math.floor(value + Fraction(1, 2))
    return printed in (half_up, round(value))  # round() of a Fraction rounds half to even


def lint_rate(reported: str, n: int) -> RateLint:
    """Whether ``reported`` (as printed) can come from ``n`` trials (module doc); rounding half up or half even.

    ``nearest``: the largest possible rate below and the smallest above the reported one, each printed at the
    reported precision (half up), in numeric order.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise AssayError(f"the number of trials must be a whole number of at least 1, got {n!r}")
    fraction, decimals, percent = parse_rate(reported)
    scale = 100 if percent else 1
    unit_count = scale * 10 ** decimals  # a rate of 1 in units of the last printed digit
    printed = int(fraction * unit_count)  # exact: the reported rate has ``decimals`` digits after the point
    needed = fraction * n
    candidates = range(max(0, math.floor(needed) - 2), min(n, math.ceil(needed) + 2) + 1)
    fitting = tuple(k for k in candidates if _rounds_to(Fraction(k * unit_count, n), printed))
    shown = sorted({math.floor(Fraction(k * unit_count, n) + Fraction(1, 2)) for k in candidates})
    below = [units for units in shown if units < printed]
    above = [units for units in shown if units > printed]
    unit = "%" if percent else ""

    def text(units: int) -> str:
        return f"{Decimal(units).scaleb(-decimals):.{decimals}f}{unit}"

    nearest = tuple(([text(below[-1])] if below else []) + ([text(above[0])] if above else []))
    return RateLint(reported.strip(), n, decimals, bool(fitting), float(needed), nearest, fitting)


@dataclass(frozen=True)
class Registry:
    """The published protocols and results (see the module doc), validated on load."""

    protocols: dict[str, dict[str, Any]]
    results: dict[str, dict[str, Any]]
    source: str

    def entry(self, name: str) -> dict[str, Any]:
        """One published result by name (a one-line error listing the names otherwise)."""
        if name not in self.results:
            raise AssayError(f"no registry entry {name!r} in {self.source}; valid: {', '.join(sorted(self.results))}")
        return self.results[name]


def _upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """A schema_version 1 registry as version 2: ``verified`` is ``source``, ``source`` is ``citation``."""
    if doc.get("schema_version") != 1:
        return doc
    protocols = {n: {**{k: v for k, v in p.items() if k != "verified"}, "source": p.get("verified")}
                 for n, p in (doc.get("protocols") or {}).items()}
    results = {n: {**{k: v for k, v in r.items() if k not in ("verified", "source")}, "citation": r.get("source"),
                   "source": r.get("verified"), "reproduced": None} for n, r in (doc.get("results") or {}).items()}
    return {**doc, "schema_version": SCHEMA_VERSION, "protocols": protocols, "results": results}


def check_reproduced(record: Any, where: str) -> None:
    """A ``reproduced`` value: null, or a run's record with every field (the bundle's SHA-256 among them)."""
    if record is None:
        return
    missing = [f for f in REPRODUCED_FIELDS if not isinstance(record, dict) or f not in record]
    digest = str(record.get("bundle_sha256", "")) if isinstance(record, dict) else ""
    if missing or len(digest) != 64:
        raise AssayError(f"{where}: 'reproduced' is filled only by a run here (assay reproduce --record BUNDLE): it "
                         f"needs {', '.join(REPRODUCED_FIELDS)} with the bundle's SHA-256"
                         + (f" (missing {', '.join(missing)})" if missing else ""))


def _check_registry(doc: Any, source: str) -> Registry:
    if isinstance(doc, dict):
        doc = _upgraded(doc)
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise AssayError(f"{source}: not a reproduction registry of schema_version {SCHEMA_VERSION} (or 1)")
    protocols, results = doc.get("protocols"), doc.get("results")
    if not isinstance(protocols, dict) or not isinstance(results, dict):
        raise AssayError(f"{source}: a registry needs 'protocols' and 'results' objects")
    for name, protocol in protocols.items():
        missing = [f for f in FIELDS if f != "tasks" and f not in protocol.get("fields", {})]
        if missing or not isinstance(protocol.get("tasks"), int) or not protocol.get("task_prefix"):
            wanted = ", ".join(f for f in FIELDS if f != "tasks")
            raise AssayError(f"{source}: protocol {name!r} needs task_prefix, tasks and fields {wanted} "
                             f"(missing {', '.join(missing) or 'task_prefix or tasks'})")
    for name, result in results.items():
        if result.get("protocol") is not None and result["protocol"] not in protocols:
            raise AssayError(f"{source}: result {name!r} names protocol {result['protocol']!r}, which it lacks")
        parse_rate(result.get("rate", ""))
        if result.get("source") not in SOURCES or not result.get("citation"):
            raise AssayError(f"{source}: result {name!r} needs 'source' (primary or secondary) and its 'citation'")
        check_reproduced(result.get("reproduced"), f"{source}: result {name!r}")
        n = result.get("n")
        if n is not None and not lint_rate(result["rate"], n).possible:
            raise AssayError(f"{source}: result {name!r}: {lint_rate(result['rate'], n).message}")
    return Registry(protocols, results, source)


def load_registry(path: str | Path | None = None) -> Registry:
    """The shipped registry (``metrics/data/reproduction.json``), or another file of the same schema."""
    if path is None:
        text = resources.files("assay.metrics").joinpath("data/reproduction.json").read_text(encoding="utf-8")
        source = "assay's registry (metrics/data/reproduction.json)"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise AssayError(f"cannot read registry {path}: {exc.strerror or exc}") from None
        source = str(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssayError(f"{source}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return _check_registry(doc, source)


@dataclass(frozen=True)
class FieldCheck:
    """One protocol field: the published value, the campaign's, and whether they agree."""

    name: str
    published: object
    campaign: object
    matches: bool
    source: str = ""


def _uniform(values: list[object]) -> object:
    distinct = sorted({json.dumps(v) for v in values})
    return json.loads(distinct[0]) if len(distinct) == 1 else "mixed: " + ", ".join(distinct)


def _sent_size(resolved: dict[str, Any], policy: str | None) -> str | None:
    """``WxH`` a remote policy resizes every image to before sending (its ``image_size``), or None."""
    for entry in resolved.get("policies", []):
        if entry.get("name") == policy:
            size = (entry.get("spec", {}).get("params") or {}).get("image_size")
            return f"{size[1]}x{size[0]}" if size else None
    return None


def campaign_protocol(resolved: dict[str, Any], task_prefix: str,
                      policy: str | None = None) -> tuple[dict[str, object], list[str]]:
    """The protocol fields of a campaign's resolved spec over its tasks under ``task_prefix`` (as ``policy``
    receives them), and those task ids."""
    tasks = [t for t in resolved.get("tasks", []) if str(t["spec"].get("name", "")).startswith(task_prefix)]
    if not tasks:
        ids = [t["id"] for t in resolved.get("tasks", [])]
        ran = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "") if ids else "none"
        raise AssayError(f"the campaign runs no task of this protocol's suite ({task_prefix}*); it runs {ran}")
    campaign = resolved.get("campaign", {})
    specs = [t["spec"] for t in tasks]
    seed = int(campaign.get("seed", 0))
    sent = _sent_size(resolved, policy)
    cameras = [sorted(sent or f"{c['width']}x{c['height']}" for c in s.get("cameras", [])) for s in specs]
    replan = campaign.get("replan_every")
    fields: dict[str, object] = {
        "horizon": _uniform([s["horizon"] for s in specs]),
        "settle_steps": _uniform([s.get("settle_steps", 0) for s in specs]),
        "init_states": _uniform([f"fixed from state {seed}" if s.get("initial_states", 0) else "sampled from the seed"
                                 for s in specs]),
        "episodes_per_task": int(campaign.get("episodes", 0)),
        "camera_size": _uniform([", ".join(sorted(set(c))) if c else "no camera" for c in cameras]),
        "replan_steps": replan if replan is not None else "whole chunk",
        "control_hz": _uniform([s["control_hz"] for s in specs]),
        "tasks": len(tasks),
    }
    return fields, [t["id"] for t in tasks]


def _same(published: object, campaign: object) -> bool:
    if isinstance(published, (int, float)) and isinstance(campaign, (int, float)):
        return math.isclose(float(published), float(campaign))
    return published == campaign


def check_protocol(protocol: dict[str, Any], resolved: dict[str, Any],
                   policy: str | None = None) -> tuple[list[FieldCheck], list[str]]:
    """Field-by-field comparison of a published protocol with a campaign as ``policy`` ran in it (and the
    campaign's suite task ids)."""
    fields, task_ids = campaign_protocol(resolved, protocol["task_prefix"], policy)
    published = {**protocol["fields"], "tasks": protocol["tasks"]}
    sources = protocol.get("sources", {})
    checks = [FieldCheck(name, published[name], fields[name], _same(published[name], fields[name]),
                         str(sources.get(name, "")))
              for name in FIELDS]
    return checks, task_ids


@dataclass(frozen=True)
class Reproduction:
    """A campaign against one registry entry: the protocol fields, the rate test and the verdict."""

    entry: str
    checkpoint: str
    policy: str
    protocol: str | None
    fields: tuple[FieldCheck, ...]
    successes: int
    trials: int
    errors: int
    measured_low: float
    measured_high: float
    published_rate: float
    published_text: str
    published_n: int | None
    test: str
    p_value: float
    alpha: float
    verdict: str
    reasons: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    scope: dict[str, object] = field(default_factory=dict)  # VariantScope.to_dict() of the episodes scored
    completeness: dict[str, object] = field(default_factory=dict)  # Completeness.to_dict() of the policy's cells

    @property
    def measured_rate(self) -> float:
        """Successes over scored episodes on the suite's tasks."""
        return self.successes / self.trials

    @property
    def published_in_interval(self) -> bool:
        """Whether the published rate lies in the measured rate's mid-p interval."""
        return self.measured_low <= self.published_rate <= self.measured_high

    def to_dict(self) -> dict[str, object]:

        """A JSON-ready dict of every field."""
        out = asdict(self)
        out.update(measured_rate=self.measured_rate, published_in_interval=self.published_in_interval,
                   fields=[asdict(f) for f in self.fields], reasons=list(self.reasons), notes=list(self.notes))
        return out


def rate_test(successes: int, trials: int, rate: float, n: int | None) -> tuple[str, float]:
    """(test name, two-sided p): Fisher's exact test with the published n, else the exact binomial test."""
    if n is None:
        return "exact binomial test of the measured count against the published rate (its n unknown)", \
            float(stats.binomtest(successes, trials, rate).pvalue)
    published = round(rate * n)
    table = [[successes, trials - successes], [published, n - published]]
    return f"Fisher's exact test, measured {successes}/{trials} vs published {published}/{n}", \
        float(stats.fisher_exact(table).pvalue)


def reproduce(registry: Registry, name: str, resolved: dict[str, Any], records: list[EpisodeRecord],
              policy: str | None = None, alpha: float = 0.05, allow_partial: bool = False,
              adaptive: dict[str, Any] | None = None) -> Reproduction:
    """Check a campaign (its resolved spec, episodes and adaptive state) against registry entry ``name`` (module
    doc); AssayError when a cell of the policy on the suite's tasks has no episode, unless ``allow_partial``."""
    if not 0.0 < alpha < 1.0:
        raise AssayError(f"alpha {alpha} is not valid; give a level strictly between 0 and 1 (e.g. 0.05)")
    entry = registry.entry(name)
    policies = sorted({r.policy_name for r in records})
    if policy is None:
        if len(policies) != 1:
            raise AssayError(f"the campaign has policies {', '.join(policies) or 'none'}; name the one that ran "
                             f"{entry['checkpoint']!r} with --policy")
        policy = policies[0]
    elif policy not in policies:
        raise AssayError(f"no policy {policy!r} in the campaign; valid: {', '.join(policies)}")
    protocol_name = entry.get("protocol")
    notes = [f"not verified: {item}" for item in entry.get("unverified", [])]
    if protocol_name is None:
        prefix = str(entry.get("task_prefix", ""))
        fields: list[FieldCheck] = []
        task_ids = [t["id"] for t in resolved.get("tasks", []) if str(t["spec"].get("name", "")).startswith(prefix)]
        notes.append("the entry has no published protocol: only the rate is tested")
    else:
        fields, task_ids = check_protocol(registry.protocols[protocol_name], resolved, policy)
    mine = [r for r in records if r.policy_name == policy and r.task_id in task_ids]
    scope = variant_scope(planned_variants(resolved, mine))
    if scope.variants == (NOMINAL,):
        if any(r.variant_name != NOMINAL for r in mine):
            notes.append("nominal variant only (the published numbers are unperturbed)")
    else:  # perturbed variants only: not the published protocol
        fields.append(FieldCheck("variant", NOMINAL, scope.label, False, "published results are unperturbed"))
    mine = scope.keep(mine)
    covered = campaign_completeness(resolved, records, adaptive).select([policy], task_ids, scope.variants)
    covered.refuse_missing(f"reproducing {name} with policy {policy!r}", allow_partial)
    if not covered.complete:
        notes.append(f"the campaign is {covered.describe()}: the measured rate covers only what is recorded")
    scored = [r for r in mine if r.outcome is not Outcome.ERROR]
    if not scored:
        raise AssayError(f"policy {policy!r} has no scored episode on the suite's tasks in this campaign")
    successes = sum(r.outcome is Outcome.SUCCESS for r in scored)
    interval = success_interval(successes, len(scored))
    assert interval is not None
    rate = float(parse_rate(entry["rate"])[0])
    test, p_value = rate_test(successes, len(scored), rate, entry.get("n"))
    differs = [f for f in fields if not f.matches]
    reasons = [f"{f.name}: published {f.published}, campaign {f.campaign}" for f in differs]
    if differs:
        verdict = "protocol differs"
    else:
        verdict = "reproduced" if p_value >= alpha else "not reproduced"
        reasons.append(f"p = {p_value:.3g} {'≥' if p_value >= alpha else '<'} α = {alpha}")
    return Reproduction(name, str(entry["checkpoint"]), policy, protocol_name, tuple(fields), successes, len(scored),
                        len(mine) - len(scored), interval.low, interval.high, rate, str(entry["rate"]), entry.get("n"),
                        test, p_value, alpha, verdict, tuple(reasons), tuple(notes), scope.to_dict(),
                        covered.to_dict())
