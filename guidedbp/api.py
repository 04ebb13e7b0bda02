"""The package's explainer: the engine's, plus model specs, preprocessing and class names.

:class:`guidedbp.engine.explainer.Explainer` takes a traceable model and images in
its input space, and knows nothing about files. This one also takes what
:func:`guidedbp.load_model` takes (a ``.keras``/``.h5`` path, a SavedModel folder,
``keras:NAME``, ``demo`` or a :class:`~guidedbp.models.loading.LoadedModel`), places
the integrated-gradients baselines with the model's own preprocessing, and accepts
class names as targets (for :class:`~guidedbp.targets.Region` too), image files as
:class:`~guidedbp.targets.Similarity` references, and explains a two-tower model's image
tower for :class:`~guidedbp.targets.Text` prompts, which its text tower embeds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from guidedbp.engine import explainer as engine
from guidedbp.engine.targets.box_target import Detection
from guidedbp.engine.targets.kinds import Region, Similarity, as_target
from guidedbp.engine.targets.text import Text
from guidedbp.errors import ArgumentError
from guidedbp.io.images import decode_image
from guidedbp.models.labels import resolve_class
from guidedbp.models.loading import LoadedModel, load_model
from guidedbp.models.preprocess import PREPROCESS_MODES, prepare
from guidedbp.models.preprocess import preprocess as pixels_to
from guidedbp.models.two_tower import TextTower, is_two_tower

__all__ = ["Explainer", "saliency"]


class Explainer(engine.Explainer):
    """Saliency maps for a Keras image classifier, from a model or a model spec.

    Everything :class:`guidedbp.engine.explainer.Explainer` does (see there for the
    methods and their options), and:

    - ``images`` are what the model itself takes, as there: raw 0-255 pixels, for models
      with a Rescaling layer inside (the bundled models; a keras-hub preset folder with an
      image converter, which becomes such a layer); otherwise preprocessed as the model
      was trained: :func:`guidedbp.models.preprocess.preprocess` with the mode
      :attr:`~guidedbp.models.loading.LoadedModel.preprocess` names (a ``keras:NAME``
      model's ``"caffe"``, ``"tf"`` or ``"torch"``). :func:`~guidedbp.explain_image` and
      :func:`~guidedbp.explain_files` read files and preprocess them as the command line
      does;

    - ``model`` may be any spec :func:`guidedbp.load_model` takes, or a
      :class:`~guidedbp.models.loading.LoadedModel` (kept as :attr:`loaded`);
    - black and white integrated-gradients baselines are the model's preprocessing
      of black and white pixels (``preprocess=MODE`` overrides the model's own);
    - ``target`` may name classes (``"tabby"``, or the unique start of a name) when
      the model has class names, also a :class:`~guidedbp.targets.Region`'s or a
      :class:`~guidedbp.targets.Detection`'s class;
    - a :class:`~guidedbp.targets.Similarity` reference may be an image file, decoded
      and preprocessed like the inputs (stretched to the model's size);
    - a two-tower model (a keras-hub ``CLIPBackbone`` or ``SigLIPBackbone``, in memory,
      as a file or as a preset folder) is explained through its image tower
      (``images -> image embedding``), and a :class:`~guidedbp.targets.Text` target's
      prompts are embedded by its text tower, tokenized by the tokenizer of its preset
      folder or task, or by ``tokenizer=`` (a keras-hub tokenizer or preprocessor, a
      preset folder, or a callable ``prompts -> token ids``).

    >>> explainer = Explainer("demo", method=("guided", "gradcam"))  # doctest: +SKIP
    >>> explainer.explain(images, target="circle").by_method.keys()  # doctest: +SKIP
    dict_keys(['guided', 'gradcam'])
    """

    def __init__(self, model, method: str | Sequence[str] = "guided",
                 batch_size: int | None = None, *, preprocess: str | None = None,
                 tokenizer=None, **options):
        loaded, in_memory = None, False
        if isinstance(model, (str, os.PathLike, LoadedModel)):
            loaded = load_model(model)
            preprocess = preprocess or loaded.preprocess
            model = loaded.model
        elif is_two_tower(model):  # fed in its own input space, as any keras.Model
            loaded, in_memory = load_model(model), True
            model = loaded.model
        if tokenizer is not None:
            if loaded is None or loaded.text is None:
                raise ArgumentError("tokenizer= applies to a two-tower model (a keras-hub "
                                    "CLIPBackbone or SigLIPBackbone): this model has no text "
                                    "tower")
            loaded = replace(loaded, text=loaded.text.with_tokenizer(tokenizer))
        self.loaded: LoadedModel | None = loaded
        #: The text tower that embeds :class:`~guidedbp.targets.Text` prompts, or ``None``.
        self.text: TextTower | None = None if loaded is None else loaded.text
        if preprocess is not None:
            if preprocess not in PREPROCESS_MODES:
                raise ArgumentError(f"preprocess={preprocess!r} is not one of "
                                    f"{', '.join(PREPROCESS_MODES)}")
            options.setdefault("pixel_to_input", functools.partial(pixels_to, mode=preprocess))
        self._preprocess = preprocess
        if loaded is not None and not in_memory:  # random weights, unscaled pixels
            options.setdefault("caveats", loaded.caveats_for(preprocess))
        super().__init__(model, method, batch_size, **options)

    @property
    def labels(self) -> list[str] | None:
        """Class names, where the model has them."""
        return None if self.loaded is None else self.loaded.labels

    def explain(self, images, target=None) -> engine.Explanation:
        """Every method's maps; ``target`` may also be a class name or a list of them."""
        if as_target(target) is not None:
            return super().explain(images, self._resolved(target, np.asarray(images).shape[1:]))
        self._refuse_classes("target=None" if target is None else "a class target")
        if _names_a_class(target):
            images = np.asarray(images)
            num_classes = self.report_for(images.shape[1:]).num_classes
            if isinstance(target, str):
                target = resolve_class(target, self.labels, num_classes)
            else:
                target = [resolve_class(t if isinstance(t, str) else int(t), self.labels,
                                        num_classes) for t in target]
        return super().explain(images, target)

    def explain_targets(self, images, targets) -> list[engine.Explanation]:
        """Several targets from one forward pass; class names, region class names and
        reference image files resolved as :meth:`explain` does."""
        shape = np.asarray(images).shape[1:]
        if isinstance(targets, (list, tuple)):
            classes = [target for target in targets if as_target(target) is None]
            if classes:
                self._refuse_classes("a class target")
        return super().explain_targets(images, [
            self._resolved(target, shape) if as_target(target) is not None
            else (self._class_index(target) if isinstance(target, str) else target)
            for target in targets])

    def explain_top_k(self, images, k: int) -> list[engine.Explanation]:
        """Each image's ``k`` most probable classes (see the engine's)."""
        self._refuse_classes(f"explain_top_k(k={k!r})")
        return super().explain_top_k(images, k)

    def explain_classes(self, images, classes) -> list[engine.Explanation]:
        """The same ``classes`` for every image (see the engine's)."""
        self._refuse_classes("explain_classes")
        return super().explain_classes(images, classes)

    def _refuse_classes(self, what: str) -> None:
        """Refuse a class of a two-tower model: its image tower gives an embedding."""
        if self.text is not None:
            raise ArgumentError(f"{what}: the model is a two-tower model (CLIP, SigLIP): its "
                                "image tower gives an embedding, not classes: explain "
                                "Text(prompt) (or Similarity, Unit, Score)")

    def _class_index(self, name: str) -> int:
        """A class name (or digits) as an index into the labels; the engine checks the
        index against the output it reads."""
        return resolve_class(name, self.labels, len(self.labels) if self.labels else 2**31 - 1)

    def _resolved(self, target, image_shape: tuple):
        """``target`` with a region's class name as its index and a reference file as
        the preprocessed image."""
        target = as_target(target)
        if isinstance(target, Region) and isinstance(target.index, str):
            target = replace(target, index=self._class_index(target.index),
                             name=target.name or target.index)
        if isinstance(target, Detection) and isinstance(target.class_label, str):
            target = target.with_label(self._class_index(target.class_label),
                                       target.class_label)
        if isinstance(target, Text) and target.vectors is None:
            target = self.embedded(target)
        if isinstance(target, Similarity) and isinstance(target.reference, (str, os.PathLike)):
            target = replace(target, reference=self.reference_image(target.reference,
                                                                    image_shape))
        return target

    def embedded(self, target: Text) -> Text:
        """``target`` with its prompts embedded by the model's text tower (each prompt
        once per explainer) and the model's logit scale (:data:`~guidedbp.engine.targets.kinds.
        DEFAULT_TEXT_SCALE` where it has none).

        Raises:
            ArgumentError: A model with no text tower or no tokenizer, a prompt longer
                than the text encoder reads, in one line.
        """
        if self.text is None:
            name = getattr(self.model, "name", None) or "the model"
            raise ArgumentError(f"{target.short_label}: {name} has no text tower: a Text target "
                                "needs a two-tower model (a keras-hub CLIPBackbone or "
                                "SigLIPBackbone)")
        vectors = np.stack([self.text.vector(group) for group in target.groups])
        return target.embedded(vectors, self.text.logit_scale)

    def reference_image(self, path, image_shape: tuple) -> np.ndarray:
        """An image file as the model takes it: decoded, stretched to the model's size
        (the images' ``image_shape`` where the model's is free), preprocessed."""
        channels = image_shape[-1] if len(image_shape) == 3 else 3
        image = decode_image(os.fspath(path), channels=channels)
        declared = self.image_shape
        shape = tuple(declared) if declared is not None else tuple(image_shape)
        size = tuple(image_shape[:2]) if None in shape[:2] else None
        _, _, model_input = prepare(image, shape, self._preprocess or "none", size, "stretch")
        return model_input


def _names_a_class(target) -> bool:
    if isinstance(target, str):
        return True
    return isinstance(target, (list, tuple)) and any(isinstance(t, str) for t in target)


def saliency(model, images, target=None, method: str = "guided", **options) -> np.ndarray:
    """One-shot saliency maps: ``Explainer(model, method, **options)(images, target)``.

    >>> import numpy as np, keras
    >>> model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
    ...                           keras.layers.Dense(3, activation="softmax")])
    >>> saliency(model, np.zeros((1, 4, 4, 1), np.float32), target=0).dtype
    dtype('float32')
    """
    return Explainer(model, method=method, **options)(images, target)
