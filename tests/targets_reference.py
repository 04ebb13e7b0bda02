"""An independent reference for the targets of issue 21: each score differentiated by hand.

The test models are built by functions of the ReLU they use. The reference builds the
same architecture again with a ReLU whose backward pass is the rule's (a
``tf.custom_gradient``), copies the weights layer by layer (by name), and returns every
tensor a score reads: each head's output and, behind a softmax, its logits. The scores
are written out here on those tensors (a unit, a class logit, a region's logit sum, a
cosine similarity, a function of the output) and differentiated with
``tf.GradientTape``. The rules, at every ReLU ``y = relu(x)`` with ``g`` arriving at ``y``:

* ``vanilla``:   ``g * (x > 0)`` (the true gradient);
* ``guided``:    ``g * (x > 0) * (g > 0)``;
* ``deconvnet``: ``max(g, 0)`` (the forward mask ignored).

SmoothGrad, integrated gradients and occlusion are written out too, from their papers'
definitions and the engine's documented noise, path and patch conventions. Nothing here
imports guidedbp.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

RULES = ("vanilla", "guided", "deconvnet")


class RuleSwitch:
    """The rule the reference ReLUs apply, read when each (eager) backward pass runs."""

    def __init__(self, name: str = "vanilla"):
        self.name = name


def rule_relu(switch: RuleSwitch) -> Callable:
    """``relu`` whose backward pass applies ``switch.name``'s rule."""

    @tf.custom_gradient
    def relu(x):
        def backward(g):
            if switch.name == "deconvnet":
                return tf.nn.relu(g)
            mask = tf.cast(x > 0, g.dtype)
            if switch.name == "guided":
                return g * mask * tf.cast(g > 0, g.dtype)
            return g * mask

        return tf.nn.relu(x), backward

    return relu


# -- the test models, by the ReLU they use ------------------------------------------------


@dataclass(frozen=True)
class Graph:
    """A built architecture: its input, its heads' outputs by name, and the logits behind
    the softmax heads by the head's name."""

    inputs: keras.KerasTensor
    heads: dict[str, keras.KerasTensor]
    logits: dict[str, keras.KerasTensor]


def _conv(filters: int, seed: int, relu, name: str, **kwargs) -> keras.layers.Conv2D:
    return keras.layers.Conv2D(
        filters, 3, activation=relu, name=name,
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        bias_initializer=keras.initializers.RandomNormal(stddev=0.2, seed=seed + 100), **kwargs)


def _dense(units: int, seed: int, name: str, relu=None) -> keras.layers.Dense:
    return keras.layers.Dense(
        units, activation=relu, name=name,
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        bias_initializer=keras.initializers.RandomNormal(stddev=0.2, seed=seed + 100))


def _trunk(inputs, relu) -> keras.KerasTensor:
    """12x12x3 -> conv 3x3 (4) -> conv 3x3 stride 2 (6) -> 4x4x6, flattened."""
    hidden = _conv(4, 1, relu, "conv1")(inputs)
    hidden = _conv(6, 2, relu, "conv2", strides=2)(hidden)
    return keras.layers.Flatten(name="flatten")(hidden)


def regressor_graph(relu="relu") -> Graph:
    """12x12x3 -> two ReLU convolutions -> Dense(3) linear: output ``(B, 3)``."""
    inputs = keras.Input((12, 12, 3))
    output = _dense(3, 3, "regression")(_trunk(inputs, relu))
    return Graph(inputs, {"regression": output}, {"regression": output})


def two_head_graph(relu="relu") -> Graph:
    """12x12x3 -> trunk -> Dense(8, relu) -> heads ``label`` (Dense(4) then a softmax
    ``Activation``) and ``box`` (Dense(4), linear)."""
    inputs = keras.Input((12, 12, 3))
    shared = _dense(8, 4, "shared", relu)(_trunk(inputs, relu))
    logits = _dense(4, 5, "label_logits")(shared)
    label = keras.layers.Activation("softmax", name="label")(logits)
    box = _dense(4, 6, "box")(shared)
    return Graph(inputs, {"label": label, "box": box}, {"label": logits, "box": box})


SEGMENTATION_SIZE = 16
SEGMENTATION_CLASSES = 3


def segmentation_graph(relu="relu") -> Graph:
    """16x16x3 -> three 3x3 convolutions, stride 1, same padding (ReLU, ReLU, linear:
    the logits) -> softmax: output ``(B, 16, 16, 3)``; a logit's receptive field is the
    7x7 square around its pixel."""
    inputs = keras.Input((SEGMENTATION_SIZE, SEGMENTATION_SIZE, 3))
    hidden = _conv(4, 7, relu, "seg1", padding="same")(inputs)
    hidden = _conv(4, 8, relu, "seg2", padding="same")(hidden)
    logits = _conv(SEGMENTATION_CLASSES, 9, None, "seg_logits", padding="same")(hidden)
    output = keras.layers.Activation("softmax", name="segmentation")(logits)
    return Graph(inputs, {"segmentation": output}, {"segmentation": logits})


def embedding_graph(relu="relu") -> Graph:
    """12x12x3 -> trunk -> Dense(8) -> L2 normalisation: an ``(B, 8)`` embedding."""
    inputs = keras.Input((12, 12, 3))
    raw = _dense(8, 10, "embed")(_trunk(inputs, relu))
    output = keras.layers.UnitNormalization(name="embedding")(raw)
    return Graph(inputs, {"embedding": output}, {"embedding": output})


DETECTOR_SIZE, DETECTOR_CELLS, DETECTOR_CLASSES = 16, 4, 3


class CellBoxes(keras.layers.Layer):
    """``(B, 16, 4)`` raw values -> one box per cell of a 4 x 4 grid of 4-pixel cells,
    corners ``(x0, y0, x1, y1)`` in input pixels: the cell's centre moved by ``1.5 *
    raw[:2]`` pixels, each half side ``2 * exp(raw[2:] / 4)``. No activation function, so
    that the rules meet the convolutions' ReLUs alone."""

    def call(self, raw):
        step = DETECTOR_SIZE // DETECTOR_CELLS
        rows, cols = np.mgrid[:DETECTOR_CELLS, :DETECTOR_CELLS] * step + step / 2
        centres = np.stack([cols.ravel(), rows.ravel()], axis=-1).astype(np.float32)
        centre = centres + 1.5 * raw[..., :2]
        half = 2.0 * keras.ops.exp(raw[..., 2:] / 4)
        return keras.ops.concatenate([centre - half, centre + half], axis=-1)


def _head(filters: int, seed: int, name: str) -> keras.layers.Conv2D:
    return keras.layers.Conv2D(
        filters, 1, name=name, kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        bias_initializer=keras.initializers.RandomNormal(stddev=0.2, seed=seed + 100))


def detector_graph(relu="relu") -> Graph:
    """16x16x3 -> three 3x3 ReLU convolutions, same padding, strides 1, 2, 2 (the last,
    ``det3``, 4x4x8: one cell per proposal; no pooling) -> per cell a 1x1 box head
    (:class:`CellBoxes`) and a 1x1 class head with a sigmoid: ``boxes`` ``(B, 16, 4)``,
    ``scores`` ``(B, 16, 3)``. A cell of ``det3`` sees input rows and columns ``4i - 1``
    to ``4i + 7`` (:func:`detector_reach`)."""
    inputs = keras.Input((DETECTOR_SIZE, DETECTOR_SIZE, 3))
    hidden = _conv(4, 21, relu, "det1", padding="same")(inputs)
    hidden = _conv(6, 22, relu, "det2", padding="same", strides=2)(hidden)
    hidden = _conv(8, 23, relu, "det3", padding="same", strides=2)(hidden)
    cells = DETECTOR_CELLS * DETECTOR_CELLS
    raw = keras.layers.Reshape((cells, 4), name="box_raw")(_head(4, 24, "box_head")(hidden))
    logits = keras.layers.Reshape((cells, DETECTOR_CLASSES), name="class_logits")(
        _head(DETECTOR_CLASSES, 25, "class_head")(hidden))
    boxes = CellBoxes(name="boxes")(raw)
    scores = keras.layers.Activation("sigmoid", name="scores")(logits)
    return Graph(inputs, {"boxes": boxes, "scores": scores}, {"boxes": boxes, "scores": logits})


def detector_reach(cell: int) -> tuple[slice, slice]:
    """The input rows and columns proposal ``cell`` of :func:`detector_graph` sees: TF's
    same padding pads a stride-2 layer after the last row only, so ``det3``'s row ``i``
    reads ``det2``'s ``2i..2i+2``, which read ``det1``'s ``4i..4i+6``, which read the
    input's ``4i-1..4i+7``."""
    row, column = divmod(cell, DETECTOR_CELLS)

    def reach(index: int) -> slice:
        return slice(max(4 * index - 1, 0), min(4 * index + 8, DETECTOR_SIZE))

    return reach(row), reach(column)


def model_of(graph: Graph, form: str = "single") -> keras.Model:
    """The model under test: one output (``"single"``), or its heads as a ``"list"`` or a
    ``"dict"``."""
    heads = graph.heads
    if form == "single":
        (output,) = heads.values()
    elif form == "list":
        output = list(heads.values())
    else:
        output = dict(heads)
    return keras.Model(graph.inputs, output)


class Reference:
    """The same architecture under a switchable rule, with the tested model's weights.

    Args:
        build: The graph builder the tested model was built with.
        model: The tested model (its weighted layers named as ``build`` names them).
    """

    def __init__(self, build: Callable[..., Graph], model: keras.Model):
        self.switch = RuleSwitch()
        graph = build(rule_relu(self.switch))
        self.heads = list(graph.heads)
        self.model = keras.Model(graph.inputs, {
            **{f"head/{name}": tensor for name, tensor in graph.heads.items()},
            **{f"logits/{name}": tensor for name, tensor in graph.logits.items()},
        })
        copied = 0
        for layer in self.model.layers:
            if layer.weights:
                layer.set_weights(model.get_layer(layer.name).get_weights())
                copied += 1
        assert copied == sum(1 for layer in model.layers if layer.weights), "weights not copied"

    def outputs(self, images) -> "Outputs":
        tensors = self.model(tf.convert_to_tensor(images, tf.float32), training=False)
        return Outputs({name: tensors[f"head/{name}"] for name in self.heads},
                       {name: tensors[f"logits/{name}"] for name in self.heads})

    def gradient(self, images, score: "ScoreFn", rule: str,
                 index: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``d score / d images`` under ``rule``, and the scores: float32 ``(N, ...)``,
        ``(N,)``. ``index`` names the image each row is a copy of (per-image target data)."""
        images = tf.convert_to_tensor(np.asarray(images, np.float32))
        index = np.arange(len(images)) if index is None else np.asarray(index)
        self.switch.name = rule
        with tf.GradientTape() as tape:
            tape.watch(images)
            scores = score(self.outputs(images), index)
            total = tf.reduce_sum(scores)
        maps = tape.gradient(total, images)
        return maps.numpy().astype(np.float32), scores.numpy().astype(np.float32)

    def maps(self, images, score: "ScoreFn", rules: Sequence[str] = RULES
             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Each rule's maps, and the scores."""
        maps = {}
        for rule in rules:
            maps[rule], scores = self.gradient(images, score, rule)
        return maps, scores

    def scores(self, images, score: "ScoreFn", index: np.ndarray | None = None) -> np.ndarray:
        """The scores alone, forward only: float64 ``(N,)``."""
        index = np.arange(len(images)) if index is None else np.asarray(index)
        return score(self.outputs(np.asarray(images, np.float32)), index).numpy().astype(
            np.float64)


@dataclass(frozen=True)
class Outputs:
    """One forward pass of the reference: each head's output and logits, by name."""

    heads: dict[str, tf.Tensor]
    logits: dict[str, tf.Tensor]


#: ``(outputs, image index of each row) -> (B,)`` scores.
ScoreFn = Callable[[Outputs, np.ndarray], tf.Tensor]


# -- the scores, written out ---------------------------------------------------------------


def unit(head: str, index) -> ScoreFn:
    """``output[:, index]``: a flat index over the non-batch axes, or a tuple."""

    def score(outputs: Outputs, rows: np.ndarray) -> tf.Tensor:
        output = outputs.heads[head]
        if isinstance(index, tuple):
            return output[(slice(None), *index)]
        return tf.reshape(output, (output.shape[0], -1))[:, index]

    return score


def class_logit(head: str, index: int) -> ScoreFn:
    """The logit behind the head's softmax."""
    return lambda outputs, rows: outputs.logits[head][:, index]


def resized_mask(mask, size: tuple[int, int], count: int) -> np.ndarray:
    """``(h, w)`` or ``(N, h, w)`` -> bool ``(count, H', W')``: nearest neighbour, nonzero."""
    mask = np.asarray(mask, np.float32)
    stack = np.broadcast_to(mask, (count, *mask.shape[-2:])) if mask.ndim == 2 else mask
    resized = tf.image.resize(stack[..., None], size, method="nearest").numpy()[..., 0]
    return resized != 0


def argmax_mask(reference: Reference, images, head: str, index: int) -> np.ndarray:
    """bool ``(N, H', W')``: the pixels whose argmax is ``index`` on the clean images."""
    output = reference.outputs(images).heads[head].numpy()
    return np.argmax(output, axis=-1) == index


def region(head: str, index: int, mask: np.ndarray) -> ScoreFn:
    """``sum over pixels of logits[..., index] * mask`` (``mask`` bool ``(N, H', W')``,
    the row's image's)."""

    def score(outputs: Outputs, rows: np.ndarray) -> tf.Tensor:
        weights = tf.constant(mask[rows].astype(np.float32))
        return tf.reduce_sum(outputs.logits[head][..., index] * weights, axis=(1, 2))

    return score


def similarity(head: str, embedding: np.ndarray) -> ScoreFn:
    """Cosine similarity of the flattened output with ``embedding``."""
    embedding = np.asarray(embedding, np.float64).ravel()
    unit_reference = tf.constant((embedding / np.linalg.norm(embedding)).astype(np.float32))

    def score(outputs: Outputs, rows: np.ndarray) -> tf.Tensor:
        output = outputs.heads[head]
        flat = tf.reshape(output, (output.shape[0], -1))
        return tf.reduce_sum(flat * unit_reference, axis=1) / tf.norm(flat, axis=1)

    return score


def of_heads(function: Callable) -> ScoreFn:
    """``function`` of the heads' outputs (a dict by name)."""
    return lambda outputs, rows: function(outputs.heads)


def detection(corners: np.ndarray, labels: np.ndarray, weight: float = 1.0,
              boxes: str = "boxes", scores: str = "scores") -> ScoreFn:
    """D-RISE's similarity ``max_j IoU(box, box_j) * p_j[label] ** weight`` over the
    proposals ``boxes`` (corners in pixels) and their class probabilities ``scores``;
    ``corners`` ``(N, 4)`` and ``labels`` ``(N,)`` the row's image's box and class.

    The overlap's corners are written ``max(a, b) = (a + b + |a - b|) / 2`` (``min``
    alike): where a proposal's side lies on the box's, the gradient splits evenly
    (TensorFlow's ``|0|' = 0``)."""
    corners = np.asarray(corners, np.float32)
    labels = np.asarray(labels)

    def high(a, b):
        return (a + b + tf.abs(a - b)) / 2

    def low(a, b):
        return (a + b - tf.abs(a - b)) / 2

    def score(outputs: Outputs, rows: np.ndarray) -> tf.Tensor:
        box = tf.constant(corners[rows])[:, None, :]
        found = outputs.heads[boxes]
        width = tf.nn.relu(low(box[..., 2], found[..., 2]) - high(box[..., 0], found[..., 0]))
        height = tf.nn.relu(low(box[..., 3], found[..., 3]) - high(box[..., 1], found[..., 1]))
        inter = width * height
        union = ((box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])
                 + (found[..., 2] - found[..., 0]) * (found[..., 3] - found[..., 1]) - inter)
        chosen = tf.gather(outputs.heads[scores], tf.constant(labels[rows], tf.int32), axis=2,
                           batch_dims=1)
        weighted = tf.ones_like(chosen) if weight == 0 else chosen ** weight
        return tf.reduce_max(inter / union * weighted, axis=1)

    return score


def overlaps(box: np.ndarray, found: np.ndarray) -> np.ndarray:
    """float64 ``(P,)``: the IoU of one ``box`` ``(4,)`` with proposals ``(P, 4)``."""
    box, found = np.asarray(box, np.float64), np.asarray(found, np.float64)
    width = np.clip(np.minimum(box[2], found[:, 2]) - np.maximum(box[0], found[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], found[:, 3]) - np.maximum(box[1], found[:, 1]), 0, None)
    inter = width * height
    union = ((box[2] - box[0]) * (box[3] - box[1])
             + (found[:, 2] - found[:, 0]) * (found[:, 3] - found[:, 1]) - inter)
    return inter / union


def best_label(box: np.ndarray, found: np.ndarray, probabilities: np.ndarray) -> int:
    """The class a Detection with no label takes on one image: that of the proposal best
    matching ``box`` by ``IoU * max_c p_c``."""
    best = int(np.argmax(overlaps(box, found) * probabilities.max(axis=1)))
    return int(np.argmax(probabilities[best]))


def best_match(box: np.ndarray, label: int, found: np.ndarray, probabilities: np.ndarray,
               weight: float = 1.0) -> tuple[int, float, float]:
    """The proposal ``box`` matches for ``label`` on one image: its row, IoU, class score."""
    iou = overlaps(box, found)
    chosen = probabilities[:, label].astype(np.float64)
    best = int(np.argmax(iou * (chosen ** weight if weight else 1.0)))
    return best, float(iou[best]), float(chosen[best])


# -- averaging and perturbation methods, written out ---------------------------------------


def smoothgrad(reference: Reference, images, score: ScoreFn, rule: str, samples: int,
               noise: float, seed: int) -> np.ndarray:
    """The mean map over ``samples`` noisy copies of each image: image ``i``'s noise drawn
    from ``numpy.random.default_rng([seed, i])``, standard deviation ``noise * (max -
    min)`` of the image."""
    means = []
    for i, image in enumerate(np.asarray(images, np.float32)):
        rng = np.random.default_rng([seed, i])
        sigma = noise * float(image.max() - image.min())
        copies = (image[None] + rng.normal(0.0, sigma, (samples, *image.shape))).astype(
            np.float32)
        maps, _ = reference.gradient(copies, score, rule, index=np.full(samples, i))
        means.append(maps.astype(np.float64).mean(axis=0))
    return np.stack(means).astype(np.float32)


def integrated_gradients(reference: Reference, images, score: ScoreFn, baseline: np.ndarray,
                         steps: int) -> np.ndarray:
    """``(x - x0) * mean_k grad(x0 + a_k (x - x0))``, ``a_k = (k + 1/2) / steps``: the
    midpoint Riemann sum of the plain gradient."""
    images = np.asarray(images, np.float32)
    result = []
    for i, image in enumerate(images):
        difference = image - baseline
        total = np.zeros(image.shape, np.float64)
        for k in range(steps):
            point = (baseline + np.float32((k + 0.5) / steps) * difference)[None]
            maps, _ = reference.gradient(point, score, "vanilla", index=np.array([i]))
            total += maps[0]
        result.append(difference * total / steps)
    return np.stack(result).astype(np.float32)


def occlusion(reference: Reference, images, score: ScoreFn, patch: int, stride: int,
              fill: float) -> np.ndarray:
    """Each pixel's mean score drop over the patch positions that cover it: a ``patch``
    square of ``fill`` stepped by ``stride`` from the top-left until the image is covered
    (the last positions may be cut by the edge). ``(N, H, W, 1)``."""
    images = np.asarray(images, np.float32)
    count, height, width = images.shape[:3]

    def starts(size: int) -> list[int]:
        positions = [0]
        while positions[-1] + patch < size:
            positions.append(positions[-1] + stride)
        return positions

    corners = [(top, left) for top in starts(height) for left in starts(width)]
    result = np.zeros((count, height, width, 1), np.float32)
    for i, image in enumerate(images):
        copies = [image]
        for top, left in corners:
            occluded = image.copy()
            occluded[top:top + patch, left:left + patch] = fill
            copies.append(occluded)
        scores = reference.scores(np.stack(copies), score, index=np.full(len(copies), i))
        drops = scores[0] - scores[1:]
        for row in range(height):
            for column in range(width):
                covering = [drop for drop, (top, left) in zip(drops, corners)
                            if top <= row < top + patch and left <= column < left + patch]
                result[i, row, column, 0] = np.mean(covering)
    return result
