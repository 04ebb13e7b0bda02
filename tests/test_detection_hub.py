"""Detection targets on keras-hub's detectors (issue 35): a tiny ``RetinaNetObjectDetector``
and a tiny ``DFineObjectDetector`` built from small configs (random weights, no network).

Their proposals as a Detection target reads them equal, exactly, what each model's own
``decode_predictions`` hands its non-maximum suppression (caught by a stand-in decoder in
the same traced function), at two image sizes (both declare ``(None, None, 3)``). Every
kind of method explains a detection of the model's own top proposal; the gradient equals
``tf.GradientTape``'s (for D-FINE, with ``keras.ops.stop_gradient`` made the identity:
the engine differentiates through its training-only stops); the class activation maps
read a backbone map every proposal depends on; a ``.keras`` file loaded by
``guidedbp.load_model`` gives the same maps.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import guidedbp
from guidedbp.engine.targets import proposals as _proposals
from guidedbp.targets import Detection

keras_hub = pytest.importorskip("keras_hub")

pytestmark = pytest.mark.heavy

SIZE = 32
#: The last backbone map every proposal depends on (Grad-CAM's layer for a detection).
CAM_LAYERS = {"retinanet": "stack1_block0_out", "d-fine": "encoder_stage_0_block_0_agg_excite_lab"}


def retinanet() -> keras.Model:
    """ResNet (one block per stage) -> P3, P4 (no P5) -> one anchor per cell (16 pixels at
    P3): 20 proposals on a 32 x 32 image, 3 classes. keras-hub gives the box head a prior
    bias of -4.6 on every delta (boxes of a fraction of a pixel): its last layer is scaled
    down so that the proposals lie near their anchors, over the image."""
    keras.utils.set_random_seed(1)
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7], stackwise_num_filters=[64, 16, 16],
        stackwise_num_blocks=[1, 1, 1], stackwise_num_strides=[1, 2, 2],
        image_shape=(None, None, 3), block_type="basic_block", use_pre_activation=False)
    backbone = keras_hub.models.RetinaNetBackbone(image_encoder=encoder, min_level=3,
                                                  max_level=4, use_p5=False)
    anchors = keras_hub.layers.AnchorGenerator(
        bounding_box_format="yxyx", min_level=3, max_level=4, num_scales=1,
        aspect_ratios=[1.0], anchor_size=2)
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, anchor_generator=anchors, num_classes=3, bounding_box_format="yxyx",
        pre_logits_num_conv_layers=1)
    kernel, bias = model.box_head.prediction_layer.get_weights()
    model.box_head.prediction_layer.set_weights([kernel * 0.05, bias * 0])
    return model


def d_fine() -> keras.Model:
    """keras-hub's own test configuration, shrunk: HGNetV2 (two stages), one encoder and
    one decoder layer, 10 queries, 3 classes, no denoising."""
    keras.utils.set_random_seed(1)
    hgnet = keras_hub.models.HGNetV2Backbone(
        stem_channels=[3, 8, 8], stackwise_stage_filters=[[8, 8, 16, 1, 1, 3],
                                                          [16, 8, 32, 1, 1, 3]],
        apply_downsample=[False, True], use_lightweight_conv_block=[False, False],
        depths=[1, 1], hidden_sizes=[16, 32], embedding_size=8, use_learnable_affine_block=True,
        hidden_act="relu", image_shape=(None, None, 3), out_features=["stage1", "stage2"],
        data_format="channels_last")
    backbone = keras_hub.models.DFineBackbone(
        backbone=hgnet, decoder_in_channels=[16, 16], encoder_hidden_dim=16, num_denoising=0,
        num_labels=3, hidden_dim=16, learn_initial_query=False, num_queries=10,
        anchor_image_size=(SIZE, SIZE), feat_strides=[4, 8], num_feature_levels=2,
        encoder_in_channels=[16, 32], encode_proj_layers=[1], num_attention_heads=2,
        encoder_ffn_dim=32, num_encoder_layers=1, hidden_expansion=0.5, depth_multiplier=0.5,
        eval_idx=-1, num_decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=32,
        decoder_method="default", decoder_n_points=[2, 2], lqe_hidden_dim=16, num_lqe_layers=1,
        out_features=["stage1", "stage2"], image_shape=(None, None, 3),
        data_format="channels_last", seed=0)
    return keras_hub.models.DFineObjectDetector(backbone=backbone, num_classes=3,
                                                bounding_box_format="yxyx")


BUILDERS = {"retinanet": retinanet, "d-fine": d_fine}


@pytest.fixture(scope="module")
def models() -> dict:
    return {}


@pytest.fixture(scope="module", params=list(BUILDERS))
def detector(request, models):
    if request.param not in models:
        models[request.param] = BUILDERS[request.param]()
    return request.param, models[request.param]


def _images(height: int = SIZE, width: int = SIZE) -> np.ndarray:
    # keras-hub's detectors take pixels scaled to [0, 1] (their image converters').
    return np.random.default_rng(0).uniform(0.0, 1.0, (2, height, width, 3)).astype(np.float32)


class _Caught(keras.layers.Layer):
    """A prediction decoder that keeps what the detector hands its non-maximum
    suppression (boxes in the model's format, class scores as it reads them)."""

    def __init__(self, bounding_box_format: str, from_logits: bool):
        super().__init__(name="caught")
        self.bounding_box_format, self.from_logits = bounding_box_format, from_logits

    def call(self, boxes, scores, images=None):
        self.caught = (boxes, scores)
        return {"boxes": boxes}


def _own_decoding(model, images: np.ndarray):
    """In one traced function: the model's own pre-suppression boxes (as corners ``xyxy``)
    and class probabilities, and the Detection target's proposals."""
    original = model._prediction_decoder
    caught = _Caught(model.bounding_box_format, original.from_logits)

    def both(batch):
        raw = model(batch, training=False)
        model.decode_predictions(raw, batch)
        boxes, scores = caught.caught
        height, width = tf.shape(batch)[1], tf.shape(batch)[2]
        own = keras.utils.bounding_boxes.convert_format(
            boxes, source=model.bounding_box_format, target="xyxy", height=height, width=width)
        own_probabilities = tf.sigmoid(scores) if caught.from_logits else scores
        corners, probabilities, _ = _proposals.proposals(model, raw,
                                                          _proposals.image_size(batch))
        return own, own_probabilities, corners, probabilities

    # The image's size fixed (RetinaNet's decode_predictions needs it as numbers).
    model._prediction_decoder = caught
    try:
        traced = tf.function(both, autograph=False, input_signature=[
            tf.TensorSpec((None, *images.shape[1:]), tf.float32)])
        return [tensor.numpy() for tensor in traced(images)]
    finally:
        model._prediction_decoder = original


def _free_proposals(model, images: np.ndarray) -> list[np.ndarray]:
    """The proposals traced as the explainer traces a keras-hub detector: any size."""
    def proposals(batch):
        return _proposals.proposals(model, model(batch, training=False),
                                     _proposals.image_size(batch))[:2]

    traced = tf.function(proposals, autograph=False, input_signature=[
        tf.TensorSpec((None, None, None, 3), tf.float32)])
    return [tensor.numpy() for tensor in traced(images)]


@pytest.mark.parametrize("shape", [(SIZE, SIZE), (48, 64)])
def test_proposals_are_the_models_own_decoding(detector, shape):
    kind, model = detector
    own, own_probabilities, corners, probabilities = _own_decoding(model, _images(*shape))
    assert own.shape == corners.shape and own.shape[-1] == 4
    np.testing.assert_array_equal(corners, own)
    np.testing.assert_array_equal(probabilities, own_probabilities)
    free_corners, free_probabilities = _free_proposals(model, _images(*shape))
    np.testing.assert_array_equal(free_corners, own)
    np.testing.assert_array_equal(free_probabilities, own_probabilities)
    assert np.isfinite(corners).all() and 0 < probabilities.min() < probabilities.max() < 1


def _top_proposal(model, images: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Each image's most probable proposal lying over the image (its corners ``(2, 4)``,
    the first image's class, each image's probability of that class)."""
    _, _, corners, probabilities = _own_decoding(model, images)
    over = ((corners[..., 2] > 1) & (corners[..., 3] > 1) & (corners[..., 0] < SIZE - 1)
            & (corners[..., 1] < SIZE - 1))
    best = np.argmax(probabilities.max(-1) * over, axis=1)
    label = int(np.argmax(probabilities[0, best[0]]))
    rows = np.arange(len(images))
    return corners[rows, best], label, probabilities[rows, best, label]


def test_every_kind_of_method_explains_a_detection(detector):
    kind, model = detector
    images = _images()
    box, label, scores = _top_proposal(model, images)
    target = Detection(box, label=label)
    explainer = guidedbp.Explainer(model, method=("vanilla", "guided", "gradcam"))
    explanation = explainer.explain(images, target)
    # The model's own box: IoU 1, the score its class score.
    np.testing.assert_allclose(explanation.detections[:, :4], box, rtol=1e-6)
    np.testing.assert_allclose(explanation.detections[:, 4], 1.0)
    np.testing.assert_allclose(explanation.logits, scores, rtol=1e-6)
    for method in ("vanilla", "guided"):
        maps = explanation.by_method[method]
        assert maps.shape == (2, SIZE, SIZE, 3) and np.isfinite(maps).all()
        assert all(np.any(image != 0) for image in maps), method
    cams = explanation.by_method["gradcam"]
    assert cams.shape == (2, SIZE, SIZE, 1) and np.isfinite(cams).all()
    assert explainer.report_for((SIZE, SIZE, 3)).cam_layers["gradcam"] == CAM_LAYERS[kind]
    for method in ("occlusion", "rise"):
        # Hidden pixels at the middle of the images' [0, 1] (the default fill, 127.5, is
        # a 0-255 image's middle: it drowns every proposal of a model fed [0, 1]).
        maps = guidedbp.Explainer(model, method=method, patch=8, stride=8, masks=20,
                                  seed=0, fill=0.5).explain(images, target).maps
        assert maps.shape == (2, SIZE, SIZE, 1) and np.isfinite(maps).all()
        assert all(image.max() > image.min() for image in maps), method


def _similarity(model, kind: str, box: np.ndarray, label: int):
    """``images -> max_j IoU(box, box_j) * p_j[label]``, written out on the raw outputs."""
    def score(images):
        raw = model(images, training=False)
        if kind == "d-fine":
            relative = raw["pred_boxes"] * SIZE
            found = tf.concat([relative[..., :2] - relative[..., 2:] / 2,
                               relative[..., :2] + relative[..., 2:] / 2], axis=-1)
            probabilities = tf.sigmoid(raw["logits"])
        else:
            anchors = tf.concat(list(model.anchor_generator(images).values()), axis=0)
            decoded = keras.utils.bounding_boxes.decode_deltas_to_boxes(
                anchors=anchors, boxes_delta=raw["bbox_regression"], encoded_format="center_xywh",
                anchor_format="yxyx", box_format="yxyx", image_shape=(SIZE, SIZE, 3))
            found = tf.gather(decoded, [1, 0, 3, 2], axis=-1)
            probabilities = tf.sigmoid(raw["cls_logits"])
        corners = tf.constant(box, tf.float32)[:, None, :]
        width = tf.nn.relu(tf.minimum(corners[..., 2], found[..., 2])
                           - tf.maximum(corners[..., 0], found[..., 0]))
        height = tf.nn.relu(tf.minimum(corners[..., 3], found[..., 3])
                            - tf.maximum(corners[..., 1], found[..., 1]))
        inter = width * height
        union = ((corners[..., 2] - corners[..., 0]) * (corners[..., 3] - corners[..., 1])
                 + (found[..., 2] - found[..., 0]) * (found[..., 3] - found[..., 1]) - inter)
        return tf.reduce_max(inter / union * probabilities[..., label], axis=1)

    return score


def _tape(score, images: np.ndarray) -> np.ndarray:
    batch = tf.constant(images)
    with tf.GradientTape() as tape:
        tape.watch(batch)
        total = tf.reduce_sum(score(batch))
    return tape.gradient(total, batch).numpy()


def test_the_gradient_is_the_similaritys_through_every_stop(detector, monkeypatch):
    # A box off the proposal's (IoU < 1, so the box's own movement counts). D-FINE stops
    # the gradient at its query selection and reference points (keras.ops.stop_gradient, a
    # training device): with it, the tape's gradient misses how the boxes move; the
    # engine's map is the tape's with stop_gradient made the identity.
    kind, model = detector
    images = _images()
    box, label, _ = _top_proposal(model, images)
    box = box + np.array([-1.5, 0.5, 2.0, 1.0], np.float32)
    maps = guidedbp.Explainer(model, method="vanilla").explain(
        images, Detection(box, label=label)).maps
    score = _similarity(model, kind, box, label)
    stopped = _tape(score, images)
    from keras.src.backend.tensorflow import core

    monkeypatch.setattr(core, "stop_gradient", lambda value: value)
    expected = _tape(score, images)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(maps, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())
    if kind == "d-fine":
        assert np.abs(stopped).max() < 0.01 * np.abs(expected).max()
    else:  # no stop on RetinaNet's path
        np.testing.assert_allclose(stopped, expected, rtol=1e-6, atol=1e-12)


def test_a_saved_detector_loads_and_explains_alike(detector, tmp_path):
    kind, model = detector
    images = _images()
    box, label, _ = _top_proposal(model, images)
    target = Detection(box, label=label)
    path = tmp_path / f"{kind}.keras"
    model.save(path)
    loaded = guidedbp.load_model(str(path))
    assert type(loaded.model).__name__ == type(model).__name__
    method = ("vanilla", "guided")
    here = guidedbp.Explainer(model, method=method).explain(images, target)
    there = guidedbp.Explainer(loaded, method=method, preprocess="none").explain(images, target)
    for name in method:
        np.testing.assert_allclose(there.by_method[name], here.by_method[name], rtol=1e-5,
                                   atol=1e-9, err_msg=name)
    np.testing.assert_array_equal(there.detections, here.detections)
