"""What every command module shares: opening the store, ``--policy`` values, and (from ``cli.options``, which
a listing imports alone because this module imports the store) option types, the store default and one-line
errors.

Command modules import this, never ``cli.app`` (which loads them to register).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from assay.cli import render
from assay.cli.options import DEFAULT_STORE as DEFAULT_STORE
from assay.cli.options import CatalogOpt as CatalogOpt
from assay.cli.options import JsonOpt as JsonOpt
from assay.cli.options import StoreOpt as StoreOpt
from assay.cli.options import user_errors as user_errors
from assay.errors import AssayError, SpecError
from assay.store import Store

if TYPE_CHECKING:  # the spec models load on first use: reading commands never parse a campaign file
    from assay.spec import CampaignSpec


class _CommandStore(Store):
    """A Store that says, when the command is done with it, which catalog rows it had to leave out."""

    def __exit__(self, *exc: object) -> None:
        skipped = self.catalog.skipped
        if skipped:
            key, why = next(iter(skipped.items()))
            render.err_console.print(
                f"[bold yellow]warning:[/] {len(skipped)} damaged catalog row(s) left out (episode {key[:12]}: "
                f"{escape(why)}); rerun their campaign to re-run them", highlight=False, soft_wrap=True)
        super().__exit__(*exc)


def open_store(store: Path, catalog: str | None, create: bool = False, data_url: str | None = None,
               new_catalog: bool = False) -> Store:
    """The store every command opens; a store from before forget registrations gets its failure
    categories registered here, so a resume that forgets an episode also drops its category."""
    from assay.failures.table import adopt

    opened = _CommandStore(store, catalog, create=create, data_url=data_url, new_catalog=new_catalog)
    try:
        adopt(opened)
    except BaseException:
        opened.close()
        raise
    return opened


POLICY_FORMS = ("a builtin (expert, random, degraded-expert, ...), module:attr, remote:ws://host:port, bc:PATH, "
                "a mapping like '{name: shaky, builtin: degraded-expert, params: {action_noise: 0.5}}'")


def policy_option(value: str, known: dict[str, Any] | None = None) -> Any:
    """The resolved policy a ``--policy`` value names: a policy of the source campaign by its name (with its
    parameters: ``shaky-expert``), a YAML mapping, or a shorthand. Anything else is one line naming the forms."""
    from pydantic import ValidationError

    from assay.policies import add_import_root, resolve_policy
    from assay.spec import PolicySpec, policy_from_shorthand

    known = known or {}
    try:
        if value in known:
            spec = PolicySpec.model_validate(known[value])
        elif value.lstrip().startswith("{"):
            import yaml

            data = yaml.safe_load(value)
            if not isinstance(data, dict):
                raise ValueError("it is not a mapping")
            spec = PolicySpec.model_validate(data)
        else:
            spec = policy_from_shorthand(value)
        if spec.entrypoint is not None:  # a module:attr on the command line: also looked up where the command runs
            add_import_root(Path.cwd())
        return resolve_policy(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "policy"
        message = f"{where}: {first.get('msg', 'invalid')}"
    except (ValueError, TypeError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except AssayError as exc:
        message = str(exc)
    names = f"; or one of the campaign's policies: {', '.join(sorted(known))}" if known else ""
    raise AssayError(f"--policy {value!r} is not valid ({message}); valid: {POLICY_FORMS}{names}") from None


def split_list(value: str) -> list[str]:
    """The non-empty, stripped parts of a comma-separated option value."""
    return [part.strip() for part in value.split(",") if part.strip()]


def campaign_file(path: Path) -> CampaignSpec:
    """The campaign in ``path``; its directory goes on the import path of its ``module:attr``
    policies, here and in the worker processes and Ray actors that run it, so a policy module beside the file
    imports without ``PYTHONPATH``."""
    from assay.policies import add_import_root
    from assay.spec import load_campaign

    spec = load_campaign(path)
    if any(policy.entrypoint is not None for policy in spec.policies):
        add_import_root(path.parent)
    return spec


@contextlib.contextmanager
def campaign_errors(path: Path) -> Iterator[None]:
    """A SpecError found after the campaign file loaded (a policy's parameter, an unknown task, a variant a
    backend refuses) names the file's line of the field it is about: ``campaign.yaml:7: policy 's': ...``."""
    try:
        yield
    except SpecError as exc:
        if not exc.at or str(exc).startswith(f"{path}:"):
            raise
        from assay.spec.loading import field_line

        raise type(exc)(f"{path}:{field_line(path, exc.at)}: {exc}", at=exc.at) from None


def say_latest(opened: Store, known: list[str]) -> str:
    """The campaign a command picks when ``--campaign`` is not given (the latest of ``known``, newest first), said
    on stderr so that nobody reads another campaign's numbers by mistake."""
    name = known[0]
    if len(known) > 1:
        others = f", the latest of {len(known)} campaigns in {opened.root}"
    else:
        others = f", the only one in {opened.root}"
    render.err_console.print(f"campaign {name}{others} (no --campaign given)", highlight=False, markup=False,
                             soft_wrap=True)
    return name


def say_waiting(holder: str) -> None:
    """What a command says once while another run holds the store's run lock."""
    render.err_console.print(f"another run ({holder}) holds this store; waiting for it to finish", highlight=False,
                             soft_wrap=True)


def has_identity(store: Path) -> bool:
    """Whether ``store`` exists with its store ID: opening it then writes nothing that two runs could race on."""
    try:
        return bool(json.loads((Path(store) / "store.json").read_text()).get("store_id"))
    except (OSError, ValueError, AttributeError):
        return False


def create_store(store: Path, catalog: str | None, data: str | None = None, new_catalog: bool = False) -> bool:
    """Create the store (or index it anew) under the exclusive run lock, as two first runs would race to create its
    catalog; a store that another run creates meanwhile (it then holds the lock shared) is left to it. Whether this
    call created it."""
    from assay.store import run_lock

    if not new_catalog and has_identity(store):
        return False
    with run_lock(store, on_wait=say_waiting, unless=None if new_catalog else lambda: has_identity(store)) as held:
        if held:
            open_store(store, catalog, create=True, data_url=data, new_catalog=new_catalog).close()
    return held
