"""A detector's proposals as a :class:`~guidedbp.engine.targets.Detection` reads them.

:func:`proposals` turns a detector's raw output, inside the trace, into every proposal's
box ``(B, N, 4)`` as corners ``(x0, y0, x1, y1)`` in input pixels and its class
probabilities ``(B, N, C)``, differentiably (no non-maximum suppression: the target's
max over proposals picks one). It knows three kinds of detector:

- keras-hub's ``RetinaNetObjectDetector``: ``bbox_regression`` holds anchor deltas
  (``center_xywh``), decoded against the model's own anchor generator as its
  ``decode_predictions`` does; ``cls_logits`` go through a sigmoid unless the model's
  head applies one;
- keras-hub's ``DFineObjectDetector`` (DETR-like): ``pred_boxes`` are ``center_xywh``
  relative to the image, ``logits`` go through a sigmoid likewise;
- any other model with a boxes output ``(B, N, 4)`` (corners in input pixels, in the
  target's ``box_format``) and a class scores output ``(B, N, C)``: probabilities where
  a sigmoid or softmax head makes them, else logits through a sigmoid. The outputs are
  named by the target, else found by name (:data:`BOX_NAMES`, :data:`SCORE_NAMES`), else
  by shape (the one rank-3 output of 4 values per proposal, and the other).

:func:`matched` scores a box against the proposals: D-RISE's similarity with a class
score (``IoU * p[label] ** weight``), its best proposal and what it found.
"""

from __future__ import annotations

import tensorflow as tf

from guidedbp import _outputs
from guidedbp.errors import ArgumentError

#: Output names read as the boxes, then as the class scores, in order of preference.
BOX_NAMES = ("boxes", "box", "bboxes", "bbox", "pred_boxes", "detection_boxes")
SCORE_NAMES = ("scores", "probabilities", "classes", "class_scores", "logits", "cls_logits",
               "detection_scores")


class NotADetector(ArgumentError):
    """A Detection target on a model whose outputs are not a detector's."""


def kind_of(model) -> str:
    """``"retinanet"``, ``"d-fine"`` or ``"boxes"``: how :func:`proposals` reads ``model``."""
    names = {cls.__name__ for cls in type(model).__mro__}
    if "RetinaNetObjectDetector" in names:
        return "retinanet"
    if "DFineObjectDetector" in names:
        return "d-fine"
    return "boxes"


def proposals(model, raw, image_size: tuple[int, int], box_format: str = "xyxy",
              boxes=None, scores=None) -> tuple[tf.Tensor, tf.Tensor, list]:
    """Every proposal's corners float32 ``(B, N, 4)`` in input pixels, its class
    probabilities float32 ``(B, N, C)``, and the output tensors read.

    Args:
        model: The detector.
        raw: Its output in the trace.
        image_size: ``(height, width)`` of the input, static.
        box_format: A plain model's boxes' format (``xyxy``, ``yxyx``, ``xywh``).
        boxes, scores: The outputs to read (name or index), or ``None`` to find them.

    Raises:
        NotADetector: Outputs that hold no boxes and class scores, in one line.
    """
    height, width = image_size
    kind = kind_of(model)
    if kind == "retinanet":
        import keras

        deltas, logits = raw["bbox_regression"], raw["cls_logits"]
        anchors = model.anchor_generator(tf.zeros([1, height, width, 3]))
        anchors = tf.concat(list(anchors.values()), axis=0)
        decoded = keras.utils.bounding_boxes.decode_deltas_to_boxes(
            anchors=anchors, boxes_delta=tf.cast(deltas, tf.float32),
            encoded_format="center_xywh",
            anchor_format=model.anchor_generator.bounding_box_format,
            box_format=model.bounding_box_format, image_shape=(height, width, 3))
        corners = keras.utils.bounding_boxes.convert_format(
            decoded, source=model.bounding_box_format, target="xyxy",
            height=height, width=width)
        return (tf.cast(corners, tf.float32), _probabilities(logits, model.activation),
                [deltas, logits])
    if kind == "d-fine":
        relative, logits = raw["pred_boxes"], raw["logits"]
        relative = tf.cast(relative, tf.float32)
        centre = relative[..., :2] * [width, height]
        half = relative[..., 2:] * [width, height] / 2
        corners = tf.concat([centre - half, centre + half], axis=-1)
        return corners, _probabilities(logits, model.activation), [relative, logits]
    box_tensor, score_tensor = _plain_outputs(model, raw, boxes, scores)
    values = tf.cast(box_tensor, tf.float32)
    if box_format == "yxyx":
        values = tf.gather(values, [1, 0, 3, 2], axis=-1)
    elif box_format == "xywh":
        values = tf.concat([values[..., :2], values[..., :2] + values[..., 2:]], axis=-1)
    logits, head, _ = _outputs.behind_head(score_tensor)
    if head in ("sigmoid", "softmax"):
        probabilities = tf.cast(score_tensor, tf.float32)
    elif head == "log_softmax":
        probabilities = tf.exp(tf.cast(score_tensor, tf.float32))
    else:
        probabilities = tf.sigmoid(tf.cast(score_tensor, tf.float32))
    return values, probabilities, [box_tensor, logits]


def _probabilities(logits, activation) -> tf.Tensor:
    """A keras-hub detector's class scores: its logits through a sigmoid, as its
    prediction decoder reads them, unless its head applies the sigmoid itself."""
    import keras

    logits = tf.cast(logits, tf.float32)
    if activation is keras.activations.sigmoid or activation == "sigmoid":
        return logits
    return tf.sigmoid(logits)


def _plain_outputs(model, raw, boxes, scores):
    names = _outputs.output_names(model, raw)
    tensors = _outputs.tensors_of(model, raw)
    if boxes is not None or scores is not None:
        if boxes is None or scores is None:
            raise NotADetector("name both outputs of a detector: boxes= and scores=")
        return _outputs.select(model, raw, boxes), _outputs.select(model, raw, scores)
    described = _outputs.describe(model, raw)
    ranked = [i for i, t in enumerate(tensors) if t.shape.rank == 3]
    by_name = {name.lower().rsplit("/", 1)[-1]: i for i, name in enumerate(names)}
    box_index = next((by_name[n] for n in BOX_NAMES if by_name.get(n) in ranked), None)
    if box_index is None:
        fours = [i for i in ranked if tensors[i].shape[-1] == 4]
        box_index = fours[0] if len(fours) == 1 else None
    score_index = next((by_name[n] for n in SCORE_NAMES
                        if by_name.get(n) in ranked and by_name[n] != box_index), None)
    if score_index is None and box_index is not None:
        others = [i for i in ranked if i != box_index]
        score_index = others[0] if len(others) == 1 else None
    if box_index is None or score_index is None:
        raise NotADetector(
            f"a Detection target needs a detector: boxes (batch, proposals, 4) and class "
            f"scores (batch, proposals, classes); the model's outputs are {described} "
            "(name them with boxes= and scores=)")
    box_tensor, score_tensor = tensors[box_index], tensors[score_index]
    if box_tensor.shape[1] is not None and score_tensor.shape[1] is not None \
            and box_tensor.shape[1] != score_tensor.shape[1]:
        raise NotADetector(
            f"the detector's boxes {names[box_index]!r} {tuple(box_tensor.shape)} and "
            f"scores {names[score_index]!r} {tuple(score_tensor.shape)} count different "
            "proposals")
    return box_tensor, score_tensor


def iou(box: tf.Tensor, boxes: tf.Tensor) -> tf.Tensor:
    """float32 ``(B, N)``: the IoU of each image's ``box`` ``(B, 4)`` with its proposals
    ``boxes`` ``(B, N, 4)`` (corners; a proposal with no area has IoU 0)."""
    box = box[:, None, :]
    x0 = tf.maximum(box[..., 0], boxes[..., 0])
    y0 = tf.maximum(box[..., 1], boxes[..., 1])
    x1 = tf.minimum(box[..., 2], boxes[..., 2])
    y1 = tf.minimum(box[..., 3], boxes[..., 3])
    inter = tf.nn.relu(x1 - x0) * tf.nn.relu(y1 - y0)
    area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])
    areas = tf.nn.relu(boxes[..., 2] - boxes[..., 0]) * tf.nn.relu(boxes[..., 3] - boxes[..., 1])
    return tf.math.divide_no_nan(inter, area + areas - inter)


def matched(box: tf.Tensor, wanted: tf.Tensor, corners: tf.Tensor, probabilities: tf.Tensor,
            weight: float) -> dict:
    """The box's score against the proposals and what it matched.

    Args:
        box: float32 ``(B, 4)`` the target box, corners in input pixels.
        wanted: int32 ``(B,)`` its class, or -1: the class of the proposal that matches
            it best (``IoU * max_c p_c``).
        corners, probabilities: :func:`proposals`'s.
        weight: The class score's exponent.

    Returns:
        ``score`` ``(B,)`` ``max_j IoU_j * p_j[label] ** weight``; ``label`` ``(B,)``;
        ``found`` ``(B, 6)``: the matched proposal's corners, IoU and class score.
    """
    overlaps = iou(box, corners)
    best_any = tf.argmax(overlaps * tf.reduce_max(probabilities, axis=-1), axis=1,
                         output_type=tf.int32)
    auto = tf.argmax(tf.gather(probabilities, best_any, batch_dims=1), axis=-1,
                     output_type=tf.int32)
    label = tf.where(wanted < 0, auto, wanted)
    classes = tf.shape(probabilities)[-1]
    label = tf.minimum(label, classes - 1)  # checked before; keeps the gather in range
    class_scores = tf.gather(probabilities, label, axis=2, batch_dims=1)
    similarity = overlaps * (class_scores ** weight if weight != 1 else class_scores)
    best = tf.argmax(similarity, axis=1, output_type=tf.int32)
    found = tf.concat([tf.gather(corners, best, batch_dims=1),
                       tf.gather(overlaps, best, batch_dims=1)[:, None],
                       tf.gather(class_scores, best, batch_dims=1)[:, None]], axis=1)
    return {"score": tf.reduce_max(similarity, axis=1), "label": label,
            "found": tf.stop_gradient(found)}
