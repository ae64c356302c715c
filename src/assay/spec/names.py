"""Names people give (campaigns, policies, tasks): one Unicode form, and nothing that cannot be seen.

A name is a key: the catalog looks campaigns up by it and links episodes to policies by it. Two
spellings that look the same must therefore be the same name: ``café`` typed as one code point
(U+00E9) and as ``e`` + a combining accent (U+0065 U+0301) are both stored in NFC, the composed
form. A control or invisible formatting character (a trailing newline, a zero-width space, a
bidirectional override) is refused in one line: it would give two names that print alike.
"""

from __future__ import annotations

import unicodedata

# Unicode categories a name may not hold: control (Cc: newline, tab, NUL, DEL), format (Cf: zero-width space and
# joiners, bidirectional overrides), and the line and paragraph separators (Zl, Zp).
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def clean_name(value: str, what: str) -> str:
    """``value`` in Unicode NFC; ValueError naming ``what`` and the first control or invisible character in it."""
    for place, char in enumerate(value):
        if unicodedata.category(char) in INVISIBLE_CATEGORIES:
            label = unicodedata.name(char, "a control character")
            raise ValueError(f"{what} {value!r} holds U+{ord(char):04X} ({label}) at position {place}; a name "
                             "holds visible characters only (letters, digits, '.', '_', '-')")
    return unicodedata.normalize("NFC", value)
