"""Text helpers shared by every room: user-facing error messages are one line."""

from __future__ import annotations

import difflib


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


def did_you_mean(value: str, choices, cutoff: float = 0.6) -> str:
    """``"did you mean 'x'?"`` for the choices close to ``value`` (``difflib``'s ratio at
    least ``cutoff``), or ``""``.

    >>> did_you_mean("infern", ["inferno", "viridis", "magma"])
    "did you mean 'inferno'?"
    >>> did_you_mean("zzz", ["inferno"])
    ''
    """
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=3,
                                      cutoff=cutoff)
    return f"did you mean {' or '.join(repr(name) for name in close)}?" if close else ""


def some_of(names, limit: int = 12, last: bool = False) -> str:
    """``names`` as a comma list; past ``limit``, the first (or ``last``) few and the count.

    >>> some_of(["a", "b"]), some_of("abcdef", limit=3), some_of("abcdef", 3, last=True)
    ('a, b', 'a, b, c, ... (6 in all)', '... d, e, f (6 in all)')
    """
    names = [str(name) for name in names]
    if len(names) <= limit:
        return ", ".join(names)
    if last:
        return f"... {', '.join(names[-limit:])} ({len(names)} in all)"
    return f"{', '.join(names[:limit])}, ... ({len(names)} in all)"


def method_at_layer(name: str, layers: dict) -> str:
    """A method as a caption names it: ``"gradcam at conv_1"`` for a class activation
    map (``layers``: its layer by method), the name alone for any other.

    >>> method_at_layer("gradcam", {"gradcam": "conv_1"}), method_at_layer("guided", {})
    ('gradcam at conv_1', 'guided')
    """
    return f"{name} at {layers[name]}" if name in layers else name


def layer_note(methods, layers: dict) -> str:
    """What a caption naming no method adds for the class activation maps among
    ``methods``: ``" · gradcam, scorecam at conv_1"``; ``""`` without one.

    >>> layer_note(("guided", "gradcam", "scorecam"), {"gradcam": "c", "scorecam": "c"})
    ' · gradcam, scorecam at c'
    """
    by_layer: dict[str, list[str]] = {}
    for name in methods:
        if name in layers:
            by_layer.setdefault(layers[name], []).append(name)
    return "".join(f" · {', '.join(names)} at {layer}" for layer, names in by_layer.items())


def not_text(value: str) -> str | None:
    """Why ``value`` is no text that can be written as UTF-8, or ``None``: a byte that is
    not UTF-8 (a command line's, which Python reads as a surrogate escape) or a lone
    surrogate.

    >>> not_text("a cat"), not_text("\\udcffcat"), not_text("\\ud800cat")
    (None, 'it holds a byte that is not UTF-8 (0xff)', 'it holds a lone surrogate (U+D800)')
    """
    for char in value:
        if "\udc80" <= char <= "\udcff":
            return f"it holds a byte that is not UTF-8 (0x{ord(char) - 0xDC00:02x})"
        if "\ud800" <= char <= "\udfff":
            return f"it holds a lone surrogate (U+{ord(char):04X})"
    return None


def shown_name(name: str) -> str:
    """A user's name (a file, a folder, a model, a prompt) as the terminal shows it: as
    it is where every character is printable, else quoted with its escapes, as messages
    quote a model's name (``repr``): a name's control characters (an escape sequence
    that retitles the terminal) never reach the terminal raw.

    >>> shown_name("photos/a cat.png"), shown_name("photos/\\x1b]0;T\\x07.png")
    ('photos/a cat.png', "'photos/\\\\x1b]0;T\\\\x07.png'")
    """
    name = str(name)
    return name if name.isprintable() else repr(name)
