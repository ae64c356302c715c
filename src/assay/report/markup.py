"""The report's HTML building blocks: Jinja2 templates with autoescape, and small formatters.

Every value that reaches the page is escaped unless it is ``Markup``: the templates in
``report/templates/`` render through :data:`ENV` (``autoescape=True``), and a fragment is built
with :func:`html`, whose values are escaped as they are put in (``Markup.format``). Markup
comes only from these, from :func:`figure` (the SVG the report draws itself) and from literal
strings of this package, so no caller has to remember to escape anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

ENV = Environment(loader=PackageLoader("assay.report", "templates"), autoescape=True, undefined=StrictUndefined,
                  keep_trailing_newline=False)


def render(template: str, **context: Any) -> Markup:
    """The template ``report/templates/<template>`` rendered with ``context`` (values escaped)."""
    return Markup(ENV.get_template(template).render(**context).strip("\n"))


def html(fragment: str, *values: Any) -> Markup:
    """``fragment`` (trusted HTML of this package, ``{}`` fields) with ``values`` escaped into it."""
    return Markup(fragment).format(*values)


def join(parts: Iterable[Markup], separator: str = "") -> Markup:
    """The fragments one after another; a plain string among them is a TypeError, not silently escaped."""
    parts = list(parts)
    loose = [type(p).__name__ for p in parts if not isinstance(p, Markup)]
    if loose:
        raise TypeError(f"report fragments must be Markup (built by html() or a template), got {', '.join(loose)}")
    return Markup(separator).join(parts)


def figure(svg: str | None, css: str = "figure") -> Markup:
    """An SVG the report drew itself (trusted), in its ``div``; nothing when there is none (None)."""
    return Markup("") if svg is None else html("<div class='{}'>{}</div>", css, Markup(svg))


def pct(value: float | None) -> str:
    """A rate as a percentage, ``–`` when undefined."""
    return "–" if value is None else f"{value:.0%}"


def number(value: float | None, digits: int = 2) -> str:
    """A number to ``digits`` decimals, ``–`` when undefined."""
    return "–" if value is None else f"{value:.{digits}f}"


def table(head: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Iterable[int] = frozenset()) -> Markup:
    """A table: ``head`` and the cells escaped (a ``Markup`` cell stays as it is), ``numeric`` columns right."""
    return render("table.html", head=head, rows=rows, numeric=set(numeric))
