"""The loaded-model record: a callable model and what guidedbp needs to feed and label it.

Every loader (:mod:`~guidedbp.models.keras_files`, :mod:`~guidedbp.models.savedmodel`,
:mod:`~guidedbp.models.applications`, :mod:`~guidedbp.models.loading`) returns a
:class:`LoadedModel`; :meth:`LoadedModel.from_keras` builds one around a ``keras.Model``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from guidedbp.caveats import NO_RESCALING, UNTRAINED_WEIGHTS, Caveat
from guidedbp.errors import ModelLoadError
from guidedbp.models.preprocess import PREPROCESS_MODES
from guidedbp.models.scaling import rescales_itself
from guidedbp.models.two_tower import TextTower, is_two_tower, split

__all__ = [
    "DEFAULT_FILE_PREPROCESS",
    "FILE_PREPROCESS_SOURCE",
    "MAX_INPUT_ELEMENTS",
    "NO_RESCALING_NOTE",
    "RANDOM_WEIGHTS_NOTE",
    "UNCHECKED_RESCALING_NOTE",
    "LoadedModel",
    "check_input_size",
]

#: Preprocessing applied to models loaded from files unless the caller chooses one:
#: raw 0-255 pixels, right for models that rescale inside (a Rescaling layer).
DEFAULT_FILE_PREPROCESS = "none"
#: The :attr:`LoadedModel.preprocess_source` of that default.
FILE_PREPROCESS_SOURCE = "default for model files (raw 0-255 pixels)"

#: The most values (H * W * C) a model's declared input may hold: 2**26 = 64 Mi, e.g.
#: 4729 x 4729 x 3. One such float32 image is 256 MiB, and the backward pass keeps every
#: activation, typically tens of times the input, so a larger declared input would run
#: out of memory while tracing rather than fail with a message. The largest
#: keras.applications input (EfficientNetB7, 600 x 600 x 3) is 1.08 M values, 1/62 of it.
MAX_INPUT_ELEMENTS = 2**26

# The modes worth suggesting for a model that does not rescale its input itself.
_SCALING = [mode for mode in PREPROCESS_MODES if mode != DEFAULT_FILE_PREPROCESS]
_SCALING_MODES = f"{', '.join(_SCALING[:-1])} or {_SCALING[-1]}"


@dataclass
class LoadedModel:
    """A model ready for the engine, with what the CLI needs to feed and label it.

    Attributes:
        model: A callable ``model(images, training=False)`` that the engine traces: a
            ``keras.Model`` or a :class:`~guidedbp.models.frozen.FrozenGraph`. Its output
            is any tensor (class scores, a regression, a map, an embedding) or a list
            or dict of them (:func:`~guidedbp.models.outputs.model_outputs` describes
            them).
        source: The spec it was loaded from.
        format: ``"keras"``, ``"h5"``, ``"savedmodel"``, ``"keras-application"``,
            ``"demo"`` or ``"in-memory"``.
        input_shape: ``(H, W, C)``, ``None`` for free dimensions.
        preprocess: A :data:`~guidedbp.models.preprocess.PREPROCESS_MODES` entry.
        preprocess_source: Why that preprocessing was chosen.
        labels: Class names, or ``None``.
        labels_source: Where the names come from.
        notes: Things a user should know before trusting a map.
        text: A two-tower model's text tower (:class:`~guidedbp.models.two_tower.TextTower`,
            which embeds :class:`~guidedbp.targets.Text` prompts), ``model`` being its
            image tower; ``None`` for a model with no text tower.
    """

    model: object
    source: str
    format: str
    input_shape: tuple
    preprocess: str
    preprocess_source: str
    labels: list[str] | None = None
    labels_source: str = "none (class indices only)"
    notes: list[str] = field(default_factory=list)
    text: TextTower | None = None

    @classmethod
    def from_keras(cls, model, file_format: str, source: str) -> LoadedModel:
        """Wrap a ``keras.Model`` (or any callable) that takes one ``(N, H, W, C)`` input,
        or a two-tower model (:func:`~guidedbp.models.two_tower.is_two_tower`: CLIP,
        SigLIP), whose image tower it wraps, its text tower kept as :attr:`text`.

        Args:
            model: The model; used as is, never copied or changed.
            file_format: The :attr:`format` to record.
            source: The :attr:`source` to record.

        Returns:
            A :class:`LoadedModel` with the file default preprocessing, and a note when
            the model has no Rescaling or Normalization layer, or when that cannot be
            told (:func:`~guidedbp.models.scaling.rescales_itself`), except for
            ``keras-application`` models, whose preprocessing is known.

        Raises:
            ModelLoadError: For a model with several inputs, non-image inputs, a
                non-float input (no gradient reaches integer pixels) or an input larger
                than :data:`MAX_INPUT_ELEMENTS`.
        """
        text = None
        if is_two_tower(model):  # CLIP, SigLIP: the image tower is explained
            model, text = split(model)
        try:
            inputs = model.inputs
        except (AttributeError, ValueError):
            inputs = None
        if inputs is not None and len(inputs) != 1:
            raise ModelLoadError(
                f"{source!r} has {len(inputs)} inputs; guidedbp explains one image input"
            )
        shape = tuple(inputs[0].shape[1:]) if inputs else (None, None, None)
        if len(shape) != 3:
            raise ModelLoadError(
                f"{source!r} takes inputs of shape {shape}, not (H, W, C) images"
            )
        if inputs:
            _check_float_input(source, inputs[0])
        check_input_size(source, shape)
        loaded = cls(
            model=model,
            source=source,
            format=file_format,
            input_shape=shape,
            preprocess=DEFAULT_FILE_PREPROCESS,
            preprocess_source=FILE_PREPROCESS_SOURCE,
            text=text,
        )
        if file_format != "keras-application":
            loaded.note_scaling(rescales_itself(model))
        return loaded

    def note_scaling(self, rescales: bool | None) -> None:
        """Add the note of a model fed raw pixels by default that does not rescale them
        (``rescales`` ``False``: :data:`NO_RESCALING_NOTE`) or where that could not be
        told (``None``: :data:`UNCHECKED_RESCALING_NOTE`)."""
        if rescales is not True:
            self.notes.append(NO_RESCALING_NOTE if rescales is False
                              else UNCHECKED_RESCALING_NOTE)

    @property
    def caveats(self) -> tuple[Caveat, ...]:
        """The :attr:`notes` that travel with every map as :class:`~guidedbp.caveats.Caveat`
        items: random weights, and raw 0-255 pixels fed to a model that does not rescale
        them (while no preprocessing was chosen)."""
        return self.caveats_for(self.preprocess)

    def caveats_for(self, preprocess: str) -> tuple[Caveat, ...]:
        """:attr:`caveats` when the images are fed with ``preprocess`` instead."""
        found = []
        if RANDOM_WEIGHTS_NOTE in self.notes:
            found.append(Caveat(UNTRAINED_WEIGHTS, "random weights: the maps show what an "
                                "untrained network responds to, not an explanation"))
        if NO_RESCALING_NOTE in self.notes and preprocess == DEFAULT_FILE_PREPROCESS:
            found.append(Caveat(NO_RESCALING, "raw 0-255 pixels fed to a model with no "
                                "Rescaling/Normalization layer: wrong if it was trained on "
                                "scaled pixels"))
        if UNCHECKED_RESCALING_NOTE in self.notes and preprocess == DEFAULT_FILE_PREPROCESS:
            found.append(Caveat(NO_RESCALING, "raw 0-255 pixels fed to a model whose input "
                                "scaling could not be checked: wrong if it was trained on "
                                "scaled pixels"))
        return tuple(found)

    @property
    def name(self) -> str:
        """The model's own name, else the source's file name without its suffix."""
        return getattr(self.model, "name", None) or Path(self.source).stem

    @property
    def input_dtype(self) -> str:
        """The input's dtype name (``"float32"`` where the model does not say)."""
        try:
            dtype = self.model.inputs[0].dtype
        except (AttributeError, IndexError, ValueError):
            return "float32"
        return getattr(dtype, "name", None) or str(dtype)

    @property
    def channels(self) -> int:
        """Image channels the model takes: 1 or 3 (3 where the model leaves it free)."""
        return self.input_shape[2] if self.input_shape[2] in (1, 3) else 3

    def __call__(self, images, training: bool = False):
        """The model's output for ``images``: ``model(images, training=training)``."""
        return self.model(images, training=training)


def check_input_size(source: str, shape: tuple) -> None:
    """Refuse a declared ``(H, W, C)`` input of more than :data:`MAX_INPUT_ELEMENTS` values.

    Free (``None``) dimensions are not counted: images are checked when they come.

    Raises:
        ModelLoadError: Naming the shape and the limit.
    """
    size = 1
    for dimension in shape:
        size *= dimension or 1
    if size > MAX_INPUT_ELEMENTS:
        raise ModelLoadError(
            f"{source!r} declares an input of shape {tuple(shape)} ({size:,} values per "
            f"image), more than guidedbp traces ({MAX_INPUT_ELEMENTS:,}, e.g. 4729x4729x3): "
            "export it with a smaller or free (None) input size"
        )


def _check_float_input(source: str, tensor) -> None:
    """Refuse an integer (or other non-float) input: its gradient is not defined."""
    import tensorflow as tf

    try:
        dtype = tf.as_dtype(tensor.dtype)
    except (AttributeError, TypeError):
        return  # a callable that does not say: traced as float32
    if not dtype.is_floating:
        raise ModelLoadError(
            f"{source!r} takes {dtype.name} input; gradients need a float input "
            "(an integer input gives all-zero maps): rebuild it with a float32 Input"
        )


#: The note for a model file with no scaling layer, while no preprocessing was chosen.
NO_RESCALING_NOTE = ("no Rescaling/Normalization layer at the input: if the model was trained "
                     f"on scaled pixels, pass preprocess=MODE ({_SCALING_MODES})")


#: The note for a model whose input scaling could not be read (a SavedModel whose first
#: ops are none :mod:`~guidedbp.models.scaling` knows, a callable with neither layers nor
#: a graph), while no preprocessing was chosen.
UNCHECKED_RESCALING_NOTE = (
    "could not check whether the model rescales its input (neither its layers nor its "
    "first ops tell): if it was trained on scaled pixels, pass preprocess=MODE "
    f"({_SCALING_MODES})")


#: The note for a network with random weights (``keras:NAME`` with ``weights='none'``).
RANDOM_WEIGHTS_NOTE = ("random weights (weights='none'): maps show the edges a random network "
                       "responds to, not an explanation")
