"""YAML loading with positions: every user mistake is one line, ``file:line: field: what``.

The YAML is composed into nodes first so that each value keeps the line it came
from; pydantic validates the plain data; the first validation error is mapped back
to the closest line the user wrote.
"""

from __future__ import annotations

import difflib
import itertools
import math
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from assay.annotations import public_api
from assay.errors import SpecError
from assay.spec.campaign import CampaignSpec
from assay.spec.hashing import canonical_json
from assay.spec.policy import policy_from_shorthand

Path_ = tuple[str | int, ...]


# What a campaign file may be: bounds that keep a hostile file (deep nesting, alias bombs,
# self-referencing anchors) a one-line error instead of a RecursionError or a MemoryError.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000
_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


class _Budget:
    """Counts the values one document expands to (aliases count each time they are used)."""

    def __init__(self) -> None:
        self.values = 0
        self.open: set[int] = set()


def _construct(node: yaml.Node, path: Path_, lines: dict[Path_, int], budget: _Budget | None = None) -> Any:
    budget = budget if budget is not None else _Budget()
    line = node.start_mark.line + 1
    lines[path] = line
    budget.values += 1
    if budget.values > MAX_VALUES:
        raise SpecError(f"line {line}: the document expands to more than {MAX_VALUES:,} values (an alias bomb?)")
    if len(path) > MAX_DEPTH:
        raise SpecError(f"line {line}: {_dotted(path[:3])}: nesting deeper than {MAX_DEPTH} levels")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if node.tag not in _PLAIN_TAGS:
            raise SpecError(f"line {line}: {_dotted(path)}: YAML tag {node.tag!r} is not allowed in a campaign")
        if id(node) in budget.open:
            raise SpecError(f"line {line}: {_dotted(path)}: an alias refers to a value that contains it")
        budget.open.add(id(node))
        try:
            return _collection(node, path, lines, budget)
        finally:
            budget.open.discard(id(node))
    value = _scalar(node, path)
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"line {line}: {_dotted(path)}: {value} is not a finite number")
    return value


def _collection(node: yaml.Node, path: Path_, lines: dict[Path_, int], budget: _Budget) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, path + (i,), lines, budget) for i, item in enumerate(node.value)]
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise SpecError(f"line {key_node.start_mark.line + 1}: mapping keys must be plain words")
        key = _scalar(key_node, path)
        if not isinstance(key, str):
            raise SpecError(f"line {key_node.start_mark.line + 1}: mapping key {key!r} must be a word, not a "
                            f"{type(key).__name__}")
        if key in result:
            raise SpecError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice")
        result[key] = _construct(value_node, path + (key,), lines, budget)
    return result


def _scalar(node: yaml.Node, path: Path_ = ()) -> Any:
    """Type a scalar the way yaml.safe_load would (int, float, bool, null, str)."""
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"line {node.start_mark.line + 1}: {_dotted(path)}: cannot read value: {problem}") from None
    finally:
        loader.dispose()


def load_yaml(text: str, source: str = "<string>") -> tuple[Any, dict[Path_, int]]:
    """Parse YAML text into plain data plus a map from field path to line number."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"{mark.line + 1}" if mark is not None else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{source}:{line}: malformed YAML: {problem}") from None
    except RecursionError:
        raise SpecError(f"{source}:1: malformed YAML: nesting too deep (at most {MAX_DEPTH} levels)") from None
    if node is None:
        raise SpecError(f"{source}:1: the file is empty")
    lines: dict[Path_, int] = {}
    try:
        data = _construct(node, (), lines)
    except SpecError as exc:
        raise SpecError(f"{source}:{str(exc).removeprefix('line ')}") from None
    return data, lines


def _line_for(loc: Path_, lines: dict[Path_, int]) -> int:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _dotted(loc: Path_) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def validation_error(exc: ValidationError, source: str, lines: dict[Path_, int], prefix: Path_ = (),
                     model: type[BaseModel] | None = None) -> SpecError:
    """The first pydantic error as one ``file:line: field: message`` line; with ``model`` (the document's root
    model), an unknown field gets the closest valid names and the list of valid ones."""
    first = exc.errors()[0]
    loc = prefix + tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = _unknown_field(loc, model)
    elif first["type"] == "missing":
        message = "required field is missing"
    return SpecError(f"{source}:{_line_for(loc, lines)}: {_dotted(loc)}: {message}")


def _unknown_field(loc: Path_, model: type[BaseModel] | None) -> str:
    """``unknown field; did you mean 'horizon'? valid: adaptive, cameras, ...`` (``unknown field; valid: ...``
    when no name is close; the valid names are those of the mapping ``loc`` is in, when the root model is known)."""
    owner = _model_at(model, loc[:-1]) if model is not None and loc else None
    if owner is None or not isinstance(loc[-1], str):
        return "unknown field"
    valid = sorted(owner.model_fields)
    close = difflib.get_close_matches(loc[-1], valid, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"unknown field; {guess}valid: {', '.join(valid)}"


def _model_at(model: type[BaseModel], loc: Path_) -> type[BaseModel] | None:
    """The model of the mapping at ``loc`` inside ``model`` (a list index stays on the element's model)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None or part not in current.model_fields:
            return None
        current = _inner_model(current.model_fields[part].annotation)
    return current


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``, ``tuple[X, ...]``, ``list[X]``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _inner_model(argument)
        if found is not None:
            return found
    return None


def _normalize_policies(raw: Any, source: str, lines: dict[Path_, int]) -> Any:
    if not isinstance(raw, list):
        return raw
    policies: list[Any] = []
    for i, entry in enumerate(raw):
        if isinstance(entry, str):
            try:
                policies.append(policy_from_shorthand(entry))
            except ValidationError as exc:
                raise validation_error(exc, source, lines, ("policies", i), model=CampaignSpec) from None
        else:
            policies.append(entry)
    return policies


def _expand_variant(entry: Any, where: str) -> list[dict[str, Any]]:
    """``nominal`` | ``{factor: value, ...}`` | ``{sweep: {factor: [values]}}`` | ``{grid: {f: [..], g: [..]}}``."""
    if entry == "nominal" or entry == {}:
        return [{}]
    if not isinstance(entry, dict):
        raise SpecError(f"{where}: expected 'nominal', a mapping factor: value, or sweep:/grid: of lists")
    if set(entry) & {"sweep", "grid"}:
        if len(entry) != 1:
            raise SpecError(f"{where}: 'sweep' or 'grid' must stand alone in its variant entry")
        kind, body = next(iter(entry.items()))
        if not isinstance(body, dict) or not body:
            raise SpecError(f"{where}.{kind}: expected a mapping factor: [values]")
        for factor, values in body.items():
            if not isinstance(values, list) or not values:
                raise SpecError(f"{where}.{kind}.{factor}: expected a non-empty list of values")
        if kind == "sweep":
            return [{factor: value} for factor, values in body.items() for value in values]
        return [dict(zip(body, combo, strict=True)) for combo in itertools.product(*body.values())]
    return [dict(entry)]


def _normalize_variants(raw: Any, source: str, lines: dict[Path_, int]) -> Any:
    if raw is None:
        return [{}]
    if not isinstance(raw, list):
        return raw
    variants: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        try:
            expanded = _expand_variant(entry, f"variants[{i}]")
        except SpecError as exc:
            raise SpecError(f"{source}:{_line_for(('variants', i), lines)}: {exc}") from None
        for variant in expanded:
            text = canonical_json(variant)
            if text not in seen:
                seen.add(text)
                variants.append(variant)
    return variants


def field_line(path: str | Path, at: Path_) -> int:
    """The line of the field at ``at`` in the campaign file ``path`` (a ``variants`` index counts variants as
    the CampaignSpec holds them, after ``sweep:``/``grid:`` expansion); 1 when the file no longer reads."""
    try:
        data, lines = load_yaml(Path(path).read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SpecError):
        return 1
    if len(at) > 1 and at[0] == "variants" and isinstance(at[1], int) and isinstance(data, dict):
        at = ("variants", _variant_entry(data.get("variants"), at[1]), *at[2:])
    return _line_for(at, lines)


def _variant_entry(raw: Any, index: int) -> int:
    """Which entry of a file's ``variants:`` list gave the ``index``-th variant of the expanded list."""
    seen: list[str] = []
    for entry_index, entry in enumerate(raw if isinstance(raw, list) else []):
        try:
            expanded = _expand_variant(entry, f"variants[{entry_index}]")
        except SpecError:
            continue
        for variant in expanded:
            text = canonical_json(variant)
            if text not in seen:
                seen.append(text)
                if len(seen) > index:
                    return entry_index
    return index


@public_api
def campaign_from_data(data: Any, source: str = "<campaign>", lines: dict[Path_, int] | None = None) -> CampaignSpec:
    """Validate plain data (as loaded from YAML) into a CampaignSpec."""
    lines = lines or {}
    if not isinstance(data, dict):
        raise SpecError(f"{source}:1: a campaign must be a mapping with name, episodes, tasks and policies")
    data = dict(data)
    data["policies"] = _normalize_policies(data.get("policies"), source, lines)
    data["variants"] = _normalize_variants(data.get("variants"), source, lines)
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source, lines, model=CampaignSpec) from None


@public_api
def load_campaign(path: str | Path) -> CampaignSpec:
    """Read a campaign YAML file; errors are one line naming file, line and field."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecError(f"{path}: campaign file is {size:,} bytes; at most {MAX_FILE_BYTES:,} are read")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such campaign file") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: campaign file is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read campaign file: {exc.strerror or exc}") from None
    data, lines = load_yaml(text, str(path))
    return campaign_from_data(data, str(path), lines)
