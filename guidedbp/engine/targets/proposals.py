"""A detector's proposals as a :class:`~guidedbp.engine.targets.box_target.Detection` reads them.

:func:`proposals` turns a detector's raw output, inside the trace, into every proposal's
box ``(B, N, 4)`` as corners ``(x0, y0, x1, y1)`` in input pixels and its class
probabilities ``(B, N, C)``, differentiably (no non-maximum suppression: the target's
max over proposals picks one). It knows three kinds of detector:

- keras-hub's ``RetinaNetObjectDetector``: ``bbox_regression`` holds anchor deltas
  (``center_xywh``), decoded against the model's own anchor generator as its
  ``decode_predictions`` does (the same boxes, exactly, before its non-maximum
  suppression); ``cls_logits`` go through a sigmoid where its prediction decoder
  applies one (``from_logits``);
- keras-hub's ``DFineObjectDetector`` (DETR-like): ``pred_boxes`` are ``center_xywh``
  relative to the image, ``logits`` go through a sigmoid likewise;
- any other model with a boxes output ``(B, N, 4)`` (in input pixels, or relative to
  the input: :data:`BOXES_FORMATS`) and a class scores output ``(B, N, C)``:
  probabilities where a sigmoid or softmax head makes them, else logits through a
  sigmoid. The outputs are named by the target, else found by name (:data:`BOX_NAMES`,
  :data:`SCORE_NAMES`), else by shape (the one rank-3 output of 4 values per proposal,
  and the other).

:func:`matched` scores a box against the proposals: D-RISE's similarity with a class
score (``IoU * p[label] ** weight``), its best proposal and what it found.

Two things the gradient pass needs beyond a classifier's: :data:`GRADIENT_OVERRIDES`
(D-FINE stops the gradient at its query selection and reference points, a training
device: differentiated as the identity, its maps follow how the boxes move with the
pixels, as finite differences do) and :func:`feature_map` (the class activation maps'
layer: the last feature map every path from the image to the detection passes through,
so that a detection read off any pyramid level has its whole gradient there).
"""

from __future__ import annotations

import tensorflow as tf

from guidedbp import _outputs
from guidedbp.engine.targets.box_target import BOXES_FORMATS
from guidedbp.errors import ArgumentError

__all__ = ["BOXES_FORMATS", "GRADIENT_OVERRIDES", "NotADetector", "feature_map",
           "gradient_overrides", "image_size", "iou", "kind_of", "matched", "proposals"]

#: Output names read as the boxes, then as the class scores, in order of preference.
BOX_NAMES = ("boxes", "box", "bboxes", "bbox", "pred_boxes", "detection_boxes")
SCORE_NAMES = ("scores", "probabilities", "classes", "class_scores", "logits", "cls_logits",
               "detection_scores")
#: Ops that move a class score head's values without changing them.
RESHAPE_OPS = ("Reshape", "ExpandDims", "Squeeze")
#: The gradient the trace gives an op type, by detector kind: D-FINE's stop-gradients
#: (its query selection, initial and refined reference points, ``keras.ops.stop_gradient``
#: as the paper's ``detach``) are a training device; left in, its pixels' gradient misses
#: how the boxes move (measured: 1e-5 where finite differences give 2.7).
GRADIENT_OVERRIDES = {"d-fine": {"StopGradient": "Identity"}}


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


def image_size(images: tf.Tensor) -> tuple:
    """``(height, width)`` of the traced ``images``: ints where the signature fixes
    them, else scalar int32 tensors (a keras-hub detector declares ``(None, None, 3)``)."""
    shape = tf.shape(images)
    return tuple(int(images.shape[axis]) if images.shape[axis] is not None else shape[axis]
                 for axis in (1, 2))


def gradient_overrides(model) -> dict[str, str]:
    """The gradient override map the trace adds for ``model`` (see
    :data:`GRADIENT_OVERRIDES`): empty but for a D-FINE detector."""
    return dict(GRADIENT_OVERRIDES.get(kind_of(model), {}))


def proposals(model, raw, image_size: tuple, box_format: str = "xyxy",
              boxes=None, scores=None) -> tuple[tf.Tensor, tf.Tensor, list]:
    """Every proposal's corners float32 ``(B, N, 4)`` in input pixels, its class
    probabilities float32 ``(B, N, C)``, and the output tensors read (boxes, scores).

    Args:
        model: The detector.
        raw: Its output in the trace.
        image_size: ``(height, width)`` of the input: ints, or scalar int32 tensors
            where the trace leaves them free (:func:`image_size`).
        box_format: A plain model's boxes' format, one of :data:`BOXES_FORMATS`.
        boxes, scores: The outputs to read (name or index), or ``None`` to find them.

    Raises:
        NotADetector: Outputs that hold no boxes and class scores, in one line.
    """
    height, width = image_size
    sides = tf.cast(tf.stack([width, height]), tf.float32)  # x scales by the width
    kind = kind_of(model)
    if kind == "retinanet":
        import keras

        deltas, logits = raw["bbox_regression"], raw["cls_logits"]
        decoded = keras.utils.bounding_boxes.decode_deltas_to_boxes(
            anchors=_anchors(model, height, width), boxes_delta=tf.cast(deltas, tf.float32),
            encoded_format="center_xywh",
            anchor_format=model.anchor_generator.bounding_box_format,
            box_format=model.bounding_box_format, image_shape=(height, width, 3))
        corners = keras.utils.bounding_boxes.convert_format(
            decoded, source=model.bounding_box_format, target="xyxy",
            height=height, width=width)
        return (tf.cast(corners, tf.float32), _probabilities(logits, model),
                [deltas, logits])
    if kind == "d-fine":
        relative, logits = raw["pred_boxes"], raw["logits"]
        corners = as_corners(tf.cast(relative, tf.float32), "rel_center_xywh", sides)
        return corners, _probabilities(logits, model), [relative, logits]
    box_tensor, score_tensor = _plain_outputs(model, raw, boxes, scores)
    values = as_corners(tf.cast(box_tensor, tf.float32), box_format, sides)
    logits, head, _ = _outputs.behind_head(score_tensor)
    if head is None:  # a head before a reshape (Dense(sigmoid), then Reshape to (N, C))
        head = _outputs.behind_head(_behind_reshapes(score_tensor))[1]
    if head in ("sigmoid", "softmax"):
        probabilities = tf.cast(score_tensor, tf.float32)
    elif head == "log_softmax":
        probabilities = tf.exp(tf.cast(score_tensor, tf.float32))
    else:
        probabilities = tf.sigmoid(tf.cast(score_tensor, tf.float32))
    return values, probabilities, [box_tensor, logits]


def _behind_reshapes(tensor):
    """The tensor ``tensor`` reshapes (behind ``Reshape``, ``ExpandDims``, ``Squeeze`` and
    the ops :data:`guidedbp._outputs.PASS_THROUGH_OPS` names): a score head's
    probabilities keep their values through them."""
    while (tensor.op.type in RESHAPE_OPS + _outputs.PASS_THROUGH_OPS
           and tensor.op.inputs):
        tensor = tensor.op.inputs[0]
    return tensor


def as_corners(values: tf.Tensor, box_format: str, sides: tf.Tensor) -> tf.Tensor:
    """Boxes ``(..., 4)`` in ``box_format`` (:data:`BOXES_FORMATS`) as corners ``(x0, y0,
    x1, y1)`` in pixels; ``sides`` float32 ``(2,)`` the input's ``(width, height)``, by
    which a ``rel_`` format's values are scaled."""
    relative = box_format.startswith("rel_")
    base = box_format[4:] if relative else box_format
    if base in ("yxyx", "center_yxhw"):
        values = tf.gather(values, [1, 0, 3, 2], axis=-1)
    if relative:
        values = values * tf.concat([sides, sides], axis=0)
    first, second = values[..., :2], values[..., 2:]
    if base == "xywh":
        return tf.concat([first, first + second], axis=-1)
    if base.startswith("center_"):
        return tf.concat([first - second / 2, first + second / 2], axis=-1)
    return values


def _anchors(model, height, width) -> tf.Tensor:
    """A RetinaNet's anchors ``(N, 4)`` for an input of ``height`` by ``width``, from its
    own anchor generator, which needs the sizes as numbers (it takes ``math.ceil`` of
    them): a constant where the trace fixes them, else computed when the function runs."""
    def of(rows, columns):
        found = model.anchor_generator(tf.zeros([1, rows, columns, 3]))
        return tf.concat([tf.cast(level, tf.float32) for level in found.values()], axis=0)

    if isinstance(height, int) and isinstance(width, int):
        return of(height, width)
    anchors = tf.numpy_function(lambda rows, columns: of(int(rows), int(columns)).numpy(),
                                [height, width], tf.float32, stateful=False)
    anchors.set_shape([None, 4])
    return anchors


def _probabilities(logits, model) -> tf.Tensor:
    """A keras-hub detector's class scores as its prediction decoder reads them: through a
    sigmoid where it says ``from_logits`` (keras-hub's default: the model's
    ``activation`` is not the sigmoid), else as they are."""
    import keras

    logits = tf.cast(logits, tf.float32)
    from_logits = getattr(getattr(model, "prediction_decoder", None), "from_logits", None)
    if from_logits is None:
        activation = getattr(model, "activation", None)
        from_logits = not (activation is keras.activations.sigmoid or activation == "sigmoid")
    return tf.sigmoid(logits) if from_logits else logits


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
    ``boxes`` ``(B, N, 4)`` (corners; a proposal with no area has IoU 0).

    Where a proposal's side lies exactly on the box's (a detection's own box: IoU 1), the
    overlap's corner follows both halfway (:func:`_tied`), so that the IoU's gradient is
    0 at its peak rather than one side's slope (whichever side ``tf.maximum`` favours).
    """
    box = tf.broadcast_to(box[:, None, :], tf.shape(boxes))
    x0 = _tied(tf.maximum, box[..., 0], boxes[..., 0])
    y0 = _tied(tf.maximum, box[..., 1], boxes[..., 1])
    x1 = _tied(tf.minimum, box[..., 2], boxes[..., 2])
    y1 = _tied(tf.minimum, box[..., 3], boxes[..., 3])
    inter = tf.nn.relu(x1 - x0) * tf.nn.relu(y1 - y0)
    area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])
    areas = tf.nn.relu(boxes[..., 2] - boxes[..., 0]) * tf.nn.relu(boxes[..., 3] - boxes[..., 1])
    return tf.math.divide_no_nan(inter, area + areas - inter)


def _tied(extreme, first: tf.Tensor, second: tf.Tensor) -> tf.Tensor:
    """``extreme(first, second)`` (``tf.maximum`` or ``tf.minimum``, same shapes) whose
    gradient goes to the one chosen, and half to each where they are equal."""

    @tf.custom_gradient
    def chosen(a, b):
        value = extreme(a, b)

        def gradient(upstream):
            share = tf.where(tf.equal(a, b), 0.5, tf.cast(tf.equal(value, a), upstream.dtype))
            return upstream * share, upstream * (1 - share)

        return value, gradient

    return chosen(first, second)


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
    similarity = overlaps * _power(class_scores, weight)
    best = tf.argmax(similarity, axis=1, output_type=tf.int32)
    found = tf.concat([tf.gather(corners, best, batch_dims=1),
                       tf.gather(overlaps, best, batch_dims=1)[:, None],
                       tf.gather(class_scores, best, batch_dims=1)[:, None]], axis=1)
    return {"score": tf.reduce_max(similarity, axis=1), "label": label,
            "found": tf.stop_gradient(found)}


def _power(scores: tf.Tensor, weight: float) -> tf.Tensor:
    """``scores ** weight`` with a finite gradient where a score is 0 (a softmax that
    underflowed): 1 for weight 0 (the IoU alone), 0 and no gradient at 0 below weight 1."""
    if weight == 1:
        return scores
    if weight == 0:
        return tf.ones_like(scores)
    positive = scores > 0
    safe = tf.where(positive, scores, tf.ones_like(scores))
    return tf.where(positive, safe ** weight, tf.zeros_like(scores))


def feature_map(ends: list, images: tf.Tensor) -> tf.Tensor | None:
    """The class activation maps' layer for a detection reading ``ends``: the last
    ``(N, h, w, k)`` float tensor that every differentiable path from ``images`` to
    ``ends`` passes through (its immediate post-dominator chain, Cooper, Harvey and
    Kennedy's algorithm on the traced graph), or ``None`` where there is none.

    A detector reads each pyramid level through its own head: the last 4-D tensor before
    one output (what a classifier's CAM takes) holds the gradient of one level alone, so
    a detection read off another level has a zero map there. The tensor found here holds
    the whole gradient of every proposal: a RetinaNet's last backbone stage that all its
    levels are built from, a D-FINE's backbone stage before its encoder.
    """
    depends = _reached(images)

    def sources(tensor) -> list:
        if tensor is images:
            return []
        return [source for source in tensor.op.inputs
                if source.dtype.is_floating and source.op.name in depends]

    root = "ends"
    starts = [end for end in ends if end.dtype.is_floating and end.op.name in depends]
    nodes = {root: starts}
    order, stack, seen = [], [(root, iter(starts))], {root}
    while stack:  # depth first: postorder numbers
        node, pending = stack[-1]
        following = next(pending, None)
        if following is None:
            stack.pop()
            order.append(node)
            continue
        key = following.name
        if key not in seen:
            seen.add(key)
            nodes[key] = sources(following)
            stack.append((key, iter(nodes[key])))
    if images.name not in seen:
        return None
    number = {node: index for index, node in enumerate(order)}
    tensors = {end.name: end for end in starts}
    predecessors: dict = {}
    for node, targets in nodes.items():
        for target in targets:
            tensors[target.name] = target
            predecessors.setdefault(target.name, []).append(node)
    dominator = {root: root}
    for node in reversed(order[:-1]):  # reverse postorder: a DAG's predecessors come first
        chosen = None
        for predecessor in predecessors.get(node, []):
            if predecessor not in dominator:
                continue
            chosen = predecessor if chosen is None else _meet(predecessor, chosen, dominator,
                                                              number)
        dominator[node] = chosen
    chain, node = [], dominator[images.name]
    while node != root:
        chain.append(tensors[node])
        node = dominator[node]
    maps = [tensor for tensor in chain if _is_grid(tensor, images)]
    return maps[-1] if maps else None


def _is_grid(tensor: tf.Tensor, images: tf.Tensor) -> bool:
    """Whether ``tensor`` is a feature map ``(N, h, w, k)`` laid over the image: where the
    trace fixes the image's size, ``h`` and ``w`` known, at most the image's, one stride
    on both axes (within a cell of the rounding); where it leaves the size free (a
    keras-hub detector's ``(None, None, 3)``), ``h`` and ``w`` free too. A transformer
    decoder's sampling tensors (D-FINE's ``(N, queries, levels, points)``, sizes unrelated
    to the image) are no map to draw."""
    if tensor.shape.rank != 4 or not tensor.dtype.is_floating:
        return False
    rows, columns = tensor.shape[1], tensor.shape[2]
    height, width = images.shape[1], images.shape[2]
    if height is None or width is None:
        return rows is None and columns is None
    if None in (rows, columns) or not (0 < rows <= height and 0 < columns <= width):
        return False
    return abs(height / rows - width / columns) <= max(height / rows, width / columns) / min(
        rows, columns)


def _meet(first: str, second: str, dominator: dict, number: dict) -> str:
    while first != second:
        while number[first] < number[second]:
            first = dominator[first]
        while number[second] < number[first]:
            second = dominator[second]
    return first


def _reached(images: tf.Tensor) -> set[str]:
    """The names of the ops that depend on ``images``."""
    found, queue = {images.op.name}, [images]
    while queue:
        tensor = queue.pop()
        for consumer in tensor.consumers():
            if consumer.name not in found:
                found.add(consumer.name)
                queue.extend(consumer.outputs)
    return found
