"""The dashboard's script writes HTML only through its autoescaping ``html`...` `` tag (read from the source).

The browser test (tests/test_browser.py) checks what the tag does; this one checks that nothing goes around
it: ``innerHTML`` and ``insertAdjacentHTML`` are assigned only inside ``show`` and ``append``, which take
only the tag's fragments, and no untagged template literal or string starts with markup.
"""

from __future__ import annotations

import re
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "src" / "assay" / "server" / "static" / "app.js"
SINKS = re.compile(r"\.innerHTML\s*=|\.outerHTML\s*=|insertAdjacentHTML\(|document\.write\(")
UNTAGGED_MARKUP = re.compile(r"""(?<![A-Za-z_$])[`"']\s*<[a-zA-Z/]""")


def test_markup_sinks_are_only_the_two_helpers() -> None:
    lines = APP.read_text().splitlines()
    sinks = [line.strip() for line in lines if SINKS.search(line)]
    assert sinks == ['function show(node, value) { node.innerHTML = fragment(value); }',
                     'function append(node, value) { node.insertAdjacentHTML("beforeend", fragment(value)); }']


def test_no_markup_is_built_outside_the_tag() -> None:
    offending = [f"{n}: {line.strip()}" for n, line in enumerate(APP.read_text().splitlines(), 1)
                 if UNTAGGED_MARKUP.search(line.replace("html`", "")) and not line.lstrip().startswith("//")]
    assert offending == []
    assert "esc(" not in APP.read_text()
