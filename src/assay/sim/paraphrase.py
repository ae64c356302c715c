"""Instruction paraphrases (set ``paraphrases-v1``): fixed, deterministic rewrites of a template.

Styles, ordered by their distance from the template: ``synonym`` (words swapped
for synonyms), ``reorder`` (clauses moved), ``terse`` (articles and pronouns
dropped), ``verbose`` (polite padding), ``distractor`` (an irrelevant clause),
``typos`` (adjacent letters swapped), ``indirect`` (the goal described without
the task's words). The tables are data: changing them is a new set version, and
the rewritten instruction is part of every episode's key.
"""

from __future__ import annotations

import hashlib
import re

PARAPHRASE_SET = "paraphrases-v1"

SYNONYMS = {
    "pick": "grab", "place": "put", "push": "shove", "press": "push down", "pull": "tug", "open": "open up",
    "close": "shut", "turn": "rotate", "goal": "target", "puck": "disc", "reach": "move to", "insert": "slide",
    "button": "switch", "sweep": "brush", "slide": "glide", "drawer": "compartment", "door": "hatch",
    "window": "pane", "lever": "handle", "ball": "sphere", "mug": "cup", "kick": "boot", "position": "spot",
}
PREPOSITIONS = ("out of", "away from", "into", "onto", "from", "to", "at", "on", "off", "behind", "under", "over",
                "with", "by")
DROPPED = {"the", "a", "an", "it", "its"}
INDIRECT = {
    "press": "make it click", "pick-place": "that thing on the table belongs somewhere else",
    "pick": "get that thing off the table", "push": "nudge that thing over to where it belongs",
    "slide": "that flat thing needs to go somewhere else", "open": "let some air in there",
    "close": "nobody should be able to see inside", "turn": "give it a twist", "pull": "bring it towards you",
    "reach": "go over there", "insert": "fit it in", "sweep": "clear the table", "lock": "make it secure",
    "unlock": "make it loose again", "assemble": "put the pieces together", "disassemble": "take it apart",
    "dunk": "score a point", "hammer": "hit it hard", "tool-use": "use something to move it",
    "unplug": "disconnect it",
}


def _synonym(text: str) -> str:
    return " ".join(SYNONYMS.get(word, word) for word in text.split())


def _reorder(text: str) -> str:
    if " and " in text:
        first, second = text.split(" and ", 1)
        return f"{second}, once you {first}"
    for preposition in PREPOSITIONS:
        match = re.search(rf"\b{preposition}\b", text)
        if match and match.start() > 0:
            return f"{text[match.start():]}, {text[:match.start()].strip()}"
    return f"now, {text}"


def _terse(text: str) -> str:
    return " ".join(word for word in text.split() if word not in DROPPED)


def _typos(text: str) -> str:
    words = text.split()
    digest = hashlib.sha256(text.encode()).digest()
    for i, word in enumerate(words):
        if len(word) >= 4 and i % 2 == 0:
            j = 1 + digest[i % len(digest)] % (len(word) - 2)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2 :]
    return " ".join(words)


def paraphrase(instruction: str, style: str, skill: str = "") -> str:
    """The instruction rewritten in ``style`` (see the module docstring); ``nominal`` returns it unchanged."""
    if style == "nominal":
        return instruction
    if style == "synonym":
        return _synonym(instruction)
    if style == "reorder":
        return _reorder(instruction)
    if style == "terse":
        return _terse(instruction)
    if style == "verbose":
        return f"could you please carefully {instruction}, taking your time to make sure it is done properly"
    if style == "distractor":
        return f"{instruction}, and do not mind the cabinet on the left"
    if style == "typos":
        return _typos(instruction)
    if style == "indirect":
        return INDIRECT.get(skill, "do what needs doing here")
    raise ValueError(f"unknown paraphrase style {style!r}")
