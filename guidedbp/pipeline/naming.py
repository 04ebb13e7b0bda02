"""How an explain run names its outputs: one rule, written down once.

Under OUT, each input's outputs sit at its output stem: each INPUT argument maps
under its own last path component, the extension kept
(:func:`guidedbp.io.inputs.output_stem`: ``/data/photos`` gives ``photos/a/cat.jpg``,
``../cat.jpg`` gives ``cat.jpg``, a glob keeps its folder part before the first
wildcard; nothing leaves OUT)::

    STEM[.CLASS].METHOD.RENDER.png   one per method and render (CLASS with classes/top_k)
    STEM[.CLASS].panel.png           with several methods and the panel render
    STEM[.CLASS].METHOD.npy          with raw: the float32 map at model resolution
    STEM[.CLASS].figure.FORMAT       with figure: every method in one matplotlib figure

CLASS is ``281-tabby`` (the index, then the name cut to 48 characters) or ``281``.
With targets, CLASS is the target's :func:`target_slug` instead (``unit-2``,
``region-1-circle``, ``similar-ref.jpg``, ``text-a-cat``); a class target keeps ``281-tabby``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass


def class_slug(index: int, labels) -> str:
    """``281-tabby`` (or ``281`` without labels): the class part of an output name."""
    if labels is None or index >= len(labels):
        return str(index)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", labels[index]).strip("-").lower()[:48].strip("-")
    return f"{index}-{slug}" if slug else str(index)


def target_slug(kind: str, value, name: str | None = None) -> str:
    """The part of an output name that says which target it explains: ``unit-2``,
    ``unit-4-7-1``, ``region-1-circle`` (``region-1`` without a name), ``similar-ref.jpg``
    (the reference's file name), ``text-a-cat`` (a prompt's words, cut to 48
    characters, then its digest where they leave something out: :func:`_prompt_slug`);
    letters, digits, ``.``, ``_`` and ``-`` only, so no path separator ever reaches a file
    name.

    >>> target_slug("unit", (4, 7, 1)), target_slug("region", 1, "Big circle")
    ('unit-4-7-1', 'region-1-big-circle')
    >>> target_slug("similar", "../ref 1.jpg")
    'similar-ref-1.jpg'
    >>> target_slug("text", "A cat, on a mat/sofa")
    'text-a-cat-on-a-mat-sofa'
    """
    if kind == "unit":
        index = value if isinstance(value, tuple) else (value,)
        return "unit-" + "-".join(map(str, index))
    if kind == "region":
        slug = re.sub(r"[^A-Za-z0-9]+", "-", name or "").strip("-").lower()[:48].strip("-")
        return f"region-{value}-{slug}" if slug else f"region-{value}"
    if kind == "text":
        return _prompt_slug(str(value))
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", str(value).replace("\\", "/").rsplit("/", 1)[-1])
    return f"{kind}-{text.strip('-.')[:48].strip('-.') or 'reference'}"


def _prompt_slug(prompt: str) -> str:
    """``text-a-cat``: a prompt's Latin words and digits, lower case, cut to 48
    characters. Where that drops more than letter case and punctuation (words in
    another script, symbols, what lies past the cut), the prompt's digest follows, so
    that two prompts share a slug only if they differ in nothing else; a prompt of no
    Latin letter or digit is its digest alone.

    >>> _prompt_slug("A cat!") == _prompt_slug("a cat")
    True
    >>> _prompt_slug("猫の写真 cat"), _prompt_slug("犬の写真 cat")
    ('text-cat-5c05344f', 'text-cat-931f40c2')
    >>> _prompt_slug("a photo of " + "a very " * 8 + "big cat")
    'text-a-photo-of-a-very-a-very-a-very-a-very-a-very-a-9ddb8200'
    """
    words = re.sub(r"[^A-Za-z0-9]+", "-", prompt).strip("-").lower()
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()
    if not words:
        return f"text-{digest[:12]}"
    lost = len(words) > 48 or any(not char.isascii() and not _punctuation(char)
                                  for char in prompt)
    cut = words[:48].strip("-")
    return f"text-{cut}-{digest[:8]}" if lost else f"text-{cut}"


def _punctuation(char: str) -> bool:
    """Whether a character other than ASCII is a space or punctuation (``“``, ``—``)."""
    return unicodedata.category(char)[0] in "PZ"


def label_of(target: int, labels) -> str | None:
    """Class ``target``'s name, or ``None`` without one."""
    return labels[target] if labels is not None and target < len(labels) else None


@dataclass(frozen=True)
class Naming:
    """Output paths, relative to OUT, for a run's methods and renders.

    Attributes:
        methods: The run's methods, in order.
        renders: The run's renders, in order.
        raw: Whether float32 maps are saved too.
        labels: Class names, or ``None``.
        named: Whether file names carry the class (explicit classes or top-k).
        figure: The figures' format (``pdf``, ``svg``, ``png``), or ``None``.
    """

    methods: tuple[str, ...]
    renders: tuple[str, ...]
    raw: bool = False
    labels: tuple[str, ...] | None = None
    named: bool = False
    figure: str | None = None

    def paths(self, stem: str, target: int | str | None) -> tuple[dict, str | dict | None]:
        """``(outputs, raw)`` for one input's stem and class (or a target's
        :func:`target_slug`).

        One method: ``render -> STEM.METHOD.RENDER.png`` and raw ``STEM.METHOD.npy``.
        Several: ``METHOD.RENDER -> STEM.METHOD.RENDER.png`` for each, one comparison
        ``panel -> STEM.panel.png``, and raw as ``method -> path``. With a figure
        format, also ``figure -> STEM.figure.FORMAT``.
        """
        if self.named and isinstance(target, str):
            stem = f"{stem}.{target}"
        elif self.named and target is not None:
            stem = f"{stem}.{class_slug(target, self.labels)}"
        methods, renders = self.methods, self.renders
        if len(methods) == 1:
            outputs = {name: f"{stem}.{methods[0]}.{name}.png" for name in renders}
            raw = f"{stem}.{methods[0]}.npy" if self.raw else None
        else:
            outputs = {f"{method}.{name}": f"{stem}.{method}.{name}.png"
                       for method in methods for name in renders if name != "panel"}
            if "panel" in renders:
                outputs["panel"] = f"{stem}.panel.png"
            raw = {m: f"{stem}.{m}.npy" for m in methods} if self.raw else None
        if self.figure is not None:
            outputs["figure"] = f"{stem}.figure.{self.figure}"
        return outputs, raw

    def raw_items(self, raw) -> list[tuple[str, str]]:
        """``(method, path)`` of each raw map in a ``paths`` result."""
        if raw is None:
            return []
        if isinstance(raw, str):
            return [(self.methods[0], raw)]
        return list(raw.items())
