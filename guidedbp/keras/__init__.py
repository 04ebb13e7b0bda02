"""Watch saliency maps change while a Keras model trains: a callback that logs them to
TensorBoard (and, optionally, as PNG files) every few epochs.

:class:`SaliencyCallback` explains a fixed set of images at the end of the chosen
epochs and writes each method's map of each image as a TensorBoard image: a panel as
``guidedbp`` draws them (:func:`guidedbp.render.render_panel`): the map at ``tile``
pixels, titled with its method, the class and its probability above it, the colorbar
under it. It traces the
engine's function once, at the start of training, and reuses it: the traced function
reads the model's variables by reference, so every epoch's maps come from that
epoch's weights at the cost of one explain pass. Drawing, encoding and writing the
pictures happen on a background thread while the next epoch trains.

The summaries are written with ``tf.summary.write`` in the format of TensorBoard's
image plugin (``tensorboard/plugins/image/summary_v2.py``: a string tensor
``[width, height, png]`` and plugin ``"images"`` metadata), so training does not need
the ``tensorboard`` package installed; only viewing them does
(:mod:`guidedbp.keras.summaries`).

A client of the engine, the renderer and the writer, like the CLI. Importing this
module imports Keras and TensorFlow.

>>> import numpy as np, keras
>>> from guidedbp.keras import SaliencyCallback
>>> model = keras.Sequential([
...     keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3, activation="relu"),
...     keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3, activation="softmax")])
>>> model.compile("adam", "sparse_categorical_crossentropy")
>>> images = np.random.default_rng(0).normal(size=(4, 8, 8, 1)).astype("float32")
>>> import tempfile; log_dir = tempfile.mkdtemp()
>>> callback = SaliencyCallback(images[:2], "guided", log_dir=log_dir)
>>> _ = model.fit(images, np.arange(4) % 3, epochs=2, verbose=0, callbacks=[callback])
>>> callback.explainer.trace_count  # one trace for both epochs
1
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import keras
import numpy as np

from guidedbp._text import layer_note, method_at_layer
from guidedbp.engine import as_images
from guidedbp.engine.explainer import Explainer, Explanation
from guidedbp.engine.methods import registry
from guidedbp.engine.options import MethodOptions
from guidedbp.errors import ArgumentError
from guidedbp.keras.summaries import IMAGE_PLUGIN, StepWriter, describe_maps
from guidedbp.render import (
    DEFAULT_ALPHA,
    DEFAULT_CLIP,
    DEFAULT_COLORMAP,
    DEFAULT_TILE,
    RENDERS,
    render_column,
    render_panel,
)
from guidedbp.render import render as render_map
from guidedbp.render.options import RenderOptions

__all__ = ["DEFAULT_RUN", "IMAGE_PLUGIN", "SaliencyCallback"]

#: The subfolder of ``log_dir`` the callback writes into: TensorBoard's run name.
DEFAULT_RUN = "guidedbp"


class SaliencyCallback(keras.callbacks.Callback):
    """Log saliency maps of fixed images to TensorBoard during ``model.fit``.

    At the end of every ``every_n_epochs``-th epoch (epochs ``0, n, 2n, ...``, counted
    from 0 as Keras passes them, the rule of ``keras.callbacks.TensorBoard``'s
    ``histogram_freq``) the callback explains ``images`` with each method and writes
    one TensorBoard image per method and image:

    - tag ``<method>/image-<i>`` (``guided/image-00``, ``gradcam/image-01``, ...): the
      Images tab groups the cards by method, one card per image, each with a step
      slider over the epochs;
    - tag ``picture/image-<i>``: the picture itself (when ``pictures`` is given),
      once, at the first logged epoch;
    - step: the epoch index, as ``keras.callbacks.TensorBoard`` logs its epoch
      scalars, so with ``log_dir`` shared with that callback the maps line up with
      the loss curves;
    - run: the subfolder ``log_dir/<run>`` (``log_dir/guidedbp``), beside the
      TensorBoard callback's ``train`` and ``validation`` runs.

    TensorBoard shows at most 10 steps per image tag unless started with
    ``--samples_per_plugin images=100`` (or more); the event files hold every step.

    The engine is built and traced once, at the start of training (so a bad class or
    image shape fails before the first epoch, not after it), and reused by every
    epoch and every later ``fit`` of the same model: the traced function reads the
    model's current weights on each call.

    Args:
        images: The model's input, numeric ``(N, H, W, C)``: already preprocessed the
            way the model takes it (for a model that rescales inside, raw pixels).
        methods: A method name of :data:`guidedbp.METHODS`, a comma list, or a
            sequence of names; they share one forward pass.
        log_dir: TensorBoard's log folder; ``None`` writes PNGs only (then give
            ``png_dir``).
        every_n_epochs: Log at epochs ``e`` (0-based) with ``e % every_n_epochs == 0``.
        classes: ``None`` to explain each image's top-1 class at that epoch, one
            class index for every image, or one class index per image.
        pictures: ``uint8`` ``(N, H, W, 3)``, ``(N, H, W, 1)`` or ``(N, H, W)``: the
            images as pictures, for the ``overlay`` render and the ``picture`` tags.
        render: One of :data:`guidedbp.render.RENDERS` for every method, or ``None``:
            ``color`` for signed maps (gradients), ``overlay`` for non-negative maps
            (Grad-CAM) when ``pictures`` is given, else ``heatmap``.
        tile: Pixels on the longer side of each map in its panel (a 64-pixel map is
            enlarged with sharp, nearest-neighbour pixels): the panel adds the caption
            ``"<class> p=<probability>"``, the method as title and the colorbar.
            ``None``: the bare render at the model's resolution, nothing on it.
        labels: Class names, by index, for the captions (``"circle (class 0)"``);
            ``None``: class indices only.
        png_dir: Also save each logged picture as
            ``png_dir/step-<epoch>/image-<i>.<method>.<render>.png`` (``step-0003``
            holds epoch index 3, TensorBoard's step 3), atomically.
        run: The subfolder of ``log_dir`` to write into; ``None`` writes into
            ``log_dir`` itself.
        cmap: Colormap of ``heatmap``, ``overlay`` and ``panel``.
        clip: Magnitude percentile shown as full intensity.
        alpha: Heatmap weight of the overlay.
        batch_size: Images per forward/backward pass of the engine.
        **options: The engine's method options by their flat names (``layer``,
            ``smooth``, ``seed``, ``steps``, ...) and ``pixel_to_input``: see
            :class:`guidedbp.engine.explainer.Explainer`.

    Raises:
        ValueError: (:class:`~guidedbp.errors.ArgumentError`) For a bad argument,
            naming it (a method that explains detections alone, ``drise``, too);
            at the start of training, for a class out of range or images the model
            cannot take.

    Attributes:
        explainer: The engine :class:`~guidedbp.engine.explainer.Explainer`, once
            training has started (``explainer.trace_count`` counts its traces).
        last: The :class:`~guidedbp.engine.explainer.Explanation` of the newest logged
            epoch, or ``None``.

    >>> SaliencyCallback(np.zeros((8, 8, 3)), "guided")
    Traceback (most recent call last):
    ...
    guidedbp.errors.ArgumentError: images must have shape (N, H, W, C), got (8, 8, 3) \
(add a batch axis: images[None])
    """

    def __init__(
        self,
        images,
        methods: str | Sequence[str] = ("guided",),
        log_dir: str | os.PathLike | None = "logs",
        *,
        every_n_epochs: int = 1,
        classes: int | Sequence[int] | None = None,
        pictures=None,
        render: str | None = None,
        tile: int | None = DEFAULT_TILE,
        labels: Sequence[str] | None = None,
        png_dir: str | os.PathLike | None = None,
        run: str | None = DEFAULT_RUN,
        cmap: str = DEFAULT_COLORMAP,
        clip: float = DEFAULT_CLIP,
        alpha: float = DEFAULT_ALPHA,
        batch_size: int | None = None,
        **options,
    ):
        super().__init__()
        self.images = as_images(images)
        count = len(self.images)
        self.methods = _as_methods(methods)
        self.every_n_epochs = _as_every(every_n_epochs)
        self.classes = _as_classes(classes, count)
        self.pictures = _as_pictures(pictures, self.images.shape)
        self.renders = _as_renders(render, self.methods, self.pictures is not None)
        # RenderOptions checks the tile's range (None: no panel).
        self.style = RenderOptions(cmap=cmap, clip=clip, alpha=alpha,
                                   tile=DEFAULT_TILE if tile is None else tile).style
        self.tile = tile
        self.labels = _as_labels(labels)
        if log_dir is None and png_dir is None:
            raise ArgumentError("log_dir=None and png_dir=None: nothing to write")
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        if self.log_dir is not None and run:
            self.log_dir = os.path.join(self.log_dir, run)
        self.png_dir = None if png_dir is None else os.fspath(png_dir)
        self._pixel_to_input = options.pop("pixel_to_input", None)
        self._options = MethodOptions.of(None, batch_size=batch_size, **options)
        self._steps = StepWriter(self.log_dir, self.png_dir, count, self.pictures, self.renders,
                                 {name: describe_maps(name, self.renders[name], tile,
                                                      self.classes is not None)
                                  for name in self.methods})
        self.explainer: Explainer | None = None
        self._layers: dict[str, str] = {}  # each class activation map's layer, by method
        self.last: Explanation | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    # -- Keras hooks ------------------------------------------------------------------------

    def on_train_begin(self, logs=None) -> None:
        self._prepare()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if epoch % self.every_n_epochs == 0:
            self.log(epoch)

    def on_train_end(self, logs=None) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the last pictures and close the event file (the end of training does;
        :meth:`log` opens a new one)."""
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            self._steps.close()

    # -- logging ----------------------------------------------------------------------------

    def _prepare(self) -> Explainer:
        """The explainer of the callback's model, built and traced once per model."""
        if self.model is None:
            raise ArgumentError("the callback has no model yet: pass it to model.fit, or "
                                "call set_model(model) first")
        if self.explainer is None or self.explainer.model is not self.model:
            if keras.backend.backend() != "tensorflow":
                raise ArgumentError(f"guidedbp needs Keras' tensorflow backend, got "
                                    f"{keras.backend.backend()!r}")
            explainer = Explainer(self.model, self.methods, options=self._options,
                                  pixel_to_input=self._pixel_to_input)
            # Trace now: a bad shape or class fails before the first epoch.
            report = explainer.report_for(self.images.shape[1:])
            num_classes = report.num_classes
            if self.classes is not None and np.any(self.classes >= num_classes):
                bad = int(self.classes[self.classes >= num_classes][0])
                raise ArgumentError(f"classes: class {bad} is out of range: the model has "
                                    f"{num_classes} classes (0..{num_classes - 1})")
            self.explainer, self._layers = explainer, dict(report.cam_layers)
        return self.explainer

    def log(self, step: int) -> Explanation:
        """Explain the images with the model's current weights and write the pictures at
        ``step``. The epoch hook calls it; call it yourself to log outside ``fit``
        (after ``set_model(model)`` when the callback has not been to ``fit`` yet).

        The maps are computed here, from the weights of this moment; drawing, encoding
        and writing them happen on a background thread while training goes on (one
        epoch's pictures at a time: the next :meth:`log` waits for the previous one,
        and :meth:`close`, at the end of training, for the last).

        Returns:
            The explanation the pictures are drawn from.

        Raises:
            ValueError: (:class:`~guidedbp.errors.ArgumentError`) Without a model, or
                when the first trace finds a class out of range or images the model
                cannot take.
            OSError: When the previous epoch's pictures could not be written.
        """
        explanation = self._prepare().explain(self.images, self.classes)
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="guidedbp-callback")
        self._pending = self._pool.submit(self._publish, step, explanation)
        self.last = explanation
        return explanation

    def wait(self) -> None:
        """Wait until the pictures of every logged step are written; re-raise a failure."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _publish(self, step: int, explanation: Explanation) -> None:
        """Draw one step's pictures and write them to TensorBoard and ``png_dir``."""
        self._steps.write(step, self.draw(explanation))

    def draw(self, explanation: Explanation) -> dict[tuple[str, int], np.ndarray]:
        """The ``uint8`` picture of each method's map of each image, by ``(method, index)``:
        a one-column :func:`guidedbp.render.render_panel` of the render (titled with the
        method, captioned with :meth:`caption` and a class activation map's layer, with
        its colorbar) at ``tile`` pixels; the ``panel`` render's own panel; or, with
        ``tile=None``, the bare
        :func:`guidedbp.render.render` with this callback's render and style."""
        drawn = {}
        for name in self.methods:
            drawing = self.renders[name]
            for index, saliency in enumerate(explanation.by_method[name]):
                picture = None if self.pictures is None else self.pictures[index]
                if self.tile is None:
                    drawn[name, index] = render_map(drawing, saliency, picture, **self.style)
                    continue
                caption = self.caption(explanation, index)
                if drawing == "panel":
                    drawn[name, index] = render_map(
                        drawing, saliency, picture,
                        caption=f"{method_at_layer(name, self._layers)}: {caption}",
                        tile=self.tile, **self.style)
                else:
                    column = render_column(drawing, saliency, picture, title=name,
                                           **self.style)
                    drawn[name, index] = render_panel(
                        [column], caption=caption + layer_note((name,), self._layers),
                        tile=self.tile)
        return drawn

    def caption(self, explanation: Explanation, index: int) -> str:
        """``"circle (class 0) p=0.998"`` (``"class 0 p=0.998"`` without ``labels``): the
        class image ``index``'s maps explain and its probability, as panels say it."""
        target = int(explanation.targets[index])
        label = self.labels[target] if self.labels and 0 <= target < len(self.labels) \
            else None
        named_class = f"{label} (class {target})" if label else f"class {target}"
        return f"{named_class} p={float(explanation.probabilities[index]):.3f}"


# -- helpers ----------------------------------------------------------------------------------


def _default_render(name: str, has_pictures: bool) -> str:
    if registry.method(name).signed:
        return "color"
    return "overlay" if has_pictures else "heatmap"


def _as_methods(methods) -> tuple[str, ...]:
    names = registry.as_methods(methods)
    bound = [name for name in names if registry.method(name).target is not None]
    if bound:  # refused now, not after the first epoch's training
        short = registry.method(bound[0]).title.split(":")[0]
        raise ArgumentError(f"methods={bound[0]!r} ({short}) explains a detector's "
                            "detections alone: SaliencyCallback explains classes")
    return names


def _as_every(every_n_epochs) -> int:
    if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, (int, np.integer)) \
            or every_n_epochs < 1:
        raise ArgumentError(f"every_n_epochs={every_n_epochs!r} must be an integer >= 1")
    return int(every_n_epochs)


def _as_renders(render: str | None, methods: tuple[str, ...], has_pictures: bool
                ) -> dict[str, str]:
    """Each method's render: ``render`` for all, or each one's default."""
    if render is not None and render not in RENDERS:
        raise ArgumentError(f"render={render!r} is not one of {', '.join(RENDERS)}")
    if render == "overlay" and not has_pictures:
        raise ArgumentError("render='overlay' draws on the pictures: give pictures=")
    return {name: render or _default_render(name, has_pictures) for name in methods}


def _as_classes(classes, count: int) -> np.ndarray | None:
    if classes is None:
        return None
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        array = np.full(count, int(classes), np.int64)
    else:
        array = np.asarray(classes)
        if array.ndim != 1 or array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
            raise ArgumentError(
                f"classes={classes!r} must be None, a class index or one index per image")
        if len(array) != count:
            raise ArgumentError(f"classes has {len(array)} classes for {count} images")
    if np.any(array < 0):
        raise ArgumentError(f"classes={classes!r}: class indices must be >= 0")
    return array.astype(np.int32)


def _as_labels(labels) -> tuple[str, ...] | None:
    if labels is None:
        return None
    if isinstance(labels, np.ndarray):
        labels = labels.tolist()
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence) or not all(
            isinstance(label, str) for label in labels):
        raise ArgumentError(f"labels={labels!r:.60} must be a sequence of class names "
                            "(strings), or None")
    return tuple(labels)


def _as_pictures(pictures, image_shape: tuple) -> np.ndarray | None:
    if pictures is None:
        return None
    array = np.asarray(pictures)
    if array.dtype != np.uint8:
        raise ArgumentError(f"pictures must be uint8, got dtype {array.dtype}")
    if array.ndim == 3:
        array = array[..., None]
    if array.ndim != 4 or array.shape[-1] not in (1, 3) or array.shape[:3] != image_shape[:3]:
        raise ArgumentError(
            f"pictures must have shape {image_shape[:3]} plus 1 or 3 channels, one per "
            f"image, got {np.shape(pictures)}")
    return array
