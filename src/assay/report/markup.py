"""Small HTML helpers shared by the report's sections; every caller escapes values from the store."""

from __future__ import annotations

from html import escape


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    out = ["<table><thead><tr>", *(f"<th style='text-align:right'>{escape(h)}</th>" if i in numeric
                                   else f"<th>{escape(h)}</th>" for i, h in enumerate(head)), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)
