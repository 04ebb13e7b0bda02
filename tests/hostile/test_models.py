"""Hostile models: SavedModels that act on the machine, custom objects that exit, integer
or huge inputs, and load options that were silently ignored.

Every model is built at test time. The SavedModels write to and read from files under
the test's temporary folder; each test checks that nothing was written unless the
caller opted in with ``unsafe_deserialization=True``.
"""

import re
import resource
import sys
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from tensorflow.python.framework import op_def_registry

from guidedbp import ModelLoadError, load_model
from guidedbp.models import safety
from guidedbp.models.frozen import FrozenGraph
from guidedbp.models.loaded import MAX_INPUT_ELEMENTS

from ..helpers import assert_one_line_error, run_cli

IMAGES = np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype(np.float32)
SIGNATURE = tf.TensorSpec((None, 8, 8, 3), tf.float32)
OPT_IN = "if you trust this SavedModel, pass unsafe_deserialization=True"


def write_image(path: Path) -> Path:
    Image.fromarray(IMAGES[0].astype(np.uint8)).save(path)
    return path


def small_cnn(input_shape=(8, 8, 3), dtype="float32") -> keras.Model:
    """Conv2D -> BatchNormalization -> ReLU6 -> Flatten -> Dense(5, softmax)."""
    inputs = keras.Input(input_shape, dtype=dtype)
    x = keras.layers.Conv2D(4, 3, activation="relu")(keras.ops.cast(inputs, "float32"))
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU(6.0)(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(x), name="cnn")


# -- SavedModels whose serving graph acts on the machine ----------------------------------


class Hostile(tf.Module):
    """Signatures that write and read files, call Python or print, beside their scores."""

    def __init__(self, target: str, secret: str):
        super().__init__()
        self.target, self.secret = target, secret
        self.w = tf.Variable(np.ones((3, 5), np.float32))

    def scores(self, images):
        return tf.nn.relu(tf.reduce_mean(images, axis=[1, 2]) @ self.w)

    @tf.function(input_signature=[SIGNATURE])
    def files(self, images):
        tf.io.write_file(self.target, "written by the model")
        stolen = tf.cast(tf.strings.length(tf.io.read_file(self.secret)), tf.float32)
        return {"scores": self.scores(images) + 0.0 * stolen}

    @tf.function(input_signature=[SIGNATURE])
    def py_function(self, images):
        doubled = tf.py_function(lambda x: 2 * x, [images], tf.float32)
        return {"scores": self.scores(tf.reshape(doubled, tf.shape(images)))}

    @tf.function(input_signature=[SIGNATURE])
    def numpy_function(self, images):
        doubled = tf.numpy_function(lambda x: 2 * x, [images], tf.float32)
        return {"scores": self.scores(tf.reshape(doubled, tf.shape(images)))}

    @tf.function(input_signature=[SIGNATURE])
    def printing(self, images):
        tf.print("pixels:", images)
        return {"scores": self.scores(images)}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The Hostile SavedModel, its write target (absent) and the file it reads."""
    folder = tmp_path_factory.mktemp("hostile")
    target, secret = folder / "written.txt", folder / "secret.txt"
    secret.write_text("the user's secret")
    module = Hostile(str(target), str(secret))
    saved = folder / "saved"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "py_function will not be serialized": the point
        tf.saved_model.save(module, str(saved), signatures={
            "serving_default": module.files, "py_function": module.py_function,
            "numpy_function": module.numpy_function, "printing": module.printing,
        })
    assert not target.exists()
    return saved, target


def test_a_saved_model_that_writes_and_reads_files_is_refused_before_it_runs(hostile):
    saved, target = hostile
    with pytest.raises(ModelLoadError) as caught:
        load_model(saved)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{str(saved)!r} signature 'serving_default' uses TensorFlow ops")
    named = re.search(r"\(([^)]*)\): such ops", message).group(1).split(", ")
    assert {"ReadFile", "WriteFile"} <= set(named) and named == sorted(set(named))
    assert message.endswith(OPT_IN)
    assert not target.exists()


def test_explain_refuses_it_in_one_line_and_writes_nothing(hostile, tmp_path):
    saved, target = hostile
    result = run_cli("explain", saved, write_image(tmp_path / "image.png"),
                     "-o", tmp_path / "out")
    assert_one_line_error(result, "ReadFile", "WriteFile", "--unsafe-deserialization")
    assert not target.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unsafe_deserialization_loads_it_and_then_its_ops_do_run(hostile):
    saved, target = hostile
    loaded = load_model(saved, unsafe_deserialization=True)
    assert isinstance(loaded.model, FrozenGraph) and not target.exists()
    loaded(tf.constant(IMAGES))  # the caller opted in: the model's own ops run
    assert target.read_text() == "written by the model"
    target.unlink()


@pytest.mark.parametrize("signature, ops", [
    ("py_function", {"EagerPyFunc"}),
    ("numpy_function", {"PyFunc"}),
    ("printing", {"PrintV2"}),
])
def test_python_calls_and_printing_are_refused(hostile, signature, ops):
    saved, _ = hostile
    with pytest.raises(ModelLoadError, match=f"signature '{signature}' uses") as caught:
        load_model(saved, signature=signature)
    named = set(re.search(r"\(([^)]*)\): such ops", str(caught.value)).group(1).split(", "))
    assert ops <= named


class HidesWrites(tf.Module):
    """Ordinary control flow, which is allowed, with a WriteFile hidden in a loop body or
    in a cond branch, which is not."""

    def __init__(self, target: str):
        super().__init__()
        self.target = target

    @tf.function(input_signature=[SIGNATURE])
    def in_loop_body(self, images):
        def body(i, x):
            tf.io.write_file(self.target, "written in a loop body")
            return i + 1, tf.nn.relu(x - 1.0)

        _, x = tf.while_loop(lambda i, x: i < 2, body, (tf.constant(0), images))
        return {"scores": tf.reduce_mean(x, axis=[1, 2])}

    @tf.function(input_signature=[SIGNATURE])
    def in_cond_branch(self, images):
        def writes():
            tf.io.write_file(self.target, "written in a cond branch")
            return tf.nn.relu(images)

        x = tf.cond(tf.reduce_mean(images) >= 0.0, writes, lambda: tf.nn.relu6(images))
        return {"scores": tf.reduce_mean(x, axis=[1, 2])}


@pytest.mark.parametrize("signature", ["in_loop_body", "in_cond_branch"])
def test_a_write_hidden_in_control_flow_is_refused_and_only_it_is_named(signature, tmp_path):
    target = tmp_path / "written.txt"
    module = HidesWrites(str(target))
    saved = tmp_path / "saved"
    tf.saved_model.save(module, str(saved), signatures={
        "in_loop_body": module.in_loop_body, "in_cond_branch": module.in_cond_branch})
    with pytest.raises(ModelLoadError) as caught:
        load_model(saved, signature=signature)
    # The control flow itself (While, If, their functions) is allowed: only WriteFile is named.
    assert re.search(r"\(([^)]*)\): such ops", str(caught.value)).group(1) == "WriteFile"
    assert str(caught.value).endswith(OPT_IN) and not target.exists()
    # The hidden op is real: with the caller's opt-in, explaining runs it.
    loaded = load_model(saved, signature=signature, unsafe_deserialization=True)
    loaded(tf.constant(IMAGES))
    assert target.read_text().startswith("written in a ")


class WritesWhenLoaded(tf.saved_model.experimental.TrackableResource):
    """A resource whose initializer, which tf.saved_model.load runs, writes a file."""

    def __init__(self, target: str):
        self.target = target
        super().__init__()

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name=self.target)

    def _initialize(self):
        tf.io.write_file(self.target, "written while loading")
        return tf.raw_ops.AssignVariableOp(resource=self.resource_handle, value=1.0)


class LoadTimeWriter(tf.Module):
    def __init__(self, target: str):
        super().__init__()
        self.resource = WritesWhenLoaded(target)

    @tf.function(input_signature=[SIGNATURE])
    def serve(self, images):
        return {"scores": tf.nn.relu(tf.reduce_mean(images, axis=[1, 2]))}


def test_ops_that_run_while_loading_are_checked_before_loading(tmp_path):
    target = tmp_path / "written.txt"
    module = LoadTimeWriter(str(target))
    tf.saved_model.save(module, str(tmp_path / "saved"),
                        signatures={"serving_default": module.serve})
    assert not target.exists()
    with pytest.raises(ModelLoadError) as caught:
        load_model(tmp_path / "saved")
    assert str(caught.value) == (
        f"{str(tmp_path / 'saved')!r} runs, when it loads, TensorFlow ops that are not on "
        "guidedbp's list of image-classifier ops (WriteFile): such ops could read or write "
        f"files or run code; {OPT_IN}"
    )
    assert not target.exists()
    load_model(tmp_path / "saved", unsafe_deserialization=True)
    assert target.read_text() == "written while loading"  # why the check comes first


@pytest.mark.parametrize("where", ["main_op", "local_variable"])
def test_a_tensorflow1_saved_model_init_is_checked_before_loading(tmp_path, where):
    target, folder = tmp_path / "written.txt", tmp_path / "tf1"
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        images = tf.compat.v1.placeholder(tf.float32, (None, 8, 8, 3), name="images")
        weights = tf.compat.v1.get_variable("w", initializer=tf.ones((3, 5)))
        scores = tf.nn.relu(tf.matmul(tf.reduce_mean(images, axis=[1, 2]), weights))
        write = tf.io.write_file(str(target), "written while loading")
        if where == "local_variable":  # no init op: the loader initializes local variables
            with tf.control_dependencies([write]):
                start = tf.zeros(())
            tf.compat.v1.get_variable("counter", initializer=start, trainable=False,
                                      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        session.run(tf.compat.v1.global_variables_initializer())
        builder = tf.compat.v1.saved_model.Builder(str(folder))
        signature = tf.compat.v1.saved_model.predict_signature_def({"images": images},
                                                                   {"scores": scores})
        builder.add_meta_graph_and_variables(
            session, ["serve"], signature_def_map={"serving_default": signature},
            main_op=write if where == "main_op" else None)
        builder.save()
    with pytest.raises(ModelLoadError, match=r"runs, when it loads, .*\(WriteFile\)"):
        load_model(folder)
    assert not target.exists()
    load_model(folder, unsafe_deserialization=True)
    assert target.exists()  # the TF1 loader did run it


def test_a_keras_export_of_a_small_cnn_loads_and_predicts(tmp_path):
    model = small_cnn()
    model.export(str(tmp_path / "exported"), verbose=False)
    loaded = load_model(tmp_path / "exported")
    assert isinstance(loaded.model, FrozenGraph)
    expected = model.predict(IMAGES, verbose=0)
    np.testing.assert_allclose(np.asarray(loaded(tf.constant(IMAGES))), expected, rtol=1e-5)


def test_every_listed_op_is_a_registered_tensorflow_op():
    for name in sorted(safety.CLASSIFIER_OPS | safety.LOADING_OPS):
        assert op_def_registry.get(name) is not None, f"{name} is not a TensorFlow op"


def test_the_lists_are_sorted_one_op_per_line():
    source = Path(safety.__file__).read_text()
    for name in ("CLASSIFIER_OPS", "LOADING_OPS"):
        block = source.split(f"{name} = frozenset((\n", 1)[1].split("))", 1)[0]
        names = re.findall(r'^    "(\w+)",$', block, flags=re.MULTILINE)
        assert len(names) == block.count("\n") and names == sorted(names), name


def test_no_listed_op_touches_files_processes_or_python():
    listed = safety.CLASSIFIER_OPS | safety.LOADING_OPS
    refused = {"ReadFile", "WriteFile", "MatchingFiles", "ImmutableConst", "PyFunc",
               "EagerPyFunc", "PyFuncStateless", "Print", "PrintV2", "Send", "Recv",
               "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice",
               "MergeV2Checkpoints", "InitializeTableFromTextFileV2", "DecodeProtoV2"}
    assert not listed & refused
    words = ("File", "Save", "Restore", "Summary", "Print", "Py", "Dataset", "Iterator",
             "Queue", "Reader", "Send", "Recv", "Collective", "Xla")
    assert not [name for name in listed if any(word in name for word in words)]


# -- smaller defects -------------------------------------------------------------------------


def test_custom_objects_calling_sys_exit_is_an_error_not_a_silent_success(tmp_path):
    small_cnn().save(tmp_path / "model.keras")
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(0)\n")
    # In this process: were sys.exit obeyed, the runner would see a clean exit 0.
    result = run_cli("explain", tmp_path / "model.keras", write_image(tmp_path / "x.png"),
                     "-o", tmp_path / "out", "--custom-objects", tmp_path / "quits.py")
    assert_one_line_error(
        result, f"custom objects {str(tmp_path / 'quits.py')!r} called sys.exit(0) while being "
        "imported")


def test_custom_objects_still_let_keyboard_interrupt_through(tmp_path):
    from guidedbp.models.keras_files import import_custom_objects

    (tmp_path / "interrupted.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        import_custom_objects(str(tmp_path / "interrupted.py"))
    (tmp_path / "quits.py").write_text("import sys\nsys.exit('bye')\n")
    with pytest.raises(ModelLoadError, match=r"called sys.exit\('bye'\) while being imported"):
        import_custom_objects(str(tmp_path / "quits.py"))
    assert not [name for name in sys.modules if name.startswith("guidedbp_custom_objects_quits")]


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_an_integer_input_is_refused_not_explained_as_all_zeros(dtype, tmp_path):
    model = small_cnn(dtype=dtype)
    message = (f"'cnn' takes {dtype} input; gradients need a float input (an integer "
               "input gives all-zero maps): rebuild it with a float32 Input")
    with pytest.raises(ModelLoadError) as caught:
        load_model(model)
    assert str(caught.value) == message
    model.save(tmp_path / "model.keras")
    with pytest.raises(ModelLoadError, match=f"takes {dtype} input; gradients need a float"):
        load_model(tmp_path / "model.keras")


def test_weights_given_for_a_model_file_warn_that_they_are_ignored(tmp_path):
    path = tmp_path / "model.keras"
    small_cnn().save(path)
    expected = f"weights='w.h5' applies to keras:NAME models only; ignored for {str(path)!r}"
    with pytest.warns(UserWarning, match=re.escape(expected)):
        load_model(path, weights="w.h5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model(path)
    assert not [w for w in caught if "weights=" in str(w.message)]


def test_a_local_demo_file_is_named_when_the_bundled_demo_shadows_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model("demo")
    assert not [w for w in caught if "demo" in str(w.message)]
    (tmp_path / "demo").mkdir()
    expected = ("using the bundled demo model for 'demo', though a local 'demo' exists here: "
                "name it ./demo to load that instead")
    with pytest.warns(UserWarning, match=re.escape(expected)):
        loaded = load_model("demo")
    assert loaded.format == "demo"


def test_a_declared_input_too_large_to_trace_is_refused_at_load_time(tmp_path):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    inputs = keras.Input((30000, 30000, 3))  # 2.7e9 values: 10.8 GB as float32
    outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(inputs))
    model = keras.Model(inputs, outputs, name="huge")
    with pytest.raises(ModelLoadError) as caught:
        load_model(model)
    assert str(caught.value) == (
        f"'huge' declares an input of shape (30000, 30000, 3) (2,700,000,000 values per "
        f"image), more than guidedbp traces ({MAX_INPUT_ELEMENTS:,}, e.g. 4729x4729x3): "
        "export it with a smaller or free (None) input size"
    )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1024**2  # < 1 GiB
    assert 4729 * 4729 * 3 <= MAX_INPUT_ELEMENTS < 4730 * 4730 * 3


class Huge(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec((None, 30000, 30000, 3), tf.float32)])
    def serve(self, images):
        return {"scores": tf.reduce_mean(images, axis=[1, 2])}


def test_a_saved_model_declaring_a_huge_input_is_refused(tmp_path):
    module = Huge()
    tf.saved_model.save(module, str(tmp_path / "huge"),
                        signatures={"serving_default": module.serve})
    with pytest.raises(ModelLoadError, match=r"declares an input of shape \(30000, 30000, 3\)"):
        load_model(tmp_path / "huge")
