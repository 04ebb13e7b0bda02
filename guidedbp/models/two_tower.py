"""Two-tower models (CLIP, SigLIP): the image tower to explain, the text tower to embed prompts.

A keras-hub ``CLIPBackbone`` or ``SigLIPBackbone`` takes a dict of ``images`` and
``token_ids`` and returns logits comparing every image with every text; guidedbp explains
models of one image input. :func:`split` cuts one in two:

- the image tower, a Functional model ``images -> image embedding`` built on the
  backbone's ``get_vision_embeddings`` (its layers and weights shared: the backbone is
  not changed), which the engine traces and guides like any model;
- a :class:`TextTower`, which embeds prompts with the backbone's ``get_text_embeddings``
  once each, with no gradient, and knows the model's logit scale.

Any model with ``get_vision_embeddings(images)``, ``get_text_embeddings(token_ids)`` and
an ``images`` input is one (:func:`is_two_tower`); so is a keras-hub task whose
``backbone`` is. Prompts are tokenized by the model's tokenizer and packed as its
keras-hub preprocessor packs them (CLIP: start and end tokens, lower case; SigLIP: an
end token, punctuation removed) to the text encoder's sequence length. A prompt longer
than that is refused, not cut: a cut prompt would be explained as words the user did not
write.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from guidedbp._extras import needs
from guidedbp.errors import ArgumentError, ModelLoadError

__all__ = ["MAX_CHARACTERS_PER_TOKEN", "TextTower", "is_two_tower", "load_tokenizer", "split"]

#: A prompt of more characters than this many per token of the text encoder is refused
#: unread: tokenizing a huge text takes seconds per million characters, and no prompt
#: that fits averages anywhere near 100 characters a token (CLIP's average 4 or 5).
MAX_CHARACTERS_PER_TOKEN = 100

#: Said where a text target meets a two-tower model with no tokenizer.
NO_TOKENIZER = ("the model has no tokenizer: load a keras-hub preset folder that holds one "
                "(backbone.save_to_preset(DIR) and tokenizer.save_to_preset(DIR)), or pass "
                "tokenizer=PRESET_DIR")


def is_two_tower(model) -> bool:
    """Whether ``model`` (or the ``backbone`` of a keras-hub task) embeds images and texts:
    it has ``get_vision_embeddings`` and ``get_text_embeddings``."""
    model = getattr(model, "backbone", None) if not _has_towers(model) else model
    return model is not None and _has_towers(model)


def _has_towers(model) -> bool:
    return (callable(getattr(model, "get_vision_embeddings", None))
            and callable(getattr(model, "get_text_embeddings", None)))


@dataclass(eq=False)
class TextTower:
    """A two-tower model's text side: prompts to unit embeddings, checked and cached.

    Attributes:
        backbone: The two-tower model (its ``get_text_embeddings`` embeds the tokens).
        size: The image embedding's length, which the text's must match.
        sequence_length: Tokens the text encoder reads (start and end tokens included).
        logit_scale: ``exp`` of the model's learned logit scale (CLIP's, SigLIP's), or
            ``None`` for a model that has none.
        tokenize: ``prompts -> (token_ids, lengths)`` (``lengths`` ``None`` where the
            tokenizer does not say), or ``None``: the model has no tokenizer.
        tokenizer_source: Where the tokenizer came from, for messages.
    """

    backbone: object
    size: int | None
    sequence_length: int | None
    logit_scale: float | None
    tokenize: Callable | None = None
    tokenizer_source: str = "none"
    _cache: dict = field(default_factory=dict, repr=False)

    def with_tokenizer(self, tokenizer, source: str | None = None) -> TextTower:
        """This tower with ``tokenizer`` (see :func:`load_tokenizer`) in place of its own."""
        tokenize, length = _packer(self.backbone, load_tokenizer(tokenizer),
                                   self.sequence_length)
        return TextTower(self.backbone, self.size, length, self.logit_scale, tokenize,
                         source or _describe(tokenizer))

    def check(self, prompts: Sequence[str]) -> None:
        """Refuse prompts the text tower cannot read whole.

        Raises:
            ArgumentError: No tokenizer, or a prompt of more tokens than the text
                encoder's sequence length (naming both), in one line.
        """
        self._tokens(prompts)

    def vector(self, prompts: Sequence[str]) -> np.ndarray:
        """The unit embedding ``(size,)`` of a prompt, or of an ensemble of prompts: the
        mean of their unit embeddings, renormalised (CLIP's prompt ensembling).

        Raises:
            ArgumentError: As :meth:`check`; a text embedding of another length than the
                image's, or one that is zero.
        """
        prompts = tuple(prompts)
        missing = [prompt for prompt in dict.fromkeys(prompts) if prompt not in self._cache]
        if missing:
            token_ids = self._tokens(missing)
            import tensorflow as tf

            embeddings = np.asarray(self.backbone.get_text_embeddings(
                tf.convert_to_tensor(token_ids)), np.float64)
            if self.size is not None and embeddings.shape[-1] != self.size:
                raise ArgumentError(
                    f"the text tower embeds prompts in {embeddings.shape[-1]} values, the "
                    f"image tower images in {self.size}: they must share one space")
            norms = np.linalg.norm(embeddings, axis=-1, keepdims=True)
            if not np.isfinite(embeddings).all() or not (norms > 0).all():
                raise ArgumentError(f"the text tower embeds {_shown(missing[0])} as zero or "
                                    "non-finite values")
            self._cache.update(zip(missing, embeddings / norms))
        mean = np.mean([self._cache[prompt] for prompt in prompts], axis=0)
        return (mean / np.linalg.norm(mean)).astype(np.float32)

    def _tokens(self, prompts: Sequence[str]) -> np.ndarray:
        """int32 ``(len(prompts), sequence_length)``, each prompt checked."""
        if self.tokenize is None:
            raise ArgumentError(NO_TOKENIZER)
        limit = self.sequence_length
        for prompt in prompts:
            if limit is not None and len(prompt) > MAX_CHARACTERS_PER_TOKEN * limit:
                raise ArgumentError(
                    f"Text prompt {_shown(prompt)} is {len(prompt):,} characters long: the "
                    f"model's text tower reads {limit} tokens at most")
        token_ids, lengths = self.tokenize(list(prompts))
        if limit is not None and lengths is not None:
            for prompt, length in zip(prompts, lengths):
                if length > limit:
                    raise ArgumentError(
                        f"Text prompt {_shown(prompt)} is longer than the {limit} tokens the "
                        "model's text tower reads (its start and end tokens included): "
                        "shorten it")
        return np.asarray(token_ids)


def split(model, tokenizer=None) -> tuple[object, TextTower]:
    """``model``'s image tower (a Functional ``images -> embedding`` model) and its
    :class:`TextTower`, with ``tokenizer`` (see :func:`load_tokenizer`), or else the
    tokenizer of a keras-hub task's preprocessor, if any.

    Raises:
        ModelLoadError: A model whose image tower cannot be built (no ``images`` input).
        ArgumentError: A ``tokenizer`` that is none (see :func:`load_tokenizer`).
    """
    backbone = model if _has_towers(model) else model.backbone
    if tokenizer is None and getattr(getattr(model, "preprocessor", None), "tokenizer", None):
        tokenizer, source = model.preprocessor.tokenizer, "the task's preprocessor"
    else:
        source = None if tokenizer is None else _describe(tokenizer)
    image = image_tower(backbone)
    size = image.outputs[0].shape[-1]
    text = TextTower(backbone, None if size is None else int(size), _sequence_length(backbone),
                     _logit_scale(backbone))
    if tokenizer is not None:
        text = text.with_tokenizer(tokenizer, source)
    return image, text


def image_tower(backbone):
    """``images -> get_vision_embeddings(images)`` as a Functional model sharing
    ``backbone``'s layers.

    Raises:
        ModelLoadError: The backbone has no ``images`` input of shape ``(H, W, C)``.
    """
    import keras

    inputs = getattr(backbone, "input", None)
    image = inputs.get("images") if isinstance(inputs, dict) else None
    shape = tuple(image.shape[1:]) if image is not None else None
    if shape is None or len(shape) != 3:
        raise ModelLoadError(f"{getattr(backbone, 'name', 'the model')!r} embeds images and "
                             "texts but has no 'images' input of shape (H, W, C): guidedbp "
                             "cannot build its image tower")
    images = keras.Input(shape=shape, name="images", dtype=image.dtype)
    return keras.Model(images, backbone.get_vision_embeddings(images),
                       name=f"{backbone.name}_image_tower")


def load_tokenizer(tokenizer):
    """A keras-hub tokenizer from what a user gives: a tokenizer, a preprocessor or task
    holding one, a keras-hub preset folder holding ``tokenizer.json``, or a callable
    ``prompts -> token_ids`` ``(P, L)`` for a model keras-hub does not know.

    Raises:
        ArgumentError: A folder with no tokenizer, or anything else, in one line.
    """
    if isinstance(tokenizer, (str, os.PathLike)):
        path = os.fspath(tokenizer)
        if not os.path.isfile(os.path.join(path, "tokenizer.json")):
            raise ArgumentError(f"tokenizer={path!r} is not a keras-hub preset folder holding "
                                "a tokenizer (it has no tokenizer.json)")
        try:
            import keras_hub
        except ImportError:
            raise ArgumentError(needs("a tokenizer preset", "hub")) from None
        try:
            return keras_hub.tokenizers.Tokenizer.from_preset(path)
        except Exception as error:  # keras-hub raises many types
            from guidedbp._text import one_line

            raise ArgumentError(f"tokenizer={path!r} cannot be loaded: "
                                f"{one_line(error, limit=200)}") from None
    inner = getattr(tokenizer, "tokenizer", None)
    if inner is None and getattr(tokenizer, "preprocessor", None) is not None:
        inner = getattr(tokenizer.preprocessor, "tokenizer", None)
    if inner is not None:
        return inner
    if callable(tokenizer):
        return tokenizer
    raise ArgumentError(f"tokenizer must be a keras-hub tokenizer, preprocessor or preset "
                        f"folder, or a callable prompts -> token ids, got "
                        f"{type(tokenizer).__name__}")


def _packer(backbone, tokenizer, length: int | None) -> tuple[Callable, int | None]:
    """``prompts -> (token_ids, lengths)`` for ``backbone``, and the sequence length: the
    keras-hub preprocessor of ``backbone``'s class packs a keras-hub tokenizer's tokens;
    a plain callable's token ids are taken as they are."""
    preprocessor_class = _preprocessor_class(backbone, tokenizer)
    if preprocessor_class is None:
        if _is_keras_hub(tokenizer):
            raise ArgumentError(f"keras-hub has no preprocessor that packs prompts for "
                                f"{type(backbone).__name__}: pass tokenizer= a callable "
                                "prompts -> token ids")

        def tokenize(prompts: list[str]):
            return np.asarray(tokenizer(prompts)), None

        return tokenize, length
    kwargs = {} if length is None else {"sequence_length": length}
    preprocessor = preprocessor_class(tokenizer=tokenizer, **kwargs)
    length = int(preprocessor.sequence_length)

    def tokenize(prompts: list[str]):
        # One more token than fits: a prompt that fills it is too long (the packer cuts).
        probe = preprocessor({"prompts": prompts, "images": None}, sequence_length=length + 1)
        lengths = np.asarray(probe["padding_mask"]).sum(axis=1)
        packed = preprocessor({"prompts": prompts, "images": None})
        return np.asarray(packed["token_ids"]), lengths

    return tokenize, length


def _is_keras_hub(value) -> bool:
    return type(value).__module__.split(".")[0] == "keras_hub"


def _preprocessor_class(backbone, tokenizer):
    """The keras-hub preprocessor class for ``backbone``'s class that takes prompts
    (CLIP's, SigLIP's...), or ``None`` for a tokenizer that is no keras-hub one."""
    if not _is_keras_hub(tokenizer):
        return None
    import keras_hub

    base = keras_hub.models.Preprocessor
    found = [value for value in vars(keras_hub.models).values()
             if isinstance(value, type) and issubclass(value, base)
             and getattr(value, "backbone_cls", None) is type(backbone)
             and isinstance(tokenizer, getattr(value, "tokenizer_cls", None) or type(None))]
    return found[0] if found else None


def _sequence_length(backbone) -> int | None:
    encoder = getattr(backbone, "text_encoder", None)
    length = getattr(encoder, "max_sequence_length", None)
    return int(length) if isinstance(length, (int, np.integer)) else None


def _logit_scale(backbone) -> float | None:
    """``exp`` of the first ``logit_scale`` weight among ``backbone``'s layers (the
    head's, for CLIP and SigLIP), or ``None``."""
    for layer in backbone._flatten_layers(include_self=True, recursive=True) \
            if hasattr(backbone, "_flatten_layers") else [backbone]:
        weight = getattr(layer, "logit_scale", None)
        if weight is not None and not callable(weight):
            value = float(np.asarray(weight).reshape(-1)[0])
            return float(np.exp(value))
    return None


def _describe(tokenizer) -> str:
    if isinstance(tokenizer, (str, os.PathLike)):
        return os.fspath(tokenizer)
    return type(tokenizer).__name__


def _shown(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
