"""Saliency checks inside your own pytest suite: a plugin that ships with guidedbp.

Installed with the package (entry point ``pytest11``), so any ``pytest`` run sees:

- the :func:`saliency_regression` fixture: compare a map with a baseline stored beside
  the test, as pytest-regressions and pytest-mpl do for data and figures;
- the :func:`guidedbp_checks` fixture: the smoke checks of ``guidedbp check`` as
  assertions (also importable: :func:`assert_relu_coverage`,
  :func:`assert_guided_differs_from_plain`, :func:`assert_matches_reference`);
- the options ``--guidedbp-update`` (re-record every baseline the run touches) and
  ``--guidedbp-diff-dir DIR`` (where the diff pictures of failed comparisons go;
  default: the test's ``tmp_path``).

Every baseline a run records is listed at the end of the run, with the class it explains
and how similar the old baseline was to the new map (also in a JUnit XML report, as the
test's ``guidedbp-recorded`` property)::

    ============ guidedbp: 1 saliency baseline recorded ============
    tests/test_model/test_circle.npy: class 0 (circle), similarity 0.412 -> 1 (re-recorded)

Loading the plugin imports pytest and the standard library only: TensorFlow and numpy
are imported when a fixture is first used, so unrelated test runs pay nothing.

A baseline is two files in a folder named after the test module, e.g. for
``tests/test_model.py::test_circle`` with ``basename="large"``::

    tests/test_model/test_circle-large.npy   float32 (H, W): the map's magnitude
    tests/test_model/test_circle-large.json  {"format": 1, "method": "guided",
                                              "class": 0, "label": "circle", ...}

Maps are compared as ``guidedbp check --baseline`` compares them: by the Spearman rank
correlation of their magnitudes (:func:`guidedbp.checks.stats.map_similarity`), with
the same default threshold.

>>> def test_circle(saliency_regression):  # doctest: +SKIP
...     saliency_regression.check("demo", "sample_images/shapes/circle_0.png")
"""

from __future__ import annotations

import json
import os
import types
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from guidedbp.pytest_plugin.baselines import (
    BASELINE_FORMAT,
    RE_RECORD,
    UPDATE_OPTION,
    ComparedMap,
    describe_image,
    diff_picture,
    read_baseline,
    record_baseline,
    replaced_baseline,
    safe_name,
    shown_path,
    size_text,
)
from guidedbp.pytest_plugin.smoke import run_check

__all__ = ["BASELINE_FORMAT", "DIFF_DIR_OPTION", "RECORDED_PROPERTY", "UPDATE_OPTION",
           "SaliencyRegression", "assert_guided_differs_from_plain", "assert_matches_reference",
           "assert_relu_coverage", "guidedbp_checks", "recorded_line", "saliency_regression"]

DIFF_DIR_OPTION = "--guidedbp-diff-dir"
#: The test property (``item.user_properties``) naming each baseline a test recorded.
RECORDED_PROPERTY = "guidedbp-recorded"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("guidedbp", "guidedbp saliency checks")
    group.addoption(UPDATE_OPTION, action="store_true", default=False,
                    help="Re-record every saliency baseline the run touches (those tests pass).")
    group.addoption(DIFF_DIR_OPTION, metavar="DIR", default=None,
                    help="Write the diff pictures of failed saliency comparisons under DIR "
                         "(default: each test's tmp_path).")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_RecordedBaselines(), "guidedbp-recorded-baselines")


class _RecordedBaselines:
    """Collects the baselines the tests recorded (from their reports, so that it works
    under pytest-xdist too) and lists them at the end of the run."""

    def __init__(self):
        self.recorded: list[dict] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.recorded += [json.loads(value) for name, value in report.user_properties
                              if name == RECORDED_PROPERTY]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.recorded:
            return
        count = len(self.recorded)
        terminalreporter.write_sep(
            "=", f"guidedbp: {count} saliency baseline{'s' * (count != 1)} recorded")
        for entry in self.recorded:
            terminalreporter.write_line(recorded_line(entry))


def recorded_line(entry: dict) -> str:
    """One line of the end-of-run list, from a :data:`RECORDED_PROPERTY` entry.

    >>> recorded_line({"baseline": "t/a.npy", "class": "0 (circle)", "old_class": None,
    ...                "old_similarity": 0.41234, "old_shape": None, "existed": True})
    't/a.npy: class 0 (circle), similarity 0.412 -> 1 (re-recorded)'
    >>> recorded_line({"baseline": "t/b.npy", "class": "2", "old_class": None,
    ...                "old_similarity": None, "old_shape": None, "existed": False})
    't/b.npy: class 2, new'
    """
    line = f"{entry['baseline']}: class {entry['class']}"
    if entry.get("old_class") is not None:
        line += f" (was class {entry['old_class']})"
    if not entry.get("existed"):
        return f"{line}, new"
    if entry.get("old_shape"):
        return f"{line}, was {entry['old_shape']} (re-recorded)"
    if entry.get("old_similarity") is None:
        return f"{line}, old baseline unreadable (re-recorded)"
    return f"{line}, similarity {entry['old_similarity']:.3f} -> 1 (re-recorded)"


@pytest.fixture
def saliency_regression(request: pytest.FixtureRequest, tmp_path: Path) -> SaliencyRegression:
    """A :class:`SaliencyRegression` whose baselines live beside the test file."""
    module = Path(request.node.path)
    diff_dir = request.config.getoption(DIFF_DIR_OPTION)
    diff_folder = Path(diff_dir) / module.stem if diff_dir else tmp_path

    def note(entry: dict) -> None:
        request.node.user_properties.append((RECORDED_PROPERTY, json.dumps(entry)))

    return SaliencyRegression(module.parent / module.stem, safe_name(request.node.name),
                              diff_folder, request.config.getoption(UPDATE_OPTION), note)


@pytest.fixture
def guidedbp_checks() -> types.SimpleNamespace:
    """The smoke checks of ``guidedbp check`` as assertions: ``assert_relu_coverage``,
    ``assert_guided_differs_from_plain`` and ``assert_matches_reference``."""
    return types.SimpleNamespace(
        assert_relu_coverage=assert_relu_coverage,
        assert_guided_differs_from_plain=assert_guided_differs_from_plain,
        assert_matches_reference=assert_matches_reference,
    )


# -- explanation regression ----------------------------------------------------------------


class SaliencyRegression:
    """Compare saliency maps with baselines stored beside the test (fixture
    ``saliency_regression``).

    A missing baseline is recorded and the test fails saying so, so that CI never
    passes without one; ``pytest --guidedbp-update`` re-records and passes.

    Args:
        folder: Where the baselines live (``tests/test_x/`` for ``tests/test_x.py``).
        test_name: The test's name, made safe for a file name.
        diff_folder: Where diff pictures go.
        update: Re-record instead of comparing.
        on_record: Called with a JSON-ready dict for each baseline recorded: its path
            (``baseline``), ``class``, ``existed``, and, for one that existed,
            ``old_class`` (when it explained another), ``old_shape`` (when its map had
            another size) or ``old_similarity`` (Spearman of the old map with the new).
    """

    def __init__(self, folder: Path, test_name: str, diff_folder: Path, update: bool = False,
                 on_record: Callable[[dict], None] | None = None):
        self.folder = Path(folder)
        self.test_name = test_name
        self.diff_folder = Path(diff_folder)
        self.update = update
        self.on_record = on_record
        self._explainers: dict = {}
        self._used: set[str] = set()

    def check(self, model, image, *, basename: str | None = None, method: str = "guided",
              target=None, threshold: float | None = None) -> None:
        """Explain ``image`` with ``model`` and compare the map with its baseline.

        Args:
            model: What :class:`guidedbp.Explainer` takes (a ``keras.Model``, a spec such
                as ``"demo"`` or ``"model.keras"``, a ``LoadedModel``), or an Explainer.
            image: An image file, decoded and preprocessed as ``guidedbp explain`` does,
                or an ``(H, W, C)`` array already in the model's input space.
            basename: Tells apart several checks in one test: the baseline is
                ``TEST_NAME-BASENAME``.
            method: The attribution method (one of ``guidedbp.METHODS``).
            target: The class to explain (index or name). ``None``: the model's top-1
                class when recording, then the class the baseline recorded.
            threshold: Least Spearman similarity that passes; ``None``: the default
                of ``guidedbp check --baseline``.

        Raises:
            AssertionError: When the baseline was missing (it is recorded), or the map
                is not similar enough, explains another class, or has another shape.
            ValueError: For a bad ``threshold``, image array or repeated ``basename``.
        """
        __tracebackhide__ = True
        from guidedbp.checks.session import CheckSettings
        from guidedbp.checks.stats import map_similarity

        threshold = CheckSettings.min_similarity if threshold is None else float(threshold)
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"threshold={threshold!r} must lie in [-1, 1]")
        name = self._claim(basename)
        npy, meta = self.folder / f"{name}.npy", self.folder / f"{name}.json"
        shown = describe_image(image)
        if self.update or not (npy.exists() and meta.exists()):
            current = self._explain(model, image, method, target)
            entry = replaced_baseline(npy, meta, current)
            record_baseline(npy, meta, current, method, shown)
            if self.on_record is not None:
                self.on_record(entry)
            if self.update:
                return
            raise AssertionError(
                f"no saliency baseline for {shown} ({method}) yet: recorded {shown_path(npy)} "
                f"(class {current.name(current.target)}); check it in and run the test again")
        stored, recorded = read_baseline(npy, meta)
        if recorded.get("method") != method:
            raise AssertionError(
                f"the baseline {shown_path(meta)} was recorded with method "
                f"{recorded.get('method')!r}, not {method!r}: give this check its own "
                f"basename=, or {RE_RECORD}")
        stored_class = int(recorded["class"])
        current = self._explain(model, image, method, stored_class if target is None else target)
        where = f"{shown} ({method}, class {current.name(current.target)})"
        if current.target != stored_class:
            raise AssertionError(
                f"saliency map of {where} explains another class than its baseline "
                f"{shown_path(npy)}, which explained class {current.name(stored_class)}; "
                f"{RE_RECORD}")
        if current.magnitude.shape != stored.shape:
            raise AssertionError(
                f"saliency map of {where} is {size_text(current.magnitude)}, its baseline "
                f"{shown_path(npy)} {size_text(stored)}; {RE_RECORD}")
        similarity = map_similarity(stored[..., None], current.magnitude[..., None])
        moved = current.predicted != stored_class
        prediction = (f"the model now predicts class {current.name(current.predicted)}, not "
                      f"the baseline's class {current.name(stored_class)}")
        if similarity >= threshold:
            if moved:
                warnings.warn(f"{shown}: {prediction} (the maps of class "
                              f"{current.name(stored_class)} still match)", stacklevel=2)
            return
        lines = [f"saliency map of {where} differs from its baseline: Spearman similarity "
                 f"{similarity:.3f} < threshold {threshold:g}",
                 f"baseline: {shown_path(npy)}",
                 diff_picture(self.diff_folder / f"{name}-diff.png", stored, current,
                               f"{shown}, {method}: Spearman {similarity:.3f} < {threshold:g}")]
        if moved:
            lines.append(prediction)
        lines.append(RE_RECORD)
        raise AssertionError("\n  ".join(lines))

    def _claim(self, basename: str | None) -> str:
        name = self.test_name if basename is None else f"{self.test_name}-{safe_name(basename)}"
        if name in self._used:
            raise ValueError(f"this test already checked a map under the baseline {name!r}: "
                             f"give each check its own basename=")
        self._used.add(name)
        return name

    def _explain(self, model, image, method: str, target) -> ComparedMap:
        import numpy as np

        from guidedbp.api import Explainer
        from guidedbp.checks.stats import magnitude

        if isinstance(model, Explainer):
            explainer = model
        else:  # kept with its model, so that the id stays that model's
            key = (id(model), method)
            if key not in self._explainers:
                self._explainers[key] = (model, Explainer(model, method))
            explainer = self._explainers[key][1]
        if method not in explainer.methods:
            raise ValueError(f"the explainer computes {', '.join(explainer.methods)}, "
                             f"not method={method!r}")
        labels = explainer.labels
        if isinstance(image, (str, os.PathLike)):
            from guidedbp.pipeline.one_image import explain_image

            result = explain_image(explainer, image, target, methods=method)
            explanation, labels = result.explanation, result.labels
        else:
            pixels = np.asarray(image)
            if pixels.ndim != 3:
                raise ValueError(f"image must be a file or one (H, W, C) array in the model's "
                                 f"input space, got an array of shape {pixels.shape}")
            explanation = explainer.explain(pixels[None], target)
        values = magnitude(explanation.by_method[method][0]).astype(np.float32)
        return ComparedMap(values, int(explanation.targets[0]),
                    int(np.argmax(explanation.class_probabilities[0])),
                    None if labels is None else tuple(labels))


# -- the smoke checks of ``guidedbp check`` ----------------------------------------------------


def assert_relu_coverage(model, images=None, *, allow_plain=()) -> None:
    """Assert that the engine guides the model's ReLUs, and leaves no other activation
    with its plain gradient unless its type is in ``allow_plain``.

    Args:
        model: What :class:`guidedbp.Explainer` takes, or an Explainer.
        images: Needed only for a model without a fixed input size: an ``(N, H, W, C)``
            array in the model's input space, image files, or ``None`` (generated
            images, as ``guidedbp check`` makes them).
        allow_plain: Activation kinds that may keep their plain gradient, as the
            engine's report names them (``"sigmoid"``, ``"gelu"``, ``"prelu"``...; any
            case).

    Raises:
        AssertionError: With the relu-coverage check's one-line reason.

    >>> assert_relu_coverage(keras_model_with_relus)  # doctest: +SKIP
    """
    __tracebackhide__ = True
    result = run_check(model, images, "relu-coverage")
    allowed = {str(name).lower() for name in allow_plain}
    plain = sorted(set(result.data.get("plain_activations", {})) - allowed)
    if not result.failed and plain:
        raise AssertionError(f"relu-coverage check: {', '.join(plain)} left with the plain "
                             f"gradient (allow_plain= to accept): {result.detail}")


def assert_guided_differs_from_plain(model, images=None) -> None:
    """Assert that the guided map differs from the plain gradient on every image.

    Args:
        model: What :class:`guidedbp.Explainer` takes, or an Explainer.
        images: An ``(N, H, W, C)`` array in the model's input space, image files, or
            ``None`` (generated images, as ``guidedbp check`` makes them).

    Raises:
        AssertionError: With the guided-differs check's one-line reason.
    """
    __tracebackhide__ = True
    run_check(model, images, "guided-differs")


def assert_matches_reference(model, images=None) -> None:
    """Assert that the engine's guided map equals the literal ``grad_ys`` chain of
    :func:`guidedbp.reference_saliency` on the first image (the self-test check).

    Args:
        model: What :class:`guidedbp.Explainer` takes, or an Explainer.
        images: As for :func:`assert_guided_differs_from_plain`.

    Raises:
        AssertionError: With the self-test check's one-line reason, also when it does
            not apply (no ReLU to swap, or PReLU).
    """
    __tracebackhide__ = True
    run_check(model, images, "self-test")
