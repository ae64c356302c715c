"""The lint and type gates exempt no library code: a new exemption for ``src/`` fails here.

``make lint`` runs ruff and mypy over ``src/`` with the rules in ``pyproject.toml``. A gate that exempts old
code is a debt, not a gate, so these tests read the configuration and the sources themselves:

* ruff's ``per-file-ignores`` (and ``extend-per-file-ignores``) match no ``src/`` file, by any glob (tests,
  benchmarks and examples may keep the docstring rules off, nothing else); neither ruff nor mypy excludes one;
  no ``src/`` file switches a checker off for itself (``# ruff: noqa``, ``# mypy: ...``, a leading type ignore);
* no mypy override for an ``assay`` module switches an error code off or ignores its errors, and the
  packages plugin authors build on (spec, store, run, policies, testing) are checked strictly;
* a ``# noqa`` in ``src/`` is only the blind-except of fault isolation with its reason
  (``# noqa: BLE001 - why``); a ``# type: ignore`` names its error codes;
* no function in ``src/`` is longer than ``MAX_FUNCTION_LINES`` (decorators included);
* every exception and warning class is defined in ``assay/errors.py`` (httpx's one exceptions module),
  but for module-private control-flow signals (``_Name``) that never leave their module;
* no two modules of ``src/`` import each other, directly or through others, at module level or inside a
  function (``from package import submodule`` counts as importing the submodule).

``GRANDFATHERED_*`` listed what was left to fix; they are empty now and stay so (an entry there is a debt).
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "assay"
MAX_FUNCTION_LINES = 80
STRICT_PACKAGES = ("assay.spec", "assay.store", "assay.run", "assay.policies", "assay.testing")

# Nothing is left to fix; an entry added here is a debt the review has to accept.
GRANDFATHERED_RUFF: frozenset[str] = frozenset()
GRANDFATHERED_MYPY: frozenset[str] = frozenset()
GRANDFATHERED_NOQA: frozenset[str] = frozenset()
GRANDFATHERED_CYCLES: frozenset[frozenset[str]] = frozenset()
GRANDFATHERED_LONG: frozenset[str] = frozenset()

NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
BLIND_EXCEPT_WITH_REASON = re.compile(r"^:\s*BLE001\s+-\s+\S")
TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[a-z\-, ]+\])?")
FILE_SWITCH = re.compile(r"#\s*(ruff|flake8)\s*:\s*noqa|#\s*mypy\s*:")


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _matches_src(pattern: str) -> bool:
    """Whether a ruff path pattern (a glob, relative to the root) names any file of ``src/``: ``**/cli/*.py``
    exempts library code as surely as ``src/assay/cli/app.py`` does."""
    pattern = pattern.removeprefix("./")
    files = [_relative(path) for path in _sources()]
    return pattern.startswith("src") or any(
        fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(name, f"{pattern.rstrip('/')}/*") for name in files)


def test_ruff_exempts_no_library_file():
    lint = _config()["tool"]["ruff"]["lint"]
    ignores = {**lint.get("per-file-ignores", {}), **lint.get("extend-per-file-ignores", {})}
    exempt = {pattern for pattern in ignores if _matches_src(pattern)}
    added = exempt - GRANDFATHERED_RUFF
    assert not added, f"new per-file ignores for src/: {sorted(added)}; fix the code instead"
    fixed = GRANDFATHERED_RUFF - exempt
    assert not fixed, f"{sorted(fixed)} left the ruff table: delete them from GRANDFATHERED_RUFF too"
    for pattern, rules in ignores.items():
        if pattern.split("/", 1)[0] in ("tests", "benchmarks", "examples"):
            assert all(rule.startswith(("D", "E501", "SIM105", "B904")) for rule in rules), (pattern, rules)


def test_ruff_and_mypy_leave_out_no_library_file():
    """An excluded file is exempt from every rule at once: ruff's ``exclude``/``extend-exclude`` and mypy's
    ``exclude`` name no ``src/`` file, and mypy checks all of ``src/assay``."""
    config = _config()["tool"]
    patterns = [*config["ruff"].get("exclude", []), *config["ruff"].get("extend-exclude", [])]
    assert not [p for p in patterns if _matches_src(p)], f"ruff excludes library files: {patterns}"
    excluded = config["mypy"].get("exclude", [])
    excluded = [excluded] if isinstance(excluded, str) else excluded
    assert not [p for p in excluded if any(re.search(p, _relative(path)) for path in _sources())], excluded
    assert config["mypy"]["files"] == ["src/assay"]


def test_no_library_file_switches_a_checker_off_for_itself():
    """File-level switches (``# ruff: noqa``, ``# mypy: ignore-errors`` or any inline mypy configuration, a
    ``# type: ignore`` before the first statement) are exemptions written where the table cannot see them."""
    found = []
    for path in _sources():
        text = path.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if FILE_SWITCH.search(line):
                found.append(f"{_relative(path)}:{number}: {line.strip()}")
        body = ast.parse(text).body
        first = body[0].lineno if body else len(text.splitlines()) + 1
        found += [f"{_relative(path)}:{n}: whole-file type ignore" for n, line in enumerate(text.splitlines(), 1)
                  if n < first and TYPE_IGNORE.search(line)]
    assert not found, found


def test_mypy_switches_off_no_error_for_assay_modules_and_is_strict_where_plugins_build():
    overrides = _config()["tool"]["mypy"].get("overrides", [])
    relaxed: set[str] = set()
    strict: set[str] = set()
    for override in overrides:
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        ours = [m for m in modules if m == "assay" or m.startswith("assay.")]
        if ours and (override.get("disable_error_code") or override.get("ignore_errors")):
            relaxed.update(ours)
        if ours and override.get("disallow_untyped_defs") and override.get("disallow_any_generics"):
            strict.update(ours)
    added = relaxed - GRANDFATHERED_MYPY
    assert not added, f"new mypy exemptions for {sorted(added)}; fix the code instead"
    fixed = GRANDFATHERED_MYPY - relaxed
    assert not fixed, f"{sorted(fixed)} left the mypy overrides: delete them from GRANDFATHERED_MYPY too"
    for package in STRICT_PACKAGES:
        assert f"{package}.*" in strict, f"{package} must be checked strictly (disallow_untyped_defs, ...)"


# The checkers' global settings, pinned: a rule switched off for the whole tree (ruff's ``ignore``) or a mypy
# setting that loosens every module passes every other gate, so each change here is a reviewed edit with its
# reason written beside the setting in pyproject.toml.
RUFF_GLOBAL = {"line-length": 120, "select": ["F", "E", "W", "I", "B", "UP", "SIM", "BLE", "D1"],
               "ignore": ["D105", "D107", "UP042"]}
MYPY_GLOBAL = {"python_version": "3.11", "files": ["src/assay"], "mypy_path": "src", "warn_unused_configs": True,
               "warn_redundant_casts": True, "warn_unused_ignores": True, "check_untyped_defs": True,
               "ignore_missing_imports": True}
LOOSENING = ("disable_error_code", "ignore_errors", "follow_imports", "allow_untyped_globals", "allow_redefinition",
             "disable_bytearray_promotion", "implicit_optional", "implicit_reexport", "allow_untyped_calls")


def test_the_checkers_global_settings_are_pinned_and_every_ignored_rule_gives_its_reason():
    tool = _config()["tool"]
    ruff, lint = tool["ruff"], tool["ruff"]["lint"]
    assert {"line-length": ruff.get("line-length"), "select": lint.get("select"), "ignore": lint.get("ignore")} \
        == RUFF_GLOBAL, "ruff's global rules changed: say why beside the setting and update RUFF_GLOBAL"
    for loose in ("extend-ignore", "unfixable", "extend-safe-fixes", "external"):
        assert loose not in lint and loose not in ruff, f"ruff's {loose} is a global exemption: use select/ignore"
    assert "exclude" not in ruff and "extend-exclude" not in ruff, "ruff must see every file"
    mypy = {k: v for k, v in tool["mypy"].items() if k != "overrides"}
    assert mypy == MYPY_GLOBAL, "mypy's global settings changed: say why and update MYPY_GLOBAL"
    assert not set(mypy) & set(LOOSENING)
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("ignore = [", text.index("[tool.ruff.lint]")):]
    block = block[:block.index("]")]
    for rule in RUFF_GLOBAL["ignore"]:
        line = next(line for line in block.splitlines() if f'"{rule}"' in line)
        assert re.search(r"#\s*\S", line), f"ruff ignores {rule} for the whole tree without a reason beside it"


def test_the_settings_gate_catches_a_loosened_setting(monkeypatch):
    """The pin has teeth: an added global ignore or a top-level mypy error switch fails it."""
    real = _config()
    for edit in (lambda c: c["tool"]["ruff"]["lint"]["ignore"].append("E501"),
                 lambda c: c["tool"]["ruff"]["lint"]["ignore"].append("B"),
                 lambda c: c["tool"]["mypy"].__setitem__("disable_error_code", ["attr-defined"])):
        loosened = copy.deepcopy(real)
        edit(loosened)
        monkeypatch.setattr(sys.modules[__name__], "_config", lambda loosened=loosened: loosened)
        with pytest.raises(AssertionError):
            test_the_checkers_global_settings_are_pinned_and_every_ignored_rule_gives_its_reason()


def test_suppression_comments_in_src_are_precise_and_give_a_reason():
    loose: dict[str, list[str]] = {}
    for path in _sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            noqa = NOQA.search(line)
            if noqa and not BLIND_EXCEPT_WITH_REASON.match(noqa.group("rest")):
                loose.setdefault(_relative(path), []).append(f"{number}: {line.strip()}")
            ignore = TYPE_IGNORE.search(line)
            if ignore and not ignore.group("codes"):
                loose.setdefault(_relative(path), []).append(f"{number}: {line.strip()}")
    added = set(loose) - GRANDFATHERED_NOQA
    assert not added, {path: loose[path] for path in sorted(added)}
    fixed = GRANDFATHERED_NOQA - set(loose)
    assert not fixed, f"{sorted(fixed)} have no loose suppression left: delete them from GRANDFATHERED_NOQA"


def test_no_function_in_src_is_longer_than_80_lines():
    long: dict[str, int] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{_relative(path)}:{node.name}"] = length
    added = set(long) - GRANDFATHERED_LONG
    assert not added, {name: long[name] for name in sorted(added)}
    fixed = GRANDFATHERED_LONG - set(long)
    assert not fixed, f"{sorted(fixed)} are short now: delete them from GRANDFATHERED_LONG"


def test_the_gates_catch_what_they_promise():
    """The patterns themselves: a bare noqa, a noqa without a reason and a code-less type ignore are loose."""
    assert not BLIND_EXCEPT_WITH_REASON.match(NOQA.search("x  # noqa").group("rest"))
    assert not BLIND_EXCEPT_WITH_REASON.match(NOQA.search("x  # noqa: BLE001").group("rest"))
    assert not BLIND_EXCEPT_WITH_REASON.match(NOQA.search("x  # noqa: E501 - long").group("rest"))
    assert BLIND_EXCEPT_WITH_REASON.match(NOQA.search("except Exception:  # noqa: BLE001 - isolated").group("rest"))
    assert TYPE_IGNORE.search("x  # type: ignore").group("codes") is None
    assert TYPE_IGNORE.search("x  # type: ignore[arg-type]").group("codes") == "[arg-type]"
    assert FILE_SWITCH.search("# ruff: noqa") and FILE_SWITCH.search("# mypy: ignore-errors")
    assert FILE_SWITCH.search("#ruff:noqa: E501") and not FILE_SWITCH.search("x = 1  # noqa: BLE001 - why")
    assert _matches_src("**/cli/*.py") and _matches_src("src/assay/cli/app.py") and _matches_src("src/assay/cli")
    assert not _matches_src("tests/**") and not _matches_src("benchmarks/throughput.py")


def _bases(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]


def test_every_exception_class_is_defined_in_errors():
    errors = ast.parse((SRC / "errors.py").read_text())
    known = {"Exception", "BaseException", "ValueError", "UserWarning", "Warning", "RuntimeError", "TypeError"}
    defined = {node.name for node in ast.walk(errors) if isinstance(node, ast.ClassDef)}
    elsewhere: list[str] = []
    for path in _sources():
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            if set(_bases(node)) & (known | defined) or node.name.endswith(("Error", "Warning", "Exception")):
                elsewhere.append(f"{_relative(path)}:{node.lineno} {node.name}")
    assert not elsewhere, f"define exceptions in assay/errors.py: {elsewhere}"


def _module_names() -> dict[str, Path]:
    names = {}
    for path in _sources():
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the assay modules it imports anywhere in its body (a package's ``__init__`` is the package)."""
    modules = _module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [node.module])
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
                targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
            else:
                continue
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_circles_in_src():
    cycles = set(import_cycles(import_graph()))
    added = cycles - GRANDFATHERED_CYCLES
    assert not added, f"import circles: {[sorted(c) for c in added]}"
    fixed = GRANDFATHERED_CYCLES - cycles
    assert not fixed, f"{[sorted(c) for c in fixed]} are gone: delete them from GRANDFATHERED_CYCLES"


def test_the_circle_finder_finds_a_circle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [frozenset({"a", "b", "c"})]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
