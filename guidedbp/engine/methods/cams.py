"""Class activation maps' maths: a table of gradient weightings (Grad-CAM, Grad-CAM++,
LayerCAM, XGrad-CAM, HiResCAM), each one function, as pytorch-grad-cam's
``get_cam_weights``, one of gradient-free projections (Eigen-CAM), and the map they
make of a feature map (:func:`class_activation_map`). The feature map itself is found in
the traced graph by :mod:`guidedbp.engine.graph.layers`; a token layer's is laid out as
its grid (:func:`~guidedbp.engine.graph.tokens.token_grid`) for the weighting.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from guidedbp.engine.graph.tokens import token_grid
from guidedbp.errors import ArgumentError


def gradcam_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """Grad-CAM (Selvaraju et al., 2017): ``w_k`` the mean of ``g_k`` over positions."""
    del feature_map  # Grad-CAM's weights read the gradient alone
    return tf.reduce_mean(gradient, axis=(1, 2), keepdims=True)


def gradcam_plus_plus_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """Grad-CAM++ (Chattopadhyay et al., 2018): ``w_k = sum_ab alpha * relu(g_k)`` with
    ``alpha = g^2 / (2 g^2 + sum_ab(A_k) g^3)``, as pytorch-grad-cam and tf-keras-vis
    compute it.

    Where ``g`` is not zero that is ``1 / (2 + sum_ab(A_k) g)``, which is what is
    computed (no ``g^2`` or ``g^3`` to underflow in float32); ``alpha`` is 0 where that
    denominator is 0 (pytorch-grad-cam adds 1e-6 to it instead, tf-keras-vis divides by
    it). The paper differentiates ``exp(score)``: that factor cancels in ``alpha`` and
    only scales the map, so both implementations drop it, and so does this one.
    tf-keras-vis (like the authors' code) also divides ``alpha`` by its sum over
    positions, which rescales each channel's weight; pytorch-grad-cam does not, nor does
    this.
    """
    total = tf.reduce_sum(feature_map, axis=(1, 2), keepdims=True)
    alpha = tf.math.divide_no_nan(1.0, 2.0 + total * gradient)
    return tf.reduce_sum(alpha * tf.nn.relu(gradient), axis=(1, 2), keepdims=True)


def layercam_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """LayerCAM (Jiang et al., 2021): ``relu(g_k)`` position by position, so the map is
    meaningful at any layer, early ones too."""
    del feature_map  # LayerCAM's weights read the gradient alone
    return tf.nn.relu(gradient)


#: XGrad-CAM's guard against a channel whose activations sum to zero (pytorch-grad-cam's).
XGRADCAM_EPSILON = 1e-7


def xgradcam_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """XGrad-CAM (Fu et al., 2020): ``w_k = sum_ab(g_k A_k) / (sum_ab(A_k) + 1e-7)``, the
    activation-weighted mean of the gradient, as pytorch-grad-cam's ``XGradCAM``."""
    total = tf.reduce_sum(feature_map, axis=(1, 2), keepdims=True)
    weighted = tf.reduce_sum(gradient * feature_map, axis=(1, 2), keepdims=True)
    return weighted / (total + XGRADCAM_EPSILON)


def hirescam_weights(feature_map: tf.Tensor, gradient: tf.Tensor) -> tf.Tensor:
    """HiResCAM (Draelos & Carin, 2020): ``g_k`` itself, position by position, no
    averaging: the map is ``relu(sum_k g_k * A_k)``, as pytorch-grad-cam's ``HiResCAM``."""
    del feature_map  # HiResCAM's weights are the gradient
    return gradient


#: A weighting: ``(feature map A, plain gradient g)``, both float32 ``(N, h, w, k)`` ->
#: weights broadcastable to ``A`` (``(N, 1, 1, k)`` per channel, or ``(N, h, w, k)`` per
#: position). :func:`class_activation_map` multiplies them into ``A``.
Weighting = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]

#: The gradient weightings :func:`class_activation_map` knows, by the name a registry
#: record's ``combine`` asks for (``parts.cam("gradcam++")``). A new class activation
#: map is one function here, one entry in this table and one registry record.
WEIGHTINGS: dict[str, Weighting] = {
    "gradcam": gradcam_weights,
    "gradcam++": gradcam_plus_plus_weights,
    "layercam": layercam_weights,
    "xgradcam": xgradcam_weights,
    "hirescam": hirescam_weights,
}


def principal_component(feature_map: tf.Tensor) -> tf.Tensor:
    """Eigen-CAM (Muhammad & Yeasin, 2020): each image's ``(h, w, k)`` feature map,
    read as ``h * w`` points of ``k`` channels, centred (its mean over positions
    subtracted) and projected on its first principal component (the first right
    singular vector), as pytorch-grad-cam's ``get_2d_projection``.

    The component's sign is arbitrary (an SVD may return ``v`` or ``-v``; pytorch-grad-cam
    keeps whichever it gets, so its map may come out upside down and vanish under the
    ReLU): it is chosen here so that the projection correlates positively with the
    channel-summed activation, i.e. ``sum_k v_k > 0``. Where the correlation is exactly
    0 (a feature map constant over positions: the projection is 0), the sign is left as
    the SVD gives it.

    Args:
        feature_map: float32 ``(N, h, w, k)``.

    Returns:
        float32 ``(N, h, w, 1)``, before the ReLU.
    """
    shape = tf.shape(feature_map)
    points = tf.reshape(feature_map, [shape[0], shape[1] * shape[2], shape[3]])
    centred = points - tf.reduce_mean(points, axis=1, keepdims=True)
    _, _, right = tf.linalg.svd(centred)  # (N, k, min(h * w, k)), largest singular value first
    projection = tf.linalg.matvec(centred, right[:, :, 0])  # (N, h * w)
    correlation = tf.reduce_sum(projection * tf.reduce_sum(centred, axis=-1), axis=-1,
                                keepdims=True)
    projection = tf.where(correlation < 0, -projection, projection)
    return tf.reshape(projection, [shape[0], shape[1], shape[2], 1])


#: A projection: float32 ``(N, h, w, k)`` feature map -> ``(N, h, w, 1)`` map, no gradient.
Projection = Callable[[tf.Tensor], tf.Tensor]

#: The gradient-free class activation maps :func:`class_activation_map` knows, by the
#: name a registry record's ``combine`` asks for (``parts.cam("eigencam")``): they read
#: the feature map alone, so the same map serves every class.
PROJECTIONS: dict[str, Projection] = {
    "eigencam": principal_component,
}


def class_activation_map(feature_map: tf.Tensor, gradient: tf.Tensor, weighting: str, size,
                         upsample: str) -> tf.Tensor:
    """The ReLU of the feature map's weighted channel sum, upsampled to the input:
    ``relu(sum_k w_k A_k)`` with ``A`` the ``(h, w, k)`` feature map and ``w`` the
    weights :data:`WEIGHTINGS` computes from ``A`` and the plain gradient of the class
    logit with respect to it; or the ReLU of a projection of :data:`PROJECTIONS`
    (Eigen-CAM), which reads ``A`` alone.

    Args:
        feature_map: ``(N, h, w, k)`` layer output, or a token layer's ``(N, T, C)``
            (laid out as its grid, :func:`token_grid`, here).
        gradient: The plain gradient of the class logit with respect to it.
        weighting: A name of :data:`WEIGHTINGS` or :data:`PROJECTIONS`.
        size: ``(H, W)`` of the input.
        upsample: ``"bilinear"`` or ``"nearest"``.

    Returns:
        float32 ``(N, H, W, 1)``.

    Raises:
        ArgumentError: For an unknown ``weighting``.
    """
    if weighting not in WEIGHTINGS and weighting not in PROJECTIONS:
        raise ArgumentError(f"weighting={weighting!r} is not one of "
                            f"{', '.join([*WEIGHTINGS, *PROJECTIONS])}")
    if feature_map.shape.rank == 3:  # tokens: the grid, its gradient laid out alike
        grid = token_grid(feature_map.shape[1])
        feature_map, gradient = grid.apply(feature_map), grid.apply(gradient)
    feature_map = tf.cast(feature_map, tf.float32)
    if weighting in PROJECTIONS:
        cam = PROJECTIONS[weighting](feature_map)
    else:
        weighted = WEIGHTINGS[weighting](feature_map, tf.cast(gradient, tf.float32))
        cam = tf.reduce_sum(weighted * feature_map, axis=-1, keepdims=True)
    return tf.image.resize(tf.nn.relu(cam), size, method=upsample)
