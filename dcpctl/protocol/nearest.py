"""The names closest to a misspelt one, for an error that says "did you mean": field names, opcode names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Final

# A person wants a hint, not a list; three close names are enough to spot the one meant.
MAX_SUGGESTIONS: Final = 3
# difflib's similarity (0 to 1) a name needs to be suggested at all: its own default, which click uses too
CUTOFF: Final = 0.6
# ... and how far below the best a name may be: DCP_MUTATON gets DCP_MUTATION, not DCP_OPEN as well
SPREAD: Final = 0.1


def closest(word: str, names: Iterable[str]) -> list[str]:
    """The known names most like ``word`` (case ignored, best first), as they are spelt; none when nothing is
    close."""
    by_folded: dict[str, str] = {}
    for name in sorted(names):
        by_folded.setdefault(name.casefold(), name)
    matcher = difflib.SequenceMatcher(b=word.casefold())
    scored = []
    for folded in difflib.get_close_matches(word.casefold(), by_folded, n=MAX_SUGGESTIONS, cutoff=CUTOFF):
        matcher.set_seq1(folded)
        scored.append((matcher.ratio(), by_folded[folded]))
    return [name for score, name in scored if score >= scored[0][0] - SPREAD]


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`` (did you mean A or B?)`` with the closest names, or the empty string when none is close."""
    found = closest(word, names)
    return f" (did you mean {' or '.join(found)}?)" if found else ""
