"""guidedbp as a library: the method registry, the options objects, several methods from
one forward pass, explain_files/explain_image, and the error and warning policy.

One small colour CNN (saved as .keras) and one random CNN serve the module.
"""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from pathlib import Path

import click
import keras
import numpy as np
import pytest
import tensorflow as tf

import guidedbp
from guidedbp import Explainer, NoReluWarning, RunOptions, explain_files, explain_image
from guidedbp.cli.explain import explain_command
from guidedbp.engine.methods.registry import REGISTRY, as_methods, method
from guidedbp.engine.options import BASELINES, UPSAMPLING, MethodOptions
from guidedbp.engine.rules import relu as _relu
from guidedbp.errors import ArgumentError, GuidedbpError
from guidedbp.io.inputs import output_stem
from guidedbp.io.manifest import read_manifest
from guidedbp.models.resizing import RESIZE_MODES
from guidedbp.render import COLORMAPS
from guidedbp.render.options import OUTPUT_SIZES

from .helpers import assert_one_line_error, run_cli, tinted_noise
from .models import cam_cnn, colour_cnn, sigmoid_cnn

ALL_METHODS = tuple(REGISTRY)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("library")
    colour_cnn((16, 16, 3)).save(root / "colour.keras")
    (root / "labels.txt").write_text("red\ngreen\nblue\n")
    images = root / "images"
    (images / "sub").mkdir(parents=True)
    from PIL import Image

    for index, (name, size) in enumerate([("a.png", (20, 24)), ("sub/b.jpg", (16, 16)),
                                          ("sub/c.png", (31, 17))]):
        Image.fromarray(tinted_noise(*size, seed=index)).save(images / name)
    return root


@pytest.fixture(scope="module")
def random_cnn() -> keras.Model:
    keras.utils.set_random_seed(7)
    return keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(4, 3, activation="relu", name="conv1"),
        keras.layers.Conv2D(5, 3, activation="relu6", name="conv2"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4, activation="softmax"),
    ])


# -- the registry and the options -------------------------------------------------------------


def test_every_reader_takes_the_methods_from_the_registry():
    assert guidedbp.METHODS == tuple(REGISTRY)
    help_text = run_cli("explain", "--help", code=0).output
    for record in REGISTRY.values():
        assert f"{record.name}  " in help_text and record.title in help_text
    from guidedbp.cli.evaluate import DEFAULT_METHODS

    # By default evaluate leaves out the methods of many passes per image.
    assert DEFAULT_METHODS == tuple(m for m in ALL_METHODS if method(m).runner == "gradient")
    assert {"integrated-gradients", "scorecam", "occlusion", "squaregrad", "vargrad", "rise",
            "kernelshap", "lime", "sobol", "drise"}.isdisjoint(DEFAULT_METHODS)
    assert {"guided", "gradient-input", "eigencam"} <= set(DEFAULT_METHODS)
    bad = run_cli("explain", "demo", "x.png", "--method", "guided,nope")
    assert bad.exit_code == 2 and "nope: choose from " + ", ".join(ALL_METHODS) in bad.output


def test_cli_flags_take_defaults_and_choices_from_the_options():
    defaults = RunOptions().flat()
    params = {param.name: param for param in explain_command.params}
    for name, default in defaults.items():
        if name == "methods" or name in ("renders",):
            assert params[name].default == ",".join(default), name
        elif name == "classes":
            assert params[name].default in ((), None), name
        else:
            assert params[name].default == default, name
    choices = {"upsample": UPSAMPLING, "baseline": BASELINES, "cmap": COLORMAPS,
               "output_size": OUTPUT_SIZES, "resize": RESIZE_MODES}
    for name, expected in choices.items():
        assert tuple(params[name].type.choices) == tuple(expected), name
    assert MethodOptions().batch_size == defaults["batch_size"] == 16
    from guidedbp.cli.check import check_command
    from guidedbp.cli.evaluate import evaluate_command

    for command in (check_command, evaluate_command):
        batch = next(p for p in command.params if p.name == "batch_size")
        assert batch.default == defaults["batch_size"], command.name


def test_help_lists_options_in_titled_groups():
    text = run_cli("explain", "--help", code=0).output
    titles = ["Methods:", "Classes:", "Rendering:", "Inputs and model:", "Output:",
              "Scale-out:"]
    positions = [text.index(title) for title in titles]
    assert positions == sorted(positions)
    assert text.index("\n  --layer") < text.index("Classes:") < text.index("\n  --top-k")
    assert text.index("Scale-out:") < text.index("\n  --workers")


def test_options_are_frozen_picklable_and_checked():
    options = RunOptions.of(methods="guided,gradcam", top_k=3, renders="panel", smooth=4,
                            layer="conv", raw=True, shard=(1, 3))
    assert pickle.loads(pickle.dumps(options)) == options
    assert RunOptions.of(**options.flat()) == options
    assert options.manifest == "manifest-1-of-3.jsonl"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.methods = ("vanilla",)
    for fields, message in [({"smooth": -1}, "smooth=-1"), ({"upsample": "cubic"}, "upsample="),
                            ({"clip": 0}, "clip=0"), ({"top_k": 0}, "top_k=0"),
                            ({"colour": "red"}, "unknown option 'colour'"),
                            ({"methods": "guided,nope"}, "method='nope'"),
                            ({"classes": (1,), "top_k": 2}, "cannot be used together")]:
        with pytest.raises(ArgumentError, match=message):
            RunOptions.of(**fields)


# -- several methods, one forward pass ------------------------------------------------------


def test_several_methods_equal_each_method_alone(random_cnn):
    images = np.random.default_rng(3).normal(size=(5, 12, 12, 3)).astype(np.float32)
    # Few copies for the black-box methods (their defaults: 100 to 528 forward passes per
    # image): the same code, and both runs draw the same copies.
    options = {"steps": 4, "batch_size": 3, "masks": 8, "samples": 8, "designs": 2}
    every = as_methods("all")  # all that explain a class: D-RISE explains detections alone
    together = Explainer(random_cnn, every, **options)
    explanation = together.explain(images, [0, 1, 2, 3, 0])
    assert explanation.methods == every == tuple(m for m in ALL_METHODS if m != "drise")
    for name in every:
        alone = Explainer(random_cnn, name, **options).explain(images, [0, 1, 2, 3, 0])
        np.testing.assert_array_equal(explanation.by_method[name], alone.maps, err_msg=name)
        np.testing.assert_array_equal(explanation.probabilities, alone.probabilities)
    # One trace for every gradient method, one for integrated gradients' base, one for the
    # noisy copies of SquareGrad and VarGrad, one forward pass for the perturbed copies of
    # Score-CAM and occlusion.
    assert together.trace_count == 4
    assert together.report.method == ",".join(every)
    assert together.report.guided_activations == {"relu": 1, "relu6": 1}
    assert together.report.layer is not None


def test_several_methods_share_smoothgrad_noise(random_cnn):
    images = np.random.default_rng(4).normal(size=(2, 12, 12, 3)).astype(np.float32)
    methods = ("guided", "gradcam", "integrated-gradients")
    options = {"smooth": 3, "noise": 0.2, "seed": 5, "steps": 2}
    together = Explainer(random_cnn, methods, **options).explain(images)
    for name in methods:
        alone = Explainer(random_cnn, name, **options).explain(images)
        np.testing.assert_allclose(together.by_method[name], alone.maps, rtol=1e-6, atol=1e-7)


def test_vanilla_and_gradcam_take_one_backward_pass():
    explainer = Explainer(cam_cnn(), ("vanilla", "gradcam"))
    explainer.explain(np.ones((1, 4, 4, 1), np.float32))
    graph = next(iter(explainer._functions.values())).get_concrete_function().graph
    # One tf.gradients call: one gradient name scope.
    scopes = {op.name.split("/")[0] for op in graph.get_operations()
              if op.name.startswith("gradients")}
    assert scopes == {"gradients"}


class _FailingGradient(keras.layers.Layer):
    """The identity, whose gradient raises: an error in the middle of the backward pass."""

    graphs: list = []

    def call(self, x):
        _FailingGradient.graphs.append(tf.compat.v1.get_default_graph())

        @tf.custom_gradient
        def identity(y):
            def gradient(upstream):
                raise RuntimeError("gradient exploded")

            return tf.identity(y), gradient

        return identity(x)


def test_gradient_swaps_are_undone_after_an_error():
    inputs = keras.Input((4, 4, 1))
    x = keras.layers.Conv2D(2, 1, activation="relu")(_FailingGradient()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(x)))
    explainer = Explainer(model, ("vanilla", "guided"))
    with pytest.raises(RuntimeError, match="gradient exploded"):
        explainer(np.ones((1, 4, 4, 1), np.float32))
    relus = [op for op in _FailingGradient.graphs[-1].get_operations() if op.type == "Relu"]
    assert len(relus) == 1
    # The plain pass set the ReLU back to its own gradient; finally restored the guided one.
    assert relus[0].get_attr("_gradient_op_type") == _relu.GUIDED_GRADIENT.encode()


def test_reports_are_kept_per_input_signature():
    model = keras.Sequential([keras.Input((None, None, 1)),
                              keras.layers.Conv2D(2, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    explainer = Explainer(model)
    first = explainer.report_for((None, None, 1))
    explainer(np.ones((2, 5, 7, 1), np.float32))
    explainer(np.ones((1, 9, 6, 1), np.float32))
    assert explainer.report_for((None, None, 1)) is first and explainer.trace_count == 1


# -- explain_files, explain_image -----------------------------------------------------------


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_explain_files_writes_what_the_command_writes(workspace, tmp_path):
    model, images = workspace / "colour.keras", workspace / "images"
    labels = workspace / "labels.txt"
    flags = ["--method", "guided,gradcam", "--render", "color,panel", "--top-k", "2", "--raw",
             "--labels", str(labels)]
    run_cli("explain", model, images, "-o", tmp_path / "cli", "-q", *flags, code=0)
    summary = explain_files(str(model), [str(images)], tmp_path / "api",
                            methods=("guided", "gradcam"), renders=("color", "panel"), top_k=2,
                            raw=True, load={"labels": str(labels)})
    assert (summary.done, summary.failures, summary.exit_code) == (3, [], 0)
    cli, api = _files(tmp_path / "cli"), _files(tmp_path / "api")
    assert len(cli) == 2 + 3 * 2 * (2 * 1 + 1 + 2)  # manifest, page; 3 images x 2 classes
    assert cli.keys() == api.keys()
    assert [name for name in cli if cli[name] != api[name]] == []  # the manifest too
    records = read_manifest(tmp_path / "api" / "manifest.jsonl")
    assert [len(r["targets"]) for r in records] == [2, 2, 2]


def test_class_names_work_wherever_the_cli_takes_them(workspace, tmp_path):
    model, labels = workspace / "colour.keras", workspace / "labels.txt"
    summary = explain_files(str(model), str(workspace / "images"), tmp_path, classes=("blu",),
                            load={"labels": str(labels)}, renders="color")
    assert summary.done == 3
    assert {r["label"] for r in read_manifest(tmp_path / "manifest.jsonl")} == {"blue"}
    explainer = Explainer(guidedbp.load_model(str(model), labels=str(labels)))
    image = workspace / "images" / "a.png"
    by_name = explain_image(explainer, image, target="green")
    assert (by_name.target, by_name.label) == (1, "green")
    np.testing.assert_array_equal(by_name.maps["guided"], explain_image(explainer, image, 1)
                                  .maps["guided"])
    with pytest.raises(GuidedbpError, match="'purple'"):
        explain_image(explainer, image, target="purple")


def test_explain_image_matches_the_command(workspace, tmp_path):
    model, image = workspace / "colour.keras", workspace / "images" / "sub" / "c.png"
    run_cli("explain", model, image, "-o", tmp_path, "-q", "--raw", "--method",
            "guided,vanilla", code=0)
    result = explain_image(str(model), image, methods="guided,vanilla")
    assert result.image.shape == (31, 17, 3) and result.fitted.shape == (16, 16, 3)
    for name in ("guided", "vanilla"):
        raw = tmp_path / f"{output_stem(str(image))}.{name}.npy"
        np.testing.assert_array_equal(result.maps[name], np.load(raw))
        assert result.original_maps()[name].shape == (31, 17, 3)
    record = read_manifest(tmp_path / "manifest.jsonl")[0]
    assert (result.target, round(result.probability, 6)) == (record["class"], record["score"])


# -- errors and warnings --------------------------------------------------------------------


def test_an_internal_error_exits_3_with_one_line(workspace, monkeypatch):
    import guidedbp.pipeline.run as run

    def broken(*args, **kwargs):
        return {}["missing"]  # a bug: KeyError

    monkeypatch.setattr(run, "explain_files", broken)
    result = run_cli("explain", workspace / "colour.keras", workspace / "images")
    line = assert_one_line_error(result, "internal error: KeyError", "--debug", "report",
                                 code=3)
    assert "Traceback" not in line
    with pytest.raises(KeyError):
        run_cli("explain", workspace / "colour.keras", workspace / "images", "--debug",
                catch_exceptions=False)


def test_expected_errors_exit_2_in_the_commands_words(workspace, tmp_path):
    result = run_cli("explain", workspace / "colour.keras", workspace / "images", "-o",
                     tmp_path, "--layer", "no_such_layer", "--method", "gradcam")
    assert_one_line_error(result, "no layer named 'no_such_layer'")
    lambda_model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Lambda(lambda x: x),
                                     keras.layers.Flatten(), keras.layers.Dense(2)])
    lambda_model.save(tmp_path / "lambda.keras")
    with pytest.raises(GuidedbpError, match=r"unsafe_deserialization=True"):
        guidedbp.load_model(str(tmp_path / "lambda.keras"))
    result = run_cli("explain", tmp_path / "lambda.keras", workspace / "images")
    assert_one_line_error(result, "pass --unsafe-deserialization")


def test_no_relu_warning_points_at_the_callers_line():
    model = keras.Sequential([keras.Input((2, 2, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(2, activation="linear")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Explainer(model, "guided")(np.ones((1, 2, 2, 1), np.float32))
    found = [w for w in caught if issubclass(w.category, NoReluWarning)]
    assert len(found) == 1 and found[0].filename == __file__


def test_the_cli_prints_a_warning_as_one_line(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 1))
    flat = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs))
    keras.Model(inputs, keras.layers.Dense(2)(flat)).save(tmp_path / "m.keras")
    from PIL import Image

    Image.fromarray(tinted_noise(6, 6, channels=1)).save(tmp_path / "x.png")
    result = run_cli("explain", tmp_path / "m.keras", tmp_path / "x.png", "-o", tmp_path / "o",
                     "-q", code=0)
    lines = result.stderr.splitlines()
    warned = [line for line in lines if line.startswith("warning: ")]
    assert len(warned) == 1 and "no activation to guide" in warned[0]
    assert not any(".py" in line for line in lines)


def test_library_messages_name_parameters_and_the_cli_translates():
    from guidedbp.cli.exits import as_flags

    command = click.Command("x", params=[click.Option(["--input-key"]),
                                         click.Option(["--weights"]),
                                         click.Option(["--unsafe-deserialization"],
                                                      is_flag=True)])
    ctx = click.Context(command)
    assert as_flags("choose one with input_key=KEY", ctx) == "choose one with --input-key KEY"
    assert as_flags("random weights (weights='none')", ctx) == "random weights (--weights none)"
    assert as_flags("pass unsafe_deserialization=True", ctx) == "pass --unsafe-deserialization"
    # Names that are not the command's options stay as they are.
    assert as_flags("x=1 and labels=FILE", ctx) == "x=1 and labels=FILE"


def test_sigmoid_models_still_explain_both_classes():
    model = sigmoid_cnn()
    explanation = Explainer(model, ("guided", "vanilla")).explain(
        np.full((1, 6, 6, 1), 128, np.float32), [0])
    assert explanation.class_probabilities.shape == (1, 2)
    np.testing.assert_allclose(explanation.class_probabilities.sum(axis=1), 1.0, rtol=1e-6)


def test_top_k_and_several_classes_share_one_forward_pass(random_cnn):
    images = np.random.default_rng(6).normal(size=(5, 12, 12, 3)).astype(np.float32)
    methods = ("guided", "vanilla", "gradcam")
    explainer = Explainer(random_cnn, methods)
    ranked = explainer.explain_top_k(images, 3)
    probabilities = ranked[0].class_probabilities
    expected = np.argsort(-probabilities, axis=1, kind="stable")[:, :3]
    assert np.array_equal(np.stack([e.targets for e in ranked], axis=1), expected)
    for column, explanation in enumerate(ranked):
        alone = Explainer(random_cnn, methods).explain(images, expected[:, column])
        for name in methods:
            np.testing.assert_allclose(explanation.by_method[name], alone.by_method[name],
                                       rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(explanation.probabilities, alone.probabilities, rtol=1e-6)
    traces = explainer.trace_count
    both = explainer.explain_classes(images, [2, 0])
    assert [e.targets.tolist() for e in both] == [[2] * 5, [0] * 5]
    assert explainer.trace_count == traces + 1  # one trace for two classes, reused after
    explainer.explain_classes(images[:2], [1, 3])
    assert explainer.trace_count == traces + 1
    assert len(explainer.explain_top_k(images, 9)) == 4  # no more ranks than classes
    with pytest.raises(ArgumentError, match="k=0"):
        explainer.explain_top_k(images, 0)
    smooth = Explainer(random_cnn, "guided", smooth=3, seed=1)
    np.testing.assert_allclose(smooth.explain_top_k(images, 2)[1].maps,
                               smooth.explain(images, expected[:, 1]).maps, rtol=1e-6)
