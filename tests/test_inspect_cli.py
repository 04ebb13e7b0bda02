"""``guidedbp inspect MODEL``: what it prints, as text and as JSON, in-process and for real."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import keras
import pytest

from .helpers import run_cli
from .models import gelu_cnn, mixed_relu_cnn, sigmoid_cnn

REPO = Path(__file__).resolve().parents[1]
RESCALING_NOTE = (
    "no Rescaling/Normalization layer at the input: if the model was trained on scaled "
    "pixels, pass --preprocess MODE (scale01, tf, caffe or torch)"
)
PLAIN_GRADIENT_NOTE = ("no activation to guide: guided backprop equals the plain gradient for "
                       "this model")


def inspect(*args):
    result = run_cli("inspect", *args)
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert result.stderr == ""
    return result.stdout


def inspect_json(*args) -> dict:
    return json.loads(inspect(*args, "--json"))


def fields(text: str) -> dict:
    """The 'key  value' lines of the text description (notes and outputs in lists)."""
    parsed = {"note": [], "output": []}
    for line in text.splitlines():
        if line.startswith("class names"):
            break
        key, value = line[:11].strip(), line[12:]
        if key in ("note", "output"):
            parsed[key].append(value)
        else:
            parsed[key] = value
    return parsed


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspect")
    mixed_relu_cnn().save(folder / "mix.keras")  # Relu x2, Relu6, LeakyReLU, softmax head
    gelu_cnn().save(folder / "gelu.keras")  # GELU only, free spatial size, no head
    sigmoid_cnn().save(folder / "sigmoid.keras")  # rescales inside; one sigmoid unit
    linear = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3),
                               keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
    linear.save(folder / "linear.keras")  # no activation at all

    (folder / "three.txt").write_text("cat\ndog\nbird\n")
    (folder / "four.json").write_text('["cat", "dog", "bird", "fish"]')
    return folder


@pytest.fixture(scope="module")
def real_process(models):
    """``python -m guidedbp inspect`` in a real process, started early (it imports TF)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "guidedbp", "inspect", str(models / "mix.keras"), "--json"],
            cwd=REPO, env=env, text=True, stdout=stdout, stderr=stderr,
        )

        def finished():
            process.wait(timeout=300)
            stdout.seek(0)
            stderr.seek(0)
            return process.returncode, stdout.read(), stderr.read()

        yield finished
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module", autouse=True)
def _start_real_process_early(real_process):
    yield


def last_feature_layer(path) -> str:
    """The name Keras gave the layer before a saved model's global pooling."""
    layers = keras.saving.load_model(path).layers
    return next(layers[index - 1].name for index, layer in enumerate(layers)
                if isinstance(layer, keras.layers.GlobalAveragePooling2D))


def test_json_for_a_mixed_relu_model(models):
    info = inspect_json(models / "mix.keras")
    # The output is its (unnamed) Dense layer's: dense, dense_1... as Keras counts them.
    (output,) = info["outputs"]
    assert output.pop("name").startswith("dense")
    assert info == {
        "model": str(models / "mix.keras"),
        "format": "keras",
        "input_shape": [8, 8, 3],
        "input_dtype": "float32",
        "outputs": [{"shape": [None, 3], "head": "softmax",
                     "targets": ["class", "unit", "score"]}],
        "classes": 3,
        "head_bypassed": "softmax",
        "default_target": "class",
        "preprocess": "none",
        "preprocess_source": "default for model files (raw 0-255 pixels)",
        "resize": "stretch to 8x8",
        "guide": "all",
        "guided_activations": {"relu": 2, "relu6": 1, "leaky_relu": 1},
        "plain_activations": {},
        "unreached_activations": {},
        "cam_layer": last_feature_layer(models / "mix.keras"),  # the LeakyReLU's
        "text_tower": None,  # no two-tower model
        "detector": None,  # no boxes and class scores outputs
        "labels_source": "none (class indices only)",
        "labels": None,
        "notes": [RESCALING_NOTE],
    }


def test_text_for_a_mixed_relu_model(models):
    text = inspect(models / "mix.keras")
    name = inspect_json(models / "mix.keras")["outputs"][0]["name"]
    assert fields(text) == {
        "model": f"{models / 'mix.keras'} (keras)",
        "input": "8x8x3 float32 (HxWxC)",
        "output": [f"{name} (batch, 3), softmax head: class, unit, score function (API)"],
        "classes": "3",
        "head": "softmax bypassed: maps explain the logit",
        "preprocess": "none (default for model files (raw 0-255 pixels))",
        "resize": "stretch to 8x8",
        "guided": "relu 2, leaky_relu 1, relu6 1 (--guide all)",
        "left alone": "none",
        "cam layer": last_feature_layer(models / "mix.keras"),
        "labels": "none (class indices only)",
        "note": [RESCALING_NOTE],
    }
    assert "class names:" not in text


def test_gelu_model_is_guided_through_its_gelu(models):
    info = inspect_json(models / "gelu.keras")
    assert (info["guided_activations"], info["plain_activations"]) == ({"gelu": 1}, {})
    assert (info["head_bypassed"], info["classes"]) == (None, 2)
    assert info["input_shape"] == [None, None, 1]
    assert info["resize"] == "free spatial size: each image keeps its own size"
    assert PLAIN_GRADIENT_NOTE not in info["notes"]
    assert inspect_json(models / "gelu.keras", "--size", "32x40")["resize"] == (
        "free spatial size: 32x40"
    )
    text = fields(inspect(models / "gelu.keras"))
    assert (text["input"], text["guided"], text["left alone"]) == (
        "?x?x1 float32 (HxWxC)", "gelu 1 (--guide all)", "none"
    )
    assert text["head"] == "none: output is a logit"


def test_a_model_with_no_activation_gets_the_plain_gradient_note(models):
    info = inspect_json(models / "linear.keras")
    assert (info["guided_activations"], info["plain_activations"]) == ({}, {})
    assert PLAIN_GRADIENT_NOTE in info["notes"]
    assert PLAIN_GRADIENT_NOTE in fields(inspect(models / "linear.keras"))["note"]


def test_relu_model_gets_no_plain_gradient_note(models):
    assert PLAIN_GRADIENT_NOTE not in inspect_json(models / "mix.keras")["notes"]


def test_sigmoid_head_and_a_model_that_rescales_itself(models):
    info = inspect_json(models / "sigmoid.keras")
    assert (info["head_bypassed"], info["classes"]) == ("sigmoid", 2)
    assert info["guided_activations"] == {"relu": 1}
    assert info["notes"] == []  # a Rescaling layer inside: no preprocessing warning


def test_labels_preprocess_and_resize_options(models):
    labels = models / "three.txt"
    text = inspect(models / "mix.keras", "--labels", labels, "--preprocess", "tf",
                   "--resize", "crop")
    described = fields(text)
    assert described["labels"] == str(labels)
    assert described["preprocess"] == "tf (set by --preprocess tf)"
    assert described["resize"] == "crop to 8x8"
    assert text.endswith("class names:\n     0  cat\n     1  dog\n     2  bird\n")

    info = inspect_json(models / "mix.keras", "--labels", labels, "--preprocess", "caffe")
    assert (info["labels"], info["labels_source"]) == (["cat", "dog", "bird"], str(labels))
    assert (info["preprocess"], info["preprocess_source"]) == ("caffe", "set by --preprocess caffe")


def test_labels_that_do_not_match_the_classes_are_noted(models):
    info = inspect_json(models / "mix.keras", "--labels", models / "four.json")
    assert info["labels"] == ["cat", "dog", "bird", "fish"]
    assert "4 labels for 3 classes" in info["notes"]


def test_many_class_names_are_summarised_unless_classes_asks_for_all(models):
    labels = models / "thirty.txt"
    labels.write_text("".join(f"class{index}\n" for index in range(30)))
    text = inspect(models / "mix.keras", "--labels", labels)
    assert fields(text)["note"] == [RESCALING_NOTE, "30 labels for 3 classes"]
    assert text.endswith(
        "class names (30; --classes lists them all):\n"
        "     0  class0\n     1  class1\n     2  class2\n     3  class3\n     4  class4\n"
        "  ... 20 more ...\n"
        "    25  class25\n    26  class26\n    27  class27\n    28  class28\n    29  class29\n"
    )
    everything = inspect(models / "mix.keras", "--labels", labels, "--classes")
    assert everything.endswith("class names:\n" + "".join(
        f"  {index:>4}  class{index}\n" for index in range(30)))
    assert inspect_json(models / "mix.keras", "--labels", labels)["labels"] == [
        f"class{index}" for index in range(30)]
    # Twenty names or fewer are listed in full either way.
    labels.write_text("".join(f"class{index}\n" for index in range(20)))
    assert inspect(models / "mix.keras", "--labels", labels).endswith(
        "class names:\n" + "".join(f"  {index:>4}  class{index}\n" for index in range(20)))


def test_imagenet_classes_of_a_keras_application_are_summarised():
    text = inspect("keras:MobileNetV2", "--weights", "none")
    assert fields(text)["classes"] == "1000"
    names = text[text.index("\nclass names (") + 1:].splitlines()
    assert names[0] == "class names (1000; --classes lists them all):"
    assert (names[1], names[6], names[-1]) == ("     0  tench", "  ... 990 more ...",
                                               "   999  toilet tissue")
    assert len(names) == 12
    assert len(inspect("keras:MobileNetV2", "--weights", "none", "--classes").splitlines()) \
        == len(text.splitlines()) + 989


@pytest.mark.parametrize("args, message", [
    (["--preprocess", "imagenet"], "Invalid value for '--preprocess'"),
    (["--size", "32"], "'32' is not HxW"),
    (["--labels", "no_such_labels.txt"], "does not exist"),
])
def test_bad_options_are_usage_errors(models, args, message):
    result = run_cli("inspect", models / "mix.keras", *args)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_real_process_prints_json_and_keeps_stderr_clean(models, real_process):
    returncode, stdout, stderr = real_process()
    assert returncode == 0, stderr[-3000:]
    # TensorFlow's C++ start-up logs (oneDNN, CUDA probing) must not reach the terminal,
    # even though TF_CPP_MIN_LOG_LEVEL was not set for this process.
    assert stderr == ""
    assert json.loads(stdout) == inspect_json(models / "mix.keras")
