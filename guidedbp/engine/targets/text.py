"""A text prompt as a target, for a two-tower model (CLIP, SigLIP): :class:`Text`.

The cosine similarity between the image's embedding and a text prompt's, or the
prompt's zero-shot log-probability against ``contrast`` prompts.

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp._text import not_text
from guidedbp.engine.targets.kinds import OutputName, Target, check_output
from guidedbp.errors import ArgumentError

__all__ = ["DEFAULT_TEXT_SCALE", "Text"]


#: The zero-shot logit scale of a model that has none (CLIP's trained value, ``exp(4.6052)``).
DEFAULT_TEXT_SCALE = 100.0


@dataclass(frozen=True, eq=False)
class Text(Target):
    """How well the image matches a text prompt, for a two-tower model (CLIP, SigLIP).

    The image tower is explained; the text tower embeds the prompts once, with no
    gradient. With no ``contrast``, the score is the cosine similarity between the image's
    embedding and the prompt's (a :class:`Similarity` to the prompt's embedding). With
    ``contrast``, it is the prompt's zero-shot log-probability against the other prompts
    (Radford et al., *Learning transferable visual models from natural language
    supervision*, ICML 2021): ``log_softmax(scale * cos)[0]`` over ``[prompt, *contrast]``,
    ``scale`` the model's learned logit scale (``exp(logit_scale)``: CLIP's, SigLIP's;
    SigLIP's bias changes no softmax), :data:`DEFAULT_TEXT_SCALE` for a model that has
    none. A prompt may be an ensemble, a sequence of prompts: its embedding is the mean of
    their unit embeddings, renormalised (CLIP's prompt ensembling); so may each contrast.

    :class:`guidedbp.Explainer` embeds the prompts with the model's text tower and
    tokenizer; the engine takes a target already embedded (:meth:`embedded`).

    Args:
        prompt: The text, or a sequence of texts (an ensemble).
        contrast: Other prompts (each a text or an ensemble): the zero-shot classes the
            prompt is scored against; a text alone is one prompt.
        output: The output read, where the model has several.
        name: How it is labelled (``text:NAME``); else ``text:PROMPT`` (an ensemble's
            prompts joined by ``|``).
    """

    prompt: str | tuple[str, ...]
    contrast: tuple = ()
    output: OutputName = None
    name: str | None = None
    kind = "text"

    def __post_init__(self):
        prompts = _prompts(self.prompt, "Text prompt")
        object.__setattr__(self, "prompt", self.prompt if isinstance(self.prompt, str)
                           else prompts)
        contrast = (self.contrast,) if isinstance(self.contrast, str) else self.contrast
        if not isinstance(contrast, (list, tuple)):
            raise ArgumentError(f"Text contrast must be prompts (a sequence of texts), got "
                                f"{type(self.contrast).__name__}")
        groups = tuple(item if isinstance(item, str) and _prompts(item, "Text contrast")
                       else _prompts(item, "Text contrast") for item in contrast)
        seen = [self.prompts, *(_group(item) for item in groups)]
        for index, group in enumerate(seen):
            if group in seen[:index]:
                raise ArgumentError(f"Text contrast repeats the prompt {_shown(group[0])}: each "
                                    "prompt is one zero-shot class")
        object.__setattr__(self, "contrast", groups)
        check_output(self.output)
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise ArgumentError(f"Text name={self.name!r} must be a non-empty text")

    @property
    def prompts(self) -> tuple[str, ...]:
        """The prompt as an ensemble: one text or several."""
        return _group(self.prompt)

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The prompt's ensemble, then each contrast's: one row of :attr:`vectors` each."""
        return (self.prompts, *(_group(item) for item in self.contrast))

    @property
    def vectors(self) -> np.ndarray | None:
        """float32 ``(1 + len(contrast), D)``: the unit embeddings of :attr:`groups`, once
        :meth:`embedded`; else ``None``."""
        return getattr(self, "_vectors", None)

    @property
    def scale(self) -> float:
        """The zero-shot logit scale, once :meth:`embedded`; else :data:`DEFAULT_TEXT_SCALE`."""
        return getattr(self, "_scale", DEFAULT_TEXT_SCALE)

    def embedded(self, vectors, scale: float | None = None) -> Text:
        """This target with its prompts' embeddings: ``vectors`` ``(len(groups), D)``, one
        row per group (normalised here), and the model's logit ``scale`` (``None``:
        :data:`DEFAULT_TEXT_SCALE`).

        Raises:
            ArgumentError: Another number of rows, or a row that is zero or not finite.
        """
        import copy

        rows = np.asarray(vectors, np.float64)
        if rows.ndim != 2 or len(rows) != len(self.groups) or rows.shape[1] == 0:
            raise ArgumentError(f"Text embeddings must be ({len(self.groups)}, size): one row "
                                f"per prompt and contrast, got shape {rows.shape}")
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        if not np.isfinite(rows).all() or not (norms > 0).all():
            raise ArgumentError(f"the text embedding of {self.short_label} is zero or not finite")
        scale = DEFAULT_TEXT_SCALE if scale is None else float(scale)
        if not (np.isfinite(scale) and scale > 0):
            raise ArgumentError(f"Text scale={scale!r} must be a positive number")
        twin = copy.copy(self)
        object.__setattr__(twin, "_vectors", (rows / norms).astype(np.float32))
        object.__setattr__(twin, "_scale", scale)
        return twin

    @property
    def label(self) -> str:
        return f"text:{self.name or '|'.join(self.prompts)}"

    @property
    def short_label(self) -> str:
        """:attr:`label` as messages name it: a prompt past 40 characters cut
        (``text:a photo of...``), so that a huge prompt is named, not copied whole.

        >>> Text("a cat").short_label, Text("word " * 20_000).short_label
        ('text:a cat', 'text:word word word word word word word word ...')
        """
        shown = self.name or "|".join(self.prompts)
        return f"text:{shown}" if len(shown) <= 40 else f"text:{shown[:40]}..."


def _group(prompt) -> tuple[str, ...]:
    return (prompt,) if isinstance(prompt, str) else tuple(prompt)


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _prompts(value, what: str) -> tuple[str, ...]:
    """``value`` (a text or a sequence of texts) as texts, each checked.

    Raises:
        ArgumentError: No text, an empty or blank one, or something that is not a text.
    """
    if isinstance(value, str):
        items = (value,)
    elif isinstance(value, (list, tuple)):
        items = tuple(value)
        if not items:
            raise ArgumentError(f"{what} is an empty sequence: give a text or several")
    else:
        raise ArgumentError(f"{what} must be a text or a sequence of texts, got "
                            f"{type(value).__name__}")
    for item in items:
        if not isinstance(item, str):
            raise ArgumentError(f"{what} holds a {type(item).__name__}, not a text")
        if not item.strip():
            raise ArgumentError(f"{what} {item!r} is empty: give the words to match")
        reason = not_text(item)
        if reason is not None:
            raise ArgumentError(f"{what} {_shown(item)} is no text: {reason}")
    return items
