"""Turning a PolicySpec into a version (at plan time) and a Policy (in a worker).

The only dynamic import in Assay is the ``module:attr`` entrypoint that the user
names explicitly in a campaign.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import inspect
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

from assay.errors import ContractError, SpecError, UnknownPolicyError, UnsupportedError
from assay.policies.contract import PolicyContract, camera_wire_keys, check_contract
from assay.policies.protocol import (
    Policy,
    PolicyClass,
    SupportsContract,
    SupportsResolveVersion,
    SupportsTaskCheck,
)
from assay.policies.registry import BUILTIN_POLICIES
from assay.policies.remote.client import RemotePolicy
from assay.policies.remote.connecting import RemoteParams, fetch_metadata
from assay.spec import PolicySpec, ResolvedPolicy, TaskSpec, content_hash

_IMPORT_ROOTS: list[str] = []


def add_import_root(directory: str | Path) -> None:
    """Put ``directory`` (a campaign file's) on the import path of ``module:attr`` policies: appended to
    ``sys.path`` (an installed package of the same name wins), so worker processes (started with ``spawn``,
    which passes ``sys.path`` on) import it too, and remembered for Ray actors (:func:`import_roots`)."""
    path = str(Path(directory).resolve())
    if path not in _IMPORT_ROOTS:
        _IMPORT_ROOTS.append(path)
    if path not in sys.path:
        sys.path.append(path)


def import_roots() -> tuple[str, ...]:
    """The directories :func:`add_import_root` added in this process (a Ray actor adds them in its own)."""
    return tuple(_IMPORT_ROOTS)


IMPORT_HINT = ("a module:attr policy is imported from the Python path, which holds the campaign file's directory "
               "when the campaign is run from its file; put the module there, install its package "
               "(pip install -e .), or add its directory to PYTHONPATH")


def _import_entrypoint(spec: PolicySpec) -> Any:
    assert spec.entrypoint is not None
    module_name, attr_path = spec.entrypoint.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            # the module was found; something it imports is missing
            raise UnknownPolicyError(f"policy {spec.name!r}: importing module {module_name!r} failed: {exc}") from None
        raise UnknownPolicyError(f"policy {spec.name!r}: no module {exc.name!r} ({IMPORT_HINT})") from None
    except ImportError as exc:
        raise UnknownPolicyError(f"policy {spec.name!r}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a user module may raise anything while it is imported
        raise UnknownPolicyError(f"policy {spec.name!r}: importing module {module_name!r} raised "
                                 f"{type(exc).__name__}: {exc}") from None
    target: Any = module
    for part in attr_path.split("."):
        if not hasattr(target, part):
            names = [name for name in dir(target) if not name.startswith("_")]
            raise UnknownPolicyError(f"policy {spec.name!r}: module {module_name!r} has no attribute {attr_path!r}"
                                     f"{did_you_mean(part, names)}")
        target = getattr(target, part)
    if not callable(target):
        raise UnknownPolicyError(f"policy {spec.name!r}: {spec.entrypoint} is not a class or factory")
    return target


def _builtin(spec: PolicySpec) -> PolicyClass:
    assert spec.builtin is not None
    try:
        return cast(PolicyClass, BUILTIN_POLICIES[spec.builtin])
    except KeyError:
        valid = ", ".join(sorted(BUILTIN_POLICIES))
        raise UnknownPolicyError(f"policy {spec.name!r}: unknown builtin {spec.builtin!r}; valid: {valid}") from None


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the valid name closest to ``name``, or nothing when none is close."""
    close = difflib.get_close_matches(name, list(valid), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_params(spec: PolicySpec, params_model: type[BaseModel]) -> None:
    try:
        params_model(**spec.params)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "params"
        valid = ", ".join(params_model.model_fields) or "none"
        message = "unknown parameter" if first["type"] == "extra_forbidden" else first["msg"]
        if first["type"] == "extra_forbidden":
            message += did_you_mean(str(first["loc"][0]), params_model.model_fields)
        raise SpecError(f"policy {spec.name!r}: params.{field}: {message} (valid parameters: {valid})",
                        at=("params", *first["loc"])) from None


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _check_call(spec: PolicySpec, target: Any) -> None:
    """Check a ``module:attr`` policy's params against what it is called with: its ``Params`` model when it declares
    one, else its signature (unknown names, missing required ones, and values their annotations refuse), so a typo
    fails before any episode instead of making every episode an error."""
    declared = getattr(target, "Params", None)
    if isinstance(declared, type) and issubclass(declared, BaseModel):
        _check_params(spec, declared)
        return
    signature = _signature(target)
    if signature is None:  # a callable whose signature cannot be read: nothing to check
        return
    named = {name: p for name, p in signature.parameters.items() if p.kind in _NAMED}
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    valid = f"valid parameters of {spec.entrypoint}: {', '.join(named) or 'none'}"
    for name in spec.params:
        if name not in named and not open_ended:
            raise SpecError(f"policy {spec.name!r}: params.{name}: unknown parameter{did_you_mean(name, named)} "
                            f"({valid})", at=("params", name))
    for name, parameter in named.items():
        if parameter.default is inspect.Parameter.empty and name not in spec.params:
            raise SpecError(f"policy {spec.name!r}: params.{name}: missing, {spec.entrypoint} requires it ({valid})",
                            at=("params",))
    for name, value in spec.params.items():
        annotation = named[name].annotation if name in named else inspect.Parameter.empty
        adapter = _adapter(annotation)
        if adapter is None:
            continue
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            wanted = getattr(annotation, "__name__", str(annotation))
            raise SpecError(f"policy {spec.name!r}: params.{name}: {exc.errors()[0]['msg']}, got {value!r} "
                            f"({spec.entrypoint} takes {name}: {wanted})", at=("params", name)) from None


def _signature(target: Any) -> inspect.Signature | None:
    """``target``'s signature with its annotations resolved (left as written when they do not resolve)."""
    try:
        return inspect.signature(target, eval_str=True)
    except (TypeError, ValueError):
        return None
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: the names are still worth checking
        try:
            return inspect.signature(target)
        except (TypeError, ValueError):
            return None


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    """A validator for a parameter's annotation, or None (none, a string that did not resolve, or a type pydantic
    has no schema for)."""
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        return None
    try:
        return TypeAdapter(annotation)
    except Exception:  # noqa: BLE001 - a type pydantic has no schema for (an array, a model object): not checked
        return None


def _source_files(module: Any) -> list[Path]:
    """The files a user policy's behaviour can depend on: every ``.py`` file of its top-level package,
    or, for a top-level module, itself and the sibling modules its source imports (read statically, so
    the answer never depends on what else the process happens to have imported)."""
    origin = getattr(module, "__file__", None)
    if origin is None:
        return []
    path = Path(origin).resolve()
    top = sys.modules.get(module.__name__.split(".", 1)[0])
    top_file = getattr(top, "__file__", None)
    if top is not None and top is not module and top_file and Path(top_file).name == "__init__.py":
        return sorted(Path(top_file).resolve().parent.rglob("*.py"))
    if path.name == "__init__.py":
        return sorted(path.parent.rglob("*.py"))
    return sorted(_imported_siblings(path))


def _imported_siblings(path: Path) -> set[Path]:
    """``path`` and, transitively, the modules and packages beside it that its ``import`` statements name."""
    found, todo = {path}, [path]
    while todo:
        try:
            tree = ast.parse(todo.pop().read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module}
        for top in {name.split(".", 1)[0] for name in names}:
            module_file, package = path.parent / f"{top}.py", path.parent / top / "__init__.py"
            if module_file.is_file() and module_file not in found:
                found.add(module_file)
                todo.append(module_file)
            elif package.is_file() and package not in found:
                found |= set(package.parent.rglob("*.py"))
    return found


def _source_version(target: Any) -> str:
    """``src-`` + a hash of every file the policy's package holds (see :func:`_source_files`): change a
    constant in a module it imports and the version, hence every episode key, changes."""
    module = inspect.getmodule(target)
    files = _source_files(module) if module is not None else []
    digest = hashlib.sha256()
    if not files:
        digest.update(repr(target).encode())
    root = Path(os.path.commonpath([f.parent for f in files])) if files else None
    for file in files:
        try:
            data = file.read_bytes()
        except OSError:
            continue
        name = os.path.relpath(file, root) if root is not None else file.name
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return "src-" + digest.hexdigest()[:12]


def resolve_policy(spec: PolicySpec) -> ResolvedPolicy:
    """Validate a spec and give it the version that goes into episode keys."""
    if spec.builtin is not None:
        cls = _builtin(spec)
        _check_params(spec, cls.Params)
        if isinstance(cls, SupportsResolveVersion):
            version = cls.resolve_version(spec.params)
        else:
            version = f"builtin-{cls.version}"
        return ResolvedPolicy(spec, spec.version or version)
    if spec.remote is not None:
        _check_params(spec, RemoteParams)
        return ResolvedPolicy(spec, remote_version(spec, fetch_metadata(spec.remote, **spec.params)))
    target = _import_entrypoint(spec)
    _check_call(spec, target)
    return ResolvedPolicy(spec, spec.version or _source_version(target))


def remote_version(spec: PolicySpec, metadata: dict[str, Any]) -> str:
    """A served policy's version: what the server declares (policy, params, version, served task,
    contract), not its URL, so a restarted server gives the same keys and another checkpoint or task
    gives new ones. A server that declares no identity (a plain openpi server) needs ``version:``."""
    if str(metadata.get("protocol", "")).startswith("assay-sim/"):  # what `assay serve-sim` sends first
        raise SpecError(f"policy {spec.name!r}: the server at {spec.remote} is a simulator server (`assay serve-sim "
                        f"{metadata.get('backend')}`), not a policy server: point `remote:` at `assay serve-policy`, "
                        f"and name that simulator under `simulators: {{{metadata.get('backend')}: {spec.remote}}}`")
    served: dict[str, Any] = metadata["assay"] if isinstance(metadata.get("assay"), dict) else {}
    declared: dict[str, Any] = {k: served.get(k) for k in ("policy", "source", "params", "version", "task", "sessions")
                                if served.get(k) is not None}
    if isinstance(metadata.get("contract"), dict):
        declared["contract"] = metadata["contract"]
    if not served.get("version"):
        if spec.version is None:
            raise SpecError(
                f"policy {spec.name!r}: the server at {spec.remote} declares no identity (not an `assay serve-policy` "
                "server), so a restart with another checkpoint would look the same; set `version:` on the policy "
                "(e.g. the checkpoint's name) and change it when the served model changes")
        return spec.version if not declared else f"{spec.version}+{content_hash(declared, length=12)}"
    digest = "remote-" + content_hash(declared, length=12)
    return digest if spec.version is None else f"{spec.version}+{digest}"


def check_served_task(spec: PolicySpec, metadata: dict[str, Any], task: TaskSpec) -> None:
    """A server bound to one task (``serve-policy --task``) must be asked for that task only."""
    served: dict[str, Any] = metadata["assay"] if isinstance(metadata.get("assay"), dict) else {}
    bound = served.get("task")
    if bound and bound != task.id:
        raise ContractError(f"policy {spec.name!r}: the server at {spec.remote} serves task {bound}, the campaign "
                            f"runs {task.id}; restart it with `assay serve-policy ... --task {task.id}`")


def check_supports(policy: ResolvedPolicy, task: TaskSpec) -> None:
    """Raise UnsupportedError when the policy's static ``supports(task)`` gives a reason."""
    if policy.spec.remote is not None:
        return
    target = _builtin(policy.spec) if policy.spec.builtin is not None else _import_entrypoint(policy.spec)
    reason = target.supports(task) if isinstance(target, SupportsTaskCheck) else None
    if reason:
        raise UnsupportedError(f"policy {policy.name!r} cannot run {task.id}: {reason}")


def policy_contract(policy: ResolvedPolicy) -> PolicyContract | None:
    """The policy's declared contract: a class's static ``contract(params)``, or a server's metadata."""
    spec = policy.spec
    if spec.remote is not None:
        return PolicyContract.from_metadata(fetch_metadata(spec.remote, **spec.params))
    target = _builtin(spec) if spec.builtin is not None else _import_entrypoint(spec)
    return target.contract(spec.params) if isinstance(target, SupportsContract) else None


def check_policy_contract(policy: ResolvedPolicy, task: TaskSpec) -> None:
    """The handshake: ContractError (a SpecError) with a precise diff, or ContractWarnings for ranges.
    A server bound to another task than ``task`` is refused first."""
    spec = policy.spec
    if spec.remote is not None:
        metadata = fetch_metadata(spec.remote, **spec.params)
        check_served_task(spec, metadata, task)
        contract = PolicyContract.from_metadata(metadata)
        images = RemoteParams(**spec.params).images
        camera_wire_keys([camera.name for camera in task.cameras], images)  # every mapped camera is rendered
    else:
        contract, images = policy_contract(policy), None
    if contract is not None:
        check_contract(contract, task, images).raise_or_warn(policy.name, task)


def make_policy(spec: PolicySpec) -> Policy:
    """Build the policy object (called once per worker and spec)."""
    if spec.remote is not None:
        return RemotePolicy(spec.remote, **spec.params)
    factory = _builtin(spec) if spec.builtin is not None else _import_entrypoint(spec)
    policy = factory(**spec.params)
    if not isinstance(policy, Policy):
        raise UnknownPolicyError(f"policy {spec.name!r}: {spec.source} did not build an object with reset() and act()")
    return policy
