"""Engine maps against arrays worked out by hand on tiny fixed-weight models."""

import keras
import numpy as np
import pytest

from guidedbp import Explainer, NoReluWarning, saliency

from .models import GRADIENT_METHODS, X12, X3x3, cnn, mlp, prelu_mlp, relu6_mlp, sigmoid_head

# MLP, class 0. Forward: pre1 = x.W1 = [3, 1, -1] -> h1 = [3, 1, 0];
# pre2 = h1.W2 = [2, 5] -> h2 = [2, 5]; logits = [2 - 5, 1 + 2.5] = [-3, 3.5].
# d logit0 / d h2 = [1, -1].
#   vanilla:   mask2 [1, 1] -> [1, -1]; W2.[1, -1] = [0, -3, 0]; mask1 [1, 1, 0]
#              -> [0, -3, 0]; W1.[0, -3, 0] = [3, -3]
#   guided:    clamp [1, 0]; mask2 -> [1, 0]; W2.[1, 0] = [1, -1, 2]; clamp [1, 0, 2];
#              mask1 -> [1, 0, 0]; W1.[1, 0, 0] = [1, 1]
#   deconvnet: clamp [1, 0]; W2.[1, 0] = [1, -1, 2]; clamp [1, 0, 2]; W1.[1, 0, 2] = [3, -1]
# Class 1 (the top-1, logit 3.5): d/dh2 = [0.5, 0.5] is positive all the way down:
#   W2.[.5, .5] = [1, .5, 2]; mask1 -> [1, .5, 0]; W1.[1, .5, 0] = [0.5, 1.5] for all methods
#   but deconvnet, which skips mask1: W1.[1, .5, 2] = [2.5, -0.5].
MLP_CLASS0 = {"vanilla": [3, -3], "guided": [1, 1], "deconvnet": [3, -1]}
MLP_CLASS1 = {"vanilla": [0.5, 1.5], "guided": [0.5, 1.5], "deconvnet": [2.5, -0.5]}

# CNN: conv pre = [[1, 3], [1, -1]] (kernel [[1, -1], [1, 1]], bias -2) -> h = [[1, 3], [1, 0]].
# d logit0 / d h = [[1, -1], [2, 1]].
#   vanilla g = [[1, -1], [2, 0]], guided g = [[1, 0], [2, 0]], deconvnet g = [[1, 0], [2, 1]].
# The input gradient is the full correlation of g with the kernel k:
#   dx = [[g00, g01 - g00, -g01],
#         [g00 + g10, g00 + g01 - g10 + g11, g01 - g11],
#         [g10, g10 + g11, g11]]
CNN_CLASS0 = {
    "vanilla": [[1, -2, 1], [3, -2, -1], [2, 2, 0]],
    "guided": [[1, -1, 0], [3, -1, 0], [2, 2, 0]],
    "deconvnet": [[1, -1, 0], [3, 0, -1], [2, 3, 1]],
}


@pytest.fixture(scope="module")
def mlp_model():
    return mlp()


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_mlp_matches_hand_computation(mlp_model, method):
    maps = Explainer(mlp_model, method)(X12, target=0)
    expected = np.array(MLP_CLASS0[method], np.float32).reshape(1, 1, 1, 2)
    np.testing.assert_array_equal(maps, expected)


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_top1_default_target_is_class_1(mlp_model, method):
    explanation = Explainer(mlp_model, method).explain(X12)
    assert explanation.targets.tolist() == [1]
    assert explanation.logits.tolist() == [3.5]
    np.testing.assert_array_equal(explanation.maps.ravel(), MLP_CLASS1[method])


@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_cnn_matches_hand_computation(method):
    maps = Explainer(cnn(), method)(X3x3, target=0)
    np.testing.assert_array_equal(maps[0, :, :, 0], np.array(CNN_CLASS0[method], np.float32))


def test_per_image_targets(mlp_model):
    maps = Explainer(mlp_model, "guided")(np.concatenate([X12, X12, X12]), target=[0, 1, 0])
    np.testing.assert_array_equal(maps.reshape(3, 2), [MLP_CLASS0["guided"], MLP_CLASS1["guided"],
                                                       MLP_CLASS0["guided"]])


def test_softmax_head_is_bypassed_to_the_logit():
    # Same weights with a softmax: the maps are those of the logit, not the probability.
    explainer = Explainer(mlp("softmax"), "guided")
    explanation = explainer.explain(X12, target=0)
    np.testing.assert_array_equal(explanation.maps.ravel(), MLP_CLASS0["guided"])
    assert explainer.report.head == "softmax"
    assert explanation.logits.tolist() == [-3.0]
    # softmax([-3, 3.5])[0] = 1 / (1 + e^6.5)
    np.testing.assert_allclose(explanation.probabilities, [1 / (1 + np.exp(6.5))], rtol=1e-6)


@pytest.mark.parametrize(
    "head_layer", [keras.layers.Softmax(), keras.layers.Activation("softmax")],
    ids=["Softmax", "Activation"],
)
def test_softmax_layer_head_is_bypassed(mlp_model, head_layer):
    model = keras.Sequential([mlp_model, head_layer])
    explainer = Explainer(model, "vanilla")
    np.testing.assert_array_equal(explainer(X12, 0).ravel(), MLP_CLASS0["vanilla"])
    assert explainer.report.head == "softmax"


def test_logit_model_reports_no_head(mlp_model):
    explainer = Explainer(mlp_model, "guided")
    assert explainer.report.head is None
    # no head: probabilities are the softmax of the logits: softmax([-3, 3.5])[1]
    np.testing.assert_allclose(explainer.explain(X12).probabilities, [1 / (1 + np.exp(-6.5))],
                               rtol=1e-6)


def test_single_unit_sigmoid_head_explains_its_logit():
    # h = relu([3, 1]) = [3, 1]; z = 3 - 2 = 1 -> p = sigmoid(1), top-1 is class 1.
    # class 1 scores z: d/dh = [1, -2]; guided clamp -> [1, 0] -> W1.[1, 0] = [1, 1];
    #   vanilla W1.[1, -2] = [3, -1].
    # class 0 scores -z: d/dh = [-1, 2]; guided clamp -> [0, 2] -> W1.[0, 2] = [-2, 2].
    model = sigmoid_head()
    guided = Explainer(model, "guided")
    explanation = guided.explain(np.concatenate([X12, X12]), target=[1, 0])
    np.testing.assert_array_equal(explanation.maps.reshape(2, 2), [[1, 1], [-2, 2]])
    sigmoid1 = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(explanation.probabilities, [sigmoid1, 1 - sigmoid1], rtol=1e-6)
    assert guided.report.head == "sigmoid" and guided.report.num_classes == 2
    assert guided.explain(X12).targets.tolist() == [1]
    np.testing.assert_array_equal(Explainer(model, "vanilla")(X12, 1).ravel(), [3, -1])


# ReLU6: pre = x.W1 = [8, 1, -1] -> relu6 = [6, 1, 0]; the mask is 0 < pre < 6 = [0, 1, 0].
#   class 0, d/dh = [1, -2, 3]: vanilla -> [0, -2, 0] -> W1.[0, -2, 0] = [2, -2];
#     guided -> clamp [1, 0, 3] -> mask [0, 0, 0] -> [0, 0];
#     deconvnet -> clamp [1, 0, 3] -> W1.[1, 0, 3] = [7, -1]
#   class 1, d/dh = [1, 2, 3]: guided -> [0, 2, 0] -> [-2, 2] (a plain ReLU's mask [1, 1, 0]
#     would give W1.[1, 2, 0] = [2, 4]).
RELU6_CLASS0 = {"vanilla": [2, -2], "guided": [0, 0], "deconvnet": [7, -1]}


@pytest.mark.parametrize(
    "make_layer",
    [lambda: keras.layers.ReLU(max_value=6.0), lambda: keras.layers.Activation("relu6")],
    ids=["ReLU(max_value=6)", "Activation(relu6)"],
)
@pytest.mark.parametrize("method", GRADIENT_METHODS)
def test_relu6_mask_is_zero_outside_0_6(make_layer, method):
    explainer = Explainer(relu6_mlp(make_layer()), method)
    np.testing.assert_array_equal(explainer(X12, 0).ravel(), RELU6_CLASS0[method])
    if method == "guided":
        np.testing.assert_array_equal(explainer(X12, 1).ravel(), [-2, 2])
        assert explainer.report.guided_activations == {"relu6": 1}


def test_prelu_keeps_its_plain_gradient_in_the_relu_scope():
    # pre = [3, -2] -> PReLU(0.25) = [3, -0.5]; d logit0 / dh = [-1, 2];
    # PReLU slope [1, 0.25] -> [-1, 0.5]; W1.[-1, 0.5] = [-2, -1], for every method.
    model = prelu_mlp()
    for method in GRADIENT_METHODS:
        explainer = Explainer(model, method, guide="relu")
        with pytest.warns(NoReluWarning) if method != "vanilla" else _no_warning():
            np.testing.assert_array_equal(explainer(X12, 0).ravel(), [-2, -1])
        assert explainer.report.plain_activations == {"prelu": 1}
        assert explainer.report.guided_activations == {}


def test_prelu_is_one_activation_in_the_all_scope():
    # g = d logit0 / dh = [-1, 2]; max(g, 0) = [0, 2]. Guided: times the slope [1, 0.25]
    # -> [0, 0.5]; W1 = [[1, -2], [1, 0]] -> [-1, 0]. Deconvnet: W1.[0, 2] = [-4, 0].
    model = prelu_mlp()
    expected = {"guided": [-1, 0], "deconvnet": [-4, 0], "vanilla": [-2, -1]}
    for method, values in expected.items():
        explainer = Explainer(model, method, guide="all")
        np.testing.assert_array_equal(explainer(X12, 0).ravel(), values)
    assert explainer.report.guided_activations == {}  # vanilla guides nothing
    assert Explainer(model, "guided", guide="all").report.guided_activations == {"prelu": 1}


class _no_warning:
    def __enter__(self):
        import warnings

        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("error", NoReluWarning)

    def __exit__(self, *exc):
        return self._catcher.__exit__(*exc)


def test_saliency_one_shot(mlp_model):
    np.testing.assert_array_equal(saliency(mlp_model, X12, 0, "deconvnet").ravel(),
                                  MLP_CLASS0["deconvnet"])
