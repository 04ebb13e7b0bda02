"""Text helpers shared by every room: user-facing error messages are one line."""

from __future__ import annotations


def one_line(error: BaseException | str, limit: int | None = None) -> str:
    """``error``'s message with whitespace collapsed to one line (its type name if empty),
    cut to ``limit`` characters with "..." when given."""
    text = " ".join(str(error).split()) or type(error).__name__
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
