"""Text helpers shared by every room: user-facing error messages are one line."""

from __future__ import annotations


def one_line(error: BaseException | str, limit: int | None = None) -> str:
    """``error``'s message with whitespace collapsed to one line (its type name if empty),
    cut to ``limit`` characters with "..." when given."""
    text = " ".join(str(error).split()) or type(error).__name__
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 file"``, ``"2 files"``: a count with its noun (``nouns``: an irregular plural).

    >>> plural(1, "other file"), plural(3, "check"), plural(2, "class", "classes")
    ('1 other file', '3 checks', '2 classes')
    """
    if count == 1:
        return f"{count} {noun}"
    if nouns is None:
        nouns = noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{count} {nouns}"
