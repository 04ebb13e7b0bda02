"""Model loading: every format, SavedModel signatures, safety, custom objects, errors.

The tiny models are built once per module. The slow parts (subprocesses that each
import TensorFlow) start in the background when the module starts and are read by
the tests that need them.
"""

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
import uuid
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

from guidedbp import Explainer, ModelLoadError, load_model
from guidedbp.cli import main
from guidedbp.errors import GuidedbpError
from guidedbp.models.frozen import FrozenGraph
from guidedbp.models.loading import LoadedModel

from .helpers import assert_one_line_error

REPO = Path(__file__).resolve().parents[1]
IMAGES = np.random.default_rng(7).uniform(0, 255, (3, 8, 8, 3)).astype(np.float32)
TARGETS = [0, 2, 4]


def relative_error(actual, expected) -> float:
    return float(np.abs(actual - expected).max()) / max(float(np.abs(expected).max()), 1e-30)


def cli(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


# -- background subprocesses ----------------------------------------------------------------


class Child:
    """A Python subprocess started early and read once, when a test needs it.

    Its output goes to files, not pipes, so that a chatty child never blocks on a
    full pipe while nobody reads it.
    """

    def __init__(self, args: list[str], env=None):
        self.stdout, self.stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, text=True,
                                        stdout=self.stdout, stderr=self.stderr)
        self._result = None

    def result(self) -> subprocess.CompletedProcess:
        if self._result is None:
            self.process.wait(timeout=300)
            self.stdout.seek(0)
            self.stderr.seek(0)
            self._result = subprocess.CompletedProcess(
                self.process.args, self.process.returncode, self.stdout.read(), self.stderr.read()
            )
        return self._result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.stdout.close()
        self.stderr.close()


# A custom layer file: {tag} makes every class and package name unique to this run, so
# a registration left by another test (registration is global) cannot make a test pass.
CUSTOM_LAYERS = '''
import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="{package}")
class Scale{tag}(keras.layers.Layer):
    """Registered: relu(x) * factor."""

    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs):
        return tf.nn.relu(inputs) * self.factor

    def get_config(self):
        return {{**super().get_config(), "factor": self.factor}}


class Shift{tag}(keras.layers.Layer):
    """Not registered: x - shift."""

    def __init__(self, shift=1.0, **kwargs):
        super().__init__(**kwargs)
        self.shift = shift

    def call(self, inputs):
        return inputs - self.shift

    def get_config(self):
        return {{**super().get_config(), "shift": self.shift}}
'''

# Runs in a fresh interpreter: the custom classes never exist in the test process
# until a test imports them through --custom-objects.
WRITE_CUSTOM_MODELS = '''
import importlib.util, json, sys
import keras, numpy as np
for layers_file, tag, model_file, expected_file in json.loads(sys.argv[1]):
    spec = importlib.util.spec_from_file_location("layers_" + tag, layers_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = keras.Input((4, 4, 1))
    x = getattr(module, "Scale" + tag)(3.0)(inputs)
    x = getattr(module, "Shift" + tag)(0.5)(x)
    outputs = keras.layers.Dense(2)(keras.layers.Flatten()(x))
    model = keras.Model(inputs, outputs)
    model.save(model_file)
    probe = np.linspace(-1, 1, 16, dtype="float32").reshape(1, 4, 4, 1)
    np.save(expected_file, model.predict(probe, verbose=0))
'''
PROBE = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 4, 4, 1)

OFFLINE_INSPECT = '''
import inspect, sys, urllib.error, urllib.request
import keras.src.utils.file_utils as file_utils
# The fake must replace what get_file really fetches with, or the child would download.
if file_utils.urlretrieve is not urllib.request.urlretrieve or "urlretrieve(" not in (
        inspect.getsource(file_utils.get_file)):
    sys.exit(3)

def offline(url, *args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

file_utils.urlretrieve = offline
from guidedbp.cli import main
main(["inspect", "keras:MobileNetV2", "--weights", "imagenet", "--json"])
'''


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    """Custom-layer files and the models written from them in a subprocess."""
    folder = tmp_path_factory.mktemp("custom")
    run = uuid.uuid4().hex[:8]
    cases = {}
    for name, suffix in (("keras", ".keras"), ("h5", ".h5"), ("module", ".keras")):
        tag = f"{name.capitalize()}{run}"
        layers_file = folder / f"layers_{name}_{run}.py"
        layers_file.write_text(CUSTOM_LAYERS.format(tag=tag, package=f"guidedbp_test_{tag}"))
        cases[name] = {
            "tag": tag,
            "package": f"guidedbp_test_{tag}",
            "layers": layers_file,
            "model": folder / f"custom_{name}{suffix}",
            "expected": folder / f"expected_{name}.npy",
        }
    spec = [
        [str(case["layers"]), case["tag"], str(case["model"]), str(case["expected"])]
        for case in cases.values()
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    cases["writer"] = Child(["-c", WRITE_CUSTOM_MODELS, json.dumps(spec)], env=env)
    return cases


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    keras_home = tmp_path_factory.mktemp("keras_home")
    env = {**os.environ, "KERAS_HOME": str(keras_home), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return keras_home, Child(["-c", OFFLINE_INSPECT], env=env)


@pytest.fixture(scope="module", autouse=True)
def _start_children_early(custom, offline):
    """Start the slow subprocesses before the first test, so they run alongside."""
    yield
    custom["writer"].stop()
    offline[1].stop()


# -- one set of weights in every format --------------------------------------------------


def small_cnn(keras_module):
    """8x8x3 -> Conv(4, 3x3, relu) -> BatchNorm -> ReLU(6) -> Flatten -> Dense(5, softmax)."""
    inputs = keras_module.Input((8, 8, 3))
    x = keras_module.layers.Conv2D(4, 3, activation="relu")(inputs)
    x = keras_module.layers.BatchNormalization()(x)
    x = keras_module.layers.ReLU(6.0)(x)
    x = keras_module.layers.Flatten()(x)
    outputs = keras_module.layers.Dense(5, activation="softmax")(x)
    return keras_module.Model(inputs, outputs)


class ServingModule(tf.Module):
    """What a TensorFlow user writes by hand: a module with a serving signature."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32, name="pixels")])
    def serve(self, pixels):
        return {"probabilities": self.model(pixels, training=False)}


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    """The same weights saved as .keras, .h5, model.export(), tf.saved_model.save(),
    and, from a tf.keras (Keras 2) twin, legacy .h5 and a Keras 2 SavedModel."""
    import tf_keras

    folder = tmp_path_factory.mktemp("formats")
    keras.utils.set_random_seed(3)
    model = small_cnn(keras)
    batch_norm = model.layers[2]
    rng = np.random.default_rng(0)
    # Non-trivial statistics, so that a format dropping them would change the map.
    batch_norm.set_weights([
        rng.uniform(0.5, 1.5, 4), rng.uniform(-0.5, 0.5, 4),
        rng.uniform(-1, 1, 4), rng.uniform(0.5, 2.0, 4),
    ])
    paths = {
        "keras": folder / "cnn.keras",
        "h5": folder / "cnn.h5",
        "export": folder / "exported",
        "tf_saved_model": folder / "module_saved",
        "tf_keras_h5": folder / "keras2.h5",
        "tf_keras_savedmodel": folder / "keras2_saved",
    }
    model.save(paths["keras"])
    model.save(paths["h5"])
    model.export(str(paths["export"]), verbose=False)
    module = ServingModule(model)
    tf.saved_model.save(module, str(paths["tf_saved_model"]),
                        signatures={"serving_default": module.serve})

    twin = small_cnn(tf_keras)
    for source, target in zip(model.layers, twin.layers):
        target.set_weights(source.get_weights())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "HDF5 is legacy": the point here
        twin.save(str(paths["tf_keras_h5"]))
    twin.save(str(paths["tf_keras_savedmodel"]), save_format="tf")
    return model, paths


FORMAT_OF = {
    "keras": "keras",
    "h5": "h5",
    "export": "savedmodel",
    "tf_saved_model": "savedmodel",
    "tf_keras_h5": "h5",
    "tf_keras_savedmodel": "savedmodel",
}


@pytest.mark.parametrize("kind", list(FORMAT_OF))
def test_every_format_loads_and_predicts_like_the_original(formats, kind):
    model, paths = formats
    loaded = load_model(paths[kind])
    assert isinstance(loaded, LoadedModel)
    assert loaded.format == FORMAT_OF[kind]
    assert isinstance(loaded.model, FrozenGraph) == (FORMAT_OF[kind] == "savedmodel")
    assert loaded.input_shape == (8, 8, 3)
    assert loaded.input_dtype == "float32"
    assert loaded.source == str(paths[kind])
    assert (loaded.preprocess, loaded.labels) == ("none", None)
    expected = model.predict(IMAGES, verbose=0)
    assert relative_error(np.asarray(loaded(tf.constant(IMAGES))), expected) < 1e-5


def test_guided_map_is_the_same_from_keras_h5_export_and_saved_model(formats):
    _, paths = formats
    maps, reports = {}, {}
    for kind in ("keras", "h5", "export", "tf_saved_model"):
        explainer = Explainer(load_model(paths[kind]), "guided")
        maps[kind] = explainer(IMAGES, TARGETS)
        reports[kind] = explainer.report
    plain = Explainer(load_model(paths["keras"]), "vanilla")(IMAGES, TARGETS)
    # Guided must differ from the plain gradient here, or agreement would prove nothing.
    assert relative_error(plain, maps["keras"]) > 0.05
    for kind in ("h5", "export", "tf_saved_model"):
        assert relative_error(maps[kind], maps["keras"]) <= 1e-5, kind
        assert reports[kind].guided_activations == reports["keras"].guided_activations, kind
        assert reports[kind].head == "softmax", kind
        assert reports[kind].num_classes == 5, kind
    assert reports["keras"].guided_activations == {"relu": 1, "relu6": 1}


def test_keras2_formats_give_the_keras3_map(formats):
    model, paths = formats
    expected = Explainer(model, "guided")(IMAGES, TARGETS)
    for kind in ("tf_keras_h5", "tf_keras_savedmodel"):
        explainer = Explainer(load_model(paths[kind]), "guided")
        assert relative_error(explainer(IMAGES, TARGETS), expected) <= 1e-5, kind
        assert explainer.report.guided_activations == {"relu": 1, "relu6": 1}, kind
        assert explainer.report.head == "softmax", kind


def test_cli_reads_a_keras2_saved_model(formats):
    _, paths = formats
    result = cli("inspect", paths["tf_keras_savedmodel"], "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["format"], info["classes"], info["head_bypassed"]) == ("savedmodel", 5, "softmax")
    assert info["guided_activations"] == {"relu": 1, "relu6": 1}


def test_in_memory_model_is_used_as_is(formats):
    model, _ = formats
    loaded = load_model(model)
    assert loaded.model is model
    assert (loaded.format, loaded.input_shape) == ("in-memory", (8, 8, 3))


# -- SavedModel signatures ---------------------------------------------------------------

W = np.random.default_rng(1).normal(size=(12, 3)).astype(np.float32)
V = np.random.default_rng(2).normal(size=(3, 3)).astype(np.float32)
SMALL = np.random.default_rng(3).normal(size=(1, 2, 2, 3)).astype(np.float32)


class Signatures(tf.Module):
    """Signatures with several outputs and several inputs, on 2x2x3 images."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(W)
        self.v = tf.Variable(V)

    def hidden(self, image):
        return tf.nn.relu(tf.reshape(image, (-1, 12)) @ self.w)

    @tf.function(input_signature=[tf.TensorSpec((None, 2, 2, 3), tf.float32)])
    def two_outputs(self, image):
        hidden = self.hidden(image)
        return {"logits": 2.0 * hidden - 1.0, "embedding": tf.nn.relu6(hidden @ self.v)}

    @tf.function(input_signature=[tf.TensorSpec((None, 2, 2, 3), tf.float32)])
    def tripled(self, image):
        return {"scores": 3.0 * self.hidden(image)}

    @tf.function(input_signature=[tf.TensorSpec((None, 2, 2, 3), tf.float32),
                                  tf.TensorSpec((None, 1, 1, 3), tf.float32)])
    def two_inputs(self, image, mask):
        hidden = self.hidden(image)
        return {"logits": hidden, "masked": hidden * tf.reshape(mask, (-1, 3))}


@pytest.fixture(scope="module")
def signatures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("signatures") / "saved"
    module = Signatures()
    tf.saved_model.save(module, str(folder), signatures={
        "serving_default": module.two_outputs,
        "tripled": module.tripled,
        "two_inputs": module.two_inputs,
    })
    return folder


def expected_map(column_grad):
    """Guided map of sum_k column_grad[k] * relu(x W)[k] at SMALL (all grads >= 0)."""
    active = (SMALL.reshape(12) @ W) > 0
    return (W @ (np.maximum(column_grad, 0) * active)).reshape(1, 2, 2, 3)


def test_two_outputs_load_as_a_dict_without_output_key(signatures):
    loaded = load_model(signatures)
    outputs = loaded(SMALL)
    assert list(outputs) == loaded.model.output_names == ["embedding", "logits"]
    hidden = np.maximum(SMALL.reshape(1, 12) @ W, 0)
    np.testing.assert_allclose(outputs["logits"].numpy(), 2.0 * hidden - 1.0, rtol=1e-5)
    # output= picks the logits: the same map as loading them alone with output_key.
    logits = Explainer(loaded, "guided", output="logits")
    np.testing.assert_allclose(logits(SMALL, 1), expected_map(2.0 * np.eye(3)[1]), rtol=1e-5)
    # Both outputs' graphs are imported; the embedding's Relu6 is off the logits' path.
    assert logits.report.guided_activations == {"relu": 1}
    assert Explainer(loaded, "guided").report.guided_activations == {"relu": 1, "relu6": 1}


def test_outputs_that_need_another_input_are_left_out_with_a_note(signatures):
    loaded = load_model(signatures, signature="two_inputs", input_key="image")
    assert loaded.model.output_names == ["logits"]
    assert list(loaded(SMALL)) == ["logits"]
    assert "output 'masked' left out: it also needs input(s) mask, which guidedbp cannot " \
           "supply" in loaded.notes
    with pytest.raises(ModelLoadError, match=r"has no output guidedbp can explain \(output "
                                             r"'logits' does not depend on input 'mask'"):
        load_model(signatures, signature="two_inputs", input_key="mask")


def test_output_key_chooses_the_output_and_prunes_the_other(signatures):
    logits = Explainer(load_model(signatures, output_key="logits"), "guided")
    np.testing.assert_allclose(logits(SMALL, 1), expected_map(2.0 * np.eye(3)[1]), rtol=1e-5)
    # The embedding's Relu6 is not on the logits' path: it is neither run nor reported.
    assert logits.report.guided_activations == {"relu": 1}

    embedding = Explainer(load_model(signatures, output_key="embedding"), "guided")
    hidden = np.maximum(SMALL.reshape(12) @ W, 0)
    pre_relu6 = hidden @ V
    through_relu6 = V[:, 0] * ((pre_relu6[0] > 0) & (pre_relu6[0] < 6))
    np.testing.assert_allclose(embedding(SMALL, 0), expected_map(through_relu6), rtol=1e-5,
                               atol=1e-6)
    assert embedding.report.guided_activations == {"relu": 1, "relu6": 1}


def test_unknown_output_key_names_the_outputs(signatures):
    expected = r"has no output 'probs' \(it has: embedding, logits\)"
    with pytest.raises(ModelLoadError, match=expected):
        load_model(signatures, output_key="probs")


def test_signature_chooses_the_function(signatures):
    loaded = load_model(signatures, signature="tripled")
    np.testing.assert_allclose(Explainer(loaded)(SMALL, 2), expected_map(3.0 * np.eye(3)[2]),
                               rtol=1e-5)
    with pytest.raises(ModelLoadError) as caught:
        load_model(signatures, signature="serve")
    assert "has no signature 'serve' (it has: serving_default, tripled, two_inputs)" in str(
        caught.value
    )


def test_two_inputs_need_input_key_and_refuse_an_unfed_one(signatures):
    expected = r"2 inputs \(image, mask\): choose one with input_key=KEY"
    with pytest.raises(ModelLoadError, match=expected):
        load_model(signatures, signature="two_inputs", output_key="logits")
    # 'masked' depends on the mask too, which guidedbp has no value for.
    with pytest.raises(ModelLoadError, match=r"output 'masked' also needs input\(s\) mask"):
        load_model(signatures, signature="two_inputs", input_key="image", output_key="masked")
    with pytest.raises(ModelLoadError, match=r"'logits' does not depend on input 'mask'"):
        load_model(signatures, signature="two_inputs", input_key="mask", output_key="logits")
    # 'logits' needs only the image: the mask is never fed.
    loaded = load_model(signatures, signature="two_inputs", input_key="image", output_key="logits")
    np.testing.assert_allclose(Explainer(loaded)(SMALL, 0), expected_map(np.eye(3)[0]), rtol=1e-5)


def tripled_kernel(graph: FrozenGraph) -> str:
    """The name of W's frozen constant in the 'tripled' signature's graph."""
    (name,) = [node.name for node in graph.graph_def.node if node.op == "Const"
               and [d.size for d in node.attr["value"].tensor.tensor_shape.dim] == [12, 3]]
    return name


def test_frozen_graph_weights_are_replaced_in_a_new_graph(signatures):
    graph = load_model(signatures, signature="tripled").model
    original_bytes = graph.graph_def.SerializeToString()
    expected = 3.0 * np.maximum(SMALL.reshape(1, 12) @ W, 0)
    np.testing.assert_allclose(np.asarray(graph(SMALL)), expected, rtol=1e-5)
    name = tripled_kernel(graph)
    assert name not in graph.weights  # 36 elements: too small to be lifted at load time

    lifted = graph.with_lifted([name])
    assert lifted is not graph and lifted.graph_def is not graph.graph_def
    np.testing.assert_array_equal(lifted.weights[name].numpy(), W)
    np.testing.assert_allclose(np.asarray(lifted(SMALL)), expected, rtol=1e-5)

    doubled = lifted.with_weights({name: 2.0 * W})
    assert doubled.graph_def is lifted.graph_def  # shared, never changed
    np.testing.assert_allclose(np.asarray(doubled(SMALL)), 2.0 * expected, rtol=1e-5)
    # Neither graph it came from changed: same outputs, same weights, same GraphDef.
    np.testing.assert_allclose(np.asarray(lifted(SMALL)), expected, rtol=1e-5)
    np.testing.assert_array_equal(lifted.weights[name].numpy(), W)
    np.testing.assert_allclose(np.asarray(graph(SMALL)), expected, rtol=1e-5)
    assert graph.graph_def.SerializeToString() == original_bytes and name not in graph.weights
    # A guided map through the replaced weight: the gradient follows 2 * W.
    np.testing.assert_allclose(Explainer(doubled)(SMALL, 2),
                               2.0 * expected_map(3.0 * np.eye(3)[2]), rtol=1e-5)

    with pytest.raises(TypeError):
        lifted.weights[name] = tf.constant(W)  # read-only view
    with pytest.raises(KeyError, match="lift it first"):
        graph.with_weights({name: W})
    with pytest.raises(ValueError, match=r"has shape \(12, 3\), got \(3, 12\)"):
        lifted.with_weights({name: W.T})
    with pytest.raises(KeyError, match="not constants of this graph: nowhere"):
        graph.with_lifted(["nowhere"])


def test_cli_signature_options(signatures):
    # Without --output-key, every output is described (and --model-output picks one).
    result = cli("inspect", signatures, "--json")
    assert result.exit_code == 0, result.stderr
    assert [output["name"] for output in json.loads(result.stdout)["outputs"]] == [
        "embedding", "logits"]
    assert_one_line_error(cli("inspect", signatures, "--output-key", "probs"),
                          "embedding, logits", "no output 'probs'")
    result = cli("inspect", signatures, "--signature", "two_inputs", "--input-key", "image",
                 "--output-key", "logits", "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["input_shape"], info["classes"], info["guided_activations"]) == (
        [2, 2, 3], 3, {"relu": 1})


# -- safe by default: Lambda layers and custom classes ---------------------------------


@pytest.fixture(scope="module")
def lambda_model(tmp_path_factory):
    inputs = keras.Input((4, 4, 1))
    doubled = keras.layers.Lambda(lambda t: t * 2.0)(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(doubled)))
    path = tmp_path_factory.mktemp("lambda") / "lambda.keras"
    model.save(path)
    return model, path


def test_lambda_layer_is_refused_unless_unsafe(lambda_model):
    model, path = lambda_model
    with pytest.raises(ModelLoadError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "Lambda" in message and "unsafe_deserialization=True" in message
    assert "--" not in message and "\n" not in message
    loaded = load_model(path, unsafe_deserialization=True)
    np.testing.assert_allclose(np.asarray(loaded(tf.constant(PROBE))), model(PROBE), rtol=1e-6)


def test_cli_lambda_layer(lambda_model):
    _, path = lambda_model
    assert_one_line_error(cli("inspect", path), "Lambda", "--unsafe-deserialization")
    result = cli("inspect", path, "--unsafe-deserialization", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["classes"] == 2


def registered(package: str) -> list[str]:
    return [name for name in keras.saving.get_custom_objects() if name.startswith(package)]


@pytest.mark.parametrize("case", ["keras", "h5"])
def test_custom_objects_file_makes_custom_classes_loadable(custom, case):
    assert custom["writer"].result().returncode == 0, custom["writer"].result().stderr[-2000:]
    files = custom[case]
    assert registered(files["package"]) == []  # else the first load would pass trivially
    with pytest.raises(ModelLoadError) as caught:
        load_model(files["model"])
    message = str(caught.value)
    assert "custom_objects=FILE_OR_MODULE" in message and files["tag"] in message
    assert "--" not in message and "\n" not in message

    loaded = load_model(files["model"], custom_objects=str(files["layers"]))
    kinds = [type(layer).__name__ for layer in loaded.model.layers]
    assert f"Scale{files['tag']}" in kinds and f"Shift{files['tag']}" in kinds
    np.testing.assert_allclose(np.asarray(loaded(tf.constant(PROBE))), np.load(files["expected"]),
                               rtol=1e-6)
    assert loaded.model.get_layer(index=1).factor == 3.0


def test_cli_custom_objects_module_name(custom, monkeypatch):
    assert custom["writer"].result().returncode == 0, custom["writer"].result().stderr[-2000:]
    files = custom["module"]
    assert registered(files["package"]) == []
    assert_one_line_error(cli("inspect", files["model"]), "--custom-objects")
    monkeypatch.syspath_prepend(str(files["layers"].parent))
    result = cli("inspect", files["model"], "--custom-objects", files["layers"].stem, "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["classes"], info["guided_activations"]) == (2, {"relu": 1})


def test_custom_objects_that_cannot_be_imported(formats, tmp_path):
    _, paths = formats
    with pytest.raises(ModelLoadError, match="custom objects file .*nowhere.py' not found"):
        load_model(paths["keras"], custom_objects=str(tmp_path / "nowhere.py"))
    with pytest.raises(ModelLoadError, match="cannot import custom objects 'no_such_module_x1'"):
        load_model(paths["keras"], custom_objects="no_such_module_x1")
    broken = tmp_path / "broken_layers.py"
    broken.write_text("raise RuntimeError('half-written file')\n")
    with pytest.raises(ModelLoadError, match="half-written file"):
        load_model(paths["keras"], custom_objects=str(broken))


# -- broken inputs: one line each, exit code 2 -------------------------------------------


@pytest.fixture(scope="module")
def broken(formats, tmp_path_factory):
    _, paths = formats
    folder = tmp_path_factory.mktemp("broken")
    (folder / "random.keras").write_bytes(np.random.default_rng(0).bytes(4096))
    (folder / "notes.h5").write_text("these are notes, not weights\n")
    for suffix in (".keras", ".h5"):
        whole = paths[suffix.lstrip(".")].read_bytes()
        (folder / f"truncated{suffix}").write_bytes(whole[: len(whole) // 2])
    (folder / "empty.keras").write_bytes(b"")
    (folder / "plain_folder").mkdir()
    (folder / "plain_folder" / "readme.txt").write_text("no model here")
    return folder


BROKEN = {
    "missing.keras": "model '{path}' not found",
    "plain_folder": "'{path}' is a directory but not a SavedModel (it has no saved_model.pb)",
    "random.keras": "'{path}' is corrupt or not a Keras model: a .keras file is a zip archive",
    "notes.h5": "'{path}' is corrupt or not a Keras model: it is not an HDF5 file",
    "truncated.keras": "'{path}' is truncated or corrupt: not a readable .keras archive",
    "truncated.h5": "'{path}' is truncated or corrupt: ",  # then h5py's own words
    "empty.keras": "'{path}' is empty, not a model file",
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_model_file_is_one_clear_line(broken, name):
    path = broken / name
    expected = BROKEN[name].format(path=path)
    with pytest.raises(ModelLoadError) as caught:
        load_model(path)
    assert str(caught.value).startswith(expected)
    assert assert_one_line_error(cli("inspect", path)).startswith("Error: " + expected)


def test_unknown_keras_application_suggests_names():
    expected = ("unknown Keras application 'keras:MobileNetV9': try keras:MobileNet, "
                "keras:MobileNetV2, keras:MobileNetV3Small, keras:MobileNetV3Large")
    with pytest.raises(ModelLoadError) as caught:
        load_model("keras:MobileNetV9", weights="none")
    assert str(caught.value) == expected
    assert assert_one_line_error(cli("inspect", "keras:MobileNetV9")) == "Error: " + expected


def test_debug_shows_the_traceback(broken):
    result = cli("inspect", broken / "notes.h5", "--debug")
    # Raised, not turned into a line: Python prints its traceback and exits with 1.
    assert isinstance(result.exception, ModelLoadError)
    assert result.exit_code == 1 and "Error:" not in result.stderr
    frames = [frame.name for frame in traceback.extract_tb(result.exc_info[2])]
    # The file's first bytes are checked before TensorFlow is imported (check_model_path).
    assert "check_model_path" in frames
    assert str(result.exception).endswith("is corrupt or not a Keras model: it is not an HDF5 file")


# -- keras:NAME ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    loaded = load_model("keras:mobilenetv2", weights="none")
    weights = tmp_path_factory.mktemp("weights") / "mobilenet_v2.weights.h5"
    loaded.model.save_weights(weights)
    return loaded, weights


def test_keras_application_by_lowercase_name(mobilenet):
    loaded, _ = mobilenet
    assert loaded.format == "keras-application"
    assert loaded.model.name.startswith("mobilenetv2")
    assert (loaded.preprocess, loaded.input_shape) == ("tf", (224, 224, 3))
    assert "MobileNetV2" in loaded.preprocess_source
    assert len(loaded.labels) == 1000
    assert (loaded.labels[0], loaded.labels[999]) == ("tench", "toilet tissue")
    assert "ImageNet" in loaded.labels_source
    assert any("random weights (weights='none')" in note for note in loaded.notes)
    # ... and it travels with every map as a caveat (preprocessing is known: no other).
    assert [c.code for c in loaded.caveats] == ["untrained-weights"]


def test_weights_path_loads_those_weights(mobilenet):
    original, weights = mobilenet
    loaded = load_model("keras:MOBILENETV2", weights=str(weights))
    for name in ("Conv1", "predictions"):
        np.testing.assert_array_equal(loaded.model.get_layer(name).get_weights()[0],
                                      original.model.get_layer(name).get_weights()[0])
    assert not any("random weights" in note for note in loaded.notes)
    assert loaded.caveats == ()


def test_missing_weights_path_is_refused_before_building(tmp_path):
    with pytest.raises(ModelLoadError, match=r"weights file '.*nope\.h5' not found"):
        load_model("keras:MobileNetV2", weights=str(tmp_path / "nope.h5"))


def test_offline_imagenet_says_which_file_to_put_where(offline):
    keras_home, child = offline
    result = child.result()
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stdout == ""  # Keras' "Downloading data from" goes to stderr, not stdout
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    filename = "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_224.h5"
    assert line.startswith(
        "Error: could not download ImageNet weights for MobileNetV2 "
        "([Errno -3] Temporary failure in name resolution): "
    )
    assert f"put {filename} (from https://" in line
    assert f" in {keras_home / 'models'}/, or pass --weights PATH" in line
    assert list((keras_home / "models").iterdir()) == []


# -- preprocessing and labels for files ---------------------------------------------------


def test_file_preprocessing_defaults_to_none_and_can_be_overridden(formats):
    _, paths = formats
    default = load_model(paths["keras"])
    assert (default.preprocess, default.preprocess_source) == (
        "none", "default for model files (raw 0-255 pixels)"
    )
    (note,) = [note for note in default.notes if "no Rescaling/Normalization layer" in note]
    assert note.endswith("pass preprocess=MODE (scale01, tf, caffe or torch)")
    chosen = load_model(paths["export"], preprocess="caffe")
    assert (chosen.preprocess, chosen.preprocess_source) == ("caffe", "set by preprocess='caffe'")
    with pytest.raises(ModelLoadError, match="unknown preprocessing 'imagenet': choose one of"):
        load_model(paths["keras"], preprocess="imagenet")


@pytest.mark.parametrize("name, text", [
    ("names.txt", "tench\ngoldfish\nshark\nhen\nostrich\n"),
    ("names.json", '["tench", "goldfish", "shark", "hen", "ostrich"]'),
    ("index.json", json.dumps({str(i): [f"n{i:08d}", n] for i, n in enumerate(
        ["tench", "goldfish", "shark", "hen", "ostrich"])})),
])
def test_labels_file(formats, tmp_path, name, text):
    _, paths = formats
    labels = tmp_path / name
    labels.write_text(text)
    loaded = load_model(paths["tf_saved_model"], labels=labels)
    assert loaded.labels == ["tench", "goldfish", "shark", "hen", "ostrich"]
    assert loaded.labels_source == str(labels)


def test_bad_labels_file_is_a_load_error(formats, tmp_path):
    _, paths = formats
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\n\ndog\n")
    with pytest.raises(ModelLoadError, match="line 2 is blank"):
        load_model(paths["keras"], labels=labels)


def test_weights_only_file_is_explained(formats, tmp_path):
    model, _ = formats
    path = tmp_path / "cnn.weights.h5"
    model.save_weights(path)
    with pytest.raises(ModelLoadError, match="holds weights only, no model"):
        load_model(path)


def test_zip_that_is_not_a_keras_archive(tmp_path):
    import zipfile

    path = tmp_path / "other.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(ModelLoadError, match=r"zip archive but not a \.keras model"):
        load_model(path)


def test_custom_objects_file_may_import_its_neighbours(tmp_path):
    from guidedbp.models.keras_files import import_custom_objects

    (tmp_path / "neighbour_scale_7f3.py").write_text("SCALE = 3.0\n")
    (tmp_path / "layers_7f3.py").write_text(
        "import keras\n"
        "from neighbour_scale_7f3 import SCALE\n\n"
        "class Scaled7f3(keras.layers.Layer):\n"
        "    def call(self, inputs):\n"
        "        return inputs * SCALE\n"
    )
    before = list(sys.path)
    objects = import_custom_objects(str(tmp_path / "layers_7f3.py"))
    assert sys.path == before  # the folder was on the path only while importing
    layer = objects["Scaled7f3"]()
    assert float(layer(np.ones((1, 1), np.float32))[0, 0]) == 3.0


# -- errors speak the library's parameters, not the CLI's flags ---------------------------

# What the CLI translates into its flags: `name=True` -> `--name`, `name=VALUE` -> `--name VALUE`.
PARAMETER = re.compile(r"\b([a-z][a-z0-9_]*)=('[^']*'|\S+)")


def test_errors_and_notes_name_load_model_parameters(signatures, lambda_model, formats, tmp_path,
                                                    mobilenet):
    model, paths = formats
    weights_only = tmp_path / "cnn.weights.h5"
    model.save_weights(weights_only)
    messages = {}
    for case, spec, kwargs in [
        ("input_key", signatures, {"signature": "two_inputs", "output_key": "logits"}),
        ("unsafe_deserialization", lambda_model[1], {}),
        ("weights", weights_only, {}),
    ]:
        with pytest.raises(ModelLoadError) as caught:
            load_model(spec, **kwargs)
        messages[case] = str(caught.value)
    (messages["preprocess"],) = load_model(paths["keras"]).notes
    (messages["weights='none'"],) = mobilenet[0].notes
    expected = {
        "input_key": [("input_key", "KEY")],
        "unsafe_deserialization": [("unsafe_deserialization", "True")],
        "weights": [("weights", "PATH")],
        "preprocess": [("preprocess", "MODE")],
        "weights='none'": [("weights", "'none'")],
    }
    parameters = set(inspect.signature(load_model).parameters)
    for case, message in messages.items():
        assert "--" not in message and "\n" not in message, message
        assert PARAMETER.findall(message) == expected[case], message
        assert {name for name, _ in PARAMETER.findall(message)} <= parameters


def test_error_classes():
    from guidedbp.models import loading
    from guidedbp.models.labels import ClassNameError

    assert loading.ModelLoadError is ModelLoadError
    assert issubclass(ModelLoadError, GuidedbpError)
    assert issubclass(ClassNameError, GuidedbpError) and issubclass(ClassNameError, ValueError)
    assert loading.FrozenGraph is FrozenGraph and loading.constant_to_placeholder


def imported_modules(path: Path) -> set[str]:
    """Every guidedbp module a file imports, at the top or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("guidedbp")}


def test_models_import_one_way():
    folder = REPO / "guidedbp" / "models"
    imports = {f"guidedbp.models.{path.stem}": imported_modules(path)
               for path in folder.glob("*.py") if path.stem != "__init__"}
    for module, names in imports.items():
        outside = {n for n in names
                   if n.split(".")[1:2] in (["engine"], ["cli"], ["checks"], ["pipeline"])}
        assert not outside, (module, outside)
        if module != "guidedbp.models.loading":
            assert "guidedbp.models.loading" not in names, module
    # Data flows one way: no module reaches itself through the modules it imports.
    for start in imports:
        reached, pending = set(), list(imports[start] & set(imports))
        while pending:
            module = pending.pop()
            if module not in reached:
                reached.add(module)
                pending.extend(imports[module] & set(imports))
        assert start not in reached, start
    assert imported_modules(REPO / "guidedbp" / "errors.py") == set()
