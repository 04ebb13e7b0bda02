"""The checks ``guidedbp check`` runs, each a function of a :class:`CheckSession`.

Every check returns a :class:`~guidedbp.checks.results.CheckResult`; a check that
raises is recorded as failed with the error, and the others still run.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from guidedbp.checks.baseline import save_diff_picture
from guidedbp.checks.results import FAIL, INFO, PASS, SKIP, CheckResult, listed
from guidedbp.checks.session import CheckSession, explain_each
from guidedbp.checks.stats import map_similarity, relative_difference

#: guided-differs: the guided map must differ from the plain gradient by more than
#: this, as ``max |guided - plain| / max |plain|``.
DIFFERS_THRESHOLD = 1e-3
#: self-test: largest ``max |engine - reference| / max |reference|`` that passes.
SELF_TEST_TOLERANCE = 1e-4
PLAIN_GRADIENT_REASON = "guided backprop equals the plain gradient for this model"


def _counts(mapping: dict) -> str:
    """``{"silu": 49, "sigmoid": 16}`` -> ``"silu 49, sigmoid 16"``, as the engine's report
    writes them (most first)."""
    ordered = sorted(mapping.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{key} {value}" for key, value in ordered) or "none"


def _no_images(name: str) -> CheckResult:
    return CheckResult(name, SKIP, "no image could be explained (see loads)")


def _class_name(session: CheckSession, index: int) -> str:
    labels = session.loaded.labels
    if labels is not None and 0 <= index < len(labels):
        return f"{index} ({labels[index]})"
    return str(index)


# -- the checks --------------------------------------------------------------------------


def check_loads(session: CheckSession) -> CheckResult:
    """The model loaded (or the run stopped before this) and predicts on every image."""
    undecodable = {image.key: image.error for image in session.images if image.pixels is None}
    explained = session.explained
    unpredicted = dict(session.prediction_errors)
    predictions = {key: {"class": result.target, "probability": _rounded(result.probability),
                         **({"target": result.description, "value": _rounded(result.logit)}
                            if result.description is not None else {})}
                   for key, result in explained.items()}
    data = {"images": len(session.images), "predicted": len(explained),
            "undecodable": undecodable, "unpredicted": unpredicted, "predictions": predictions}
    failed = {**undecodable, **unpredicted}
    if failed:
        reasons = [f"{key} ({reason})" for key, reason in failed.items()]
        return CheckResult("loads", FAIL, f"{len(failed)} of {len(session.images)} images "
                           f"could not be used: {listed(reasons, 4)}", data)
    detail = f"model loaded; {len(explained)} images predicted"
    named = [f"{result.description} on {key}" for key, result in explained.items()
             if result.description is not None]
    if named:  # the run names its target: say what each map explains
        detail += f"; target: {listed(named, 4)}"
    return CheckResult("loads", PASS, detail, data)


def check_relu_coverage(session: CheckSession) -> CheckResult:
    """At least one activation is guided (``--guide all``: any kind; the ReLU family is
    what the papers guide)."""
    report = session.report
    data = {"guide": report.guide, "guided_activations": dict(report.guided_activations),
            "plain_activations": dict(report.plain_activations), "head": report.head}
    if not report.guided_activations:
        return CheckResult(
            "relu-coverage", FAIL,
            f"no activation to guide: {PLAIN_GRADIENT_REASON}; activations found: "
            f"{_counts(report.plain_activations)}", data)
    detail = f"guided: {_counts(report.guided_activations)}"
    if report.plain_activations:
        detail += f"; left with their plain gradient: {_counts(report.plain_activations)}"
    if report.head:
        detail += f"; {report.head} head bypassed (maps explain the logit)"
    return CheckResult("relu-coverage", PASS, detail, data)


def check_finite(session: CheckSession) -> CheckResult:
    """Guided maps hold no NaN or infinity and are not all zero."""
    explained = session.explained
    if not explained:
        return _no_images("finite")
    non_finite = [key for key, r in explained.items() if not np.all(np.isfinite(r.map))]
    all_zero = [key for key, r in explained.items()
                if key not in non_finite and not np.any(r.map)]
    data = {"non_finite": non_finite, "all_zero": all_zero}
    problems = []
    if non_finite:
        problems.append(f"NaN or Inf in {len(non_finite)} maps: {listed(non_finite)}")
    if all_zero:
        problems.append(f"all zero in {len(all_zero)} maps: {listed(all_zero)}")
    if problems:
        return CheckResult("finite", FAIL, "; ".join(problems), data)
    return CheckResult("finite", PASS, f"{len(explained)} maps finite and not all zero", data)


def check_guided_differs(session: CheckSession) -> CheckResult:
    """The guided map differs from the plain gradient on every image."""
    images = [image for image in session.usable
              if np.all(np.isfinite(session.explained[image.key].map))]
    if not images:
        return CheckResult("guided-differs", SKIP, "no finite guided map to compare (see finite)")
    plain = session.maps("vanilla", images, session.targets_of(images))
    differences = {image.key: relative_difference(session.explained[image.key].map, vanilla)
                   for image, vanilla in zip(images, plain)}
    same = [key for key, value in differences.items() if not value > DIFFERS_THRESHOLD]
    data = {"relative_difference": {k: _finite_or_none(v) for k, v in differences.items()},
            "threshold": DIFFERS_THRESHOLD, "equal": same}
    if same:
        reason = "" if session.report.guided_activations else f" ({PLAIN_GRADIENT_REASON})"
        return CheckResult(
            "guided-differs", FAIL,
            f"guided map equals the plain gradient (relative max difference <= "
            f"{DIFFERS_THRESHOLD:g}) on {len(same)} of {len(images)} images{reason}: "
            f"{listed(same)}", data)
    low, high = min(differences.values()), max(differences.values())
    return CheckResult(
        "guided-differs", PASS,
        f"guided differs from the plain gradient on all {len(images)} images (relative max "
        f"difference {low:.3g}..{high:.3g} > {DIFFERS_THRESHOLD:g})", data)


def check_self_test(session: CheckSession) -> CheckResult:
    """On one image, the engine's guided map equals the literal grad_ys chain."""
    # The literal chain gates ReLU ops: it is the reference of the ReLU-family scope
    # (the generalised rule is tested against tf.custom_gradient clones in the suite).
    report = session.scope_report("relu")
    if not report.guided_activations:
        return CheckResult("self-test", SKIP,
                           "no ReLU-family op for the literal grad_ys chain to gate")
    if "prelu" in report.plain_activations:
        return CheckResult(
            "self-test", SKIP,
            "the model has PReLU, whose relu(x) and relu(-x) the engine leaves plain but "
            "reference_saliency gates like any Relu: it is no reference for this model")
    from guidedbp.engine import RELU_OPS

    if report.guided_in_functions or set(RELU_OPS) & getattr(
            session.loaded.model, "function_op_types", set()):
        return CheckResult(
            "self-test", SKIP,
            "the model has ReLUs inside tf.cond branches or tf.while_loop bodies, which "
            "reference_saliency cannot gate one run at a time: it is no reference for this model")
    images = session.usable
    if not images:
        return _no_images("self-test")
    image = images[0]
    engine = session.explained[image.key]
    if not np.all(np.isfinite(engine.map)):
        return CheckResult("self-test", SKIP, f"the map of {image.key} is not finite (see finite)")
    from guidedbp.engine.reference import reference_saliency

    ours = engine.map if report.guided_activations == session.report.guided_activations \
        else session.maps("guided", [image], session.targets_of([image]), guide="relu")[0]
    target = session.settings.target
    if target is None:
        model, chosen = session.loaded.model, engine.target
    else:  # the target's score, written independently of the engine's
        model, chosen = target.reference_model(session.loaded.model,
                                               session.region_mask(image.key))
        chosen = engine.target if target.by_class else chosen
    reference = reference_saliency(model, image.pixels[None], chosen)[0]
    error = relative_difference(ours, reference)
    data = {"image": image.key, "class": engine.target,
            "relative_error": _finite_or_none(error), "tolerance": SELF_TEST_TOLERANCE}
    if engine.description is not None:
        data["target"] = engine.description
        where = f"on {image.key}, target {engine.description}"
    else:
        where = f"on {image.key}, class {_class_name(session, engine.target)}"
    if error <= SELF_TEST_TOLERANCE:
        return CheckResult(
            "self-test", PASS,
            f"engine equals the reference grad_ys chain {where}: relative error "
            f"{error:.2g} <= {SELF_TEST_TOLERANCE:g}", data)
    return CheckResult(
        "self-test", FAIL,
        f"engine differs from the reference grad_ys chain {where}: relative error "
        f"{error:.3g} > {SELF_TEST_TOLERANCE:g}: the gradient swap missed some ReLU", data)


def check_randomization(session: CheckSession) -> CheckResult:
    """Cascading randomization (Adebayo et al., 2018): how far maps follow the weights."""
    from guidedbp.checks.randomization import CannotCopy, cascade
    from guidedbp.engine.explainer import Explainer

    settings = session.settings
    images = session.usable[: settings.randomization_images]
    if not images:
        return _no_images("randomization")
    originals = [session.explained[image.key].map for image in images]
    targets = session.targets_of(images)  # a region or reference fixed from the original
    output = None if settings.target is None else settings.target.output
    try:
        steps = cascade(session.loaded.model, settings.randomization_steps, settings.seed)
        layers, correlations, explainer, current = [], [], None, None
        for layer, randomized in steps:
            if randomized is not current:  # a Keras clone is re-drawn in place: one trace
                explainer = Explainer(randomized, "guided", batch_size=settings.batch_size,
                                      output=output)
                current = randomized
            results, errors = explain_each(explainer, [i.pixels for i in images], targets)
            if any(error is not None for error in errors):
                raise RuntimeError(next(error for error in errors if error is not None))
            values = [map_similarity(o, r.map) for o, r in zip(originals, results)]
            layers.append(layer)
            correlations.append(float(np.mean(values)))
    except CannotCopy as error:
        return CheckResult("randomization", SKIP, str(error))
    shown = ", ".join("nan" if math.isnan(c) else f"{c:.2f}" for c in correlations)
    data = {"images": [image.key for image in images],
            "steps": [{"layer": layer, "spearman": _finite_or_none(value)}
                      for layer, value in zip(layers, correlations)],
            "max_randomized_similarity": settings.max_randomized_similarity}
    detail = (f"Spearman correlation with the original maps after re-drawing the top "
              f"1..{len(layers)} weighted layers ({', '.join(layers)}): {shown}")
    gate = settings.max_randomized_similarity
    if gate is None:
        return CheckResult("randomization", INFO, detail, data)
    last = correlations[-1]
    if math.isnan(last) or last > gate:
        return CheckResult("randomization", FAIL,
                           f"{detail}; last step above max_randomized_similarity={gate:g}", data)
    return CheckResult("randomization", PASS, f"{detail}; last step <= {gate:g}", data)


def check_expected_classes(session: CheckSession) -> CheckResult:
    """Each image named in --expect is predicted as its expected class."""
    from guidedbp.checks.expected import matching

    expectations = session.settings.expectations
    if not expectations:
        return CheckResult("expected-classes", SKIP, "no expectations (expect=FILE)")
    explained = session.explained
    mismatches, unmatched, checked = [], [], set()
    for row in expectations:
        images = matching(row, session.images)
        if not images:
            unmatched.append({"line": row.line, "image": row.image})
        for image in images:
            checked.add(image.key)
            result = explained.get(image.key)
            if result is None or result.target != row.class_index:
                mismatches.append({
                    "image": image.key, "line": row.line, "expected": row.class_index,
                    "predicted": None if result is None else result.target,
                    "probability": None if result is None else round(result.probability, 6),
                })
    data = {"checked": sorted(checked), "mismatches": mismatches, "unmatched": unmatched}
    problems = []
    if mismatches:
        shown = [
            f"{m['image']} expected {_class_name(session, m['expected'])}, got "
            + ("no prediction" if m["predicted"] is None else
               f"{_class_name(session, m['predicted'])} p={m['probability']:.2f}")
            for m in mismatches
        ]
        problems.append(f"{len(mismatches)} of {len(checked)} images predicted otherwise: "
                        f"{listed(shown, 4)}")
    if unmatched:
        rows = [f"line {u['line']} {u['image']!r}" for u in unmatched]
        problems.append(f"{len(unmatched)} rows name no image of this run: {listed(rows, 4)}")
    if problems:
        return CheckResult("expected-classes", FAIL, "; ".join(problems), data)
    return CheckResult("expected-classes", PASS,
                       f"{len(checked)} images predicted as expected", data)


def check_baseline(session: CheckSession) -> CheckResult:
    """Maps match those stored by --save-baseline (Spearman >= --min-similarity)."""
    settings = session.settings
    baseline = settings.baseline
    if baseline is None:
        return CheckResult("baseline", SKIP, "no baseline (baseline=DIR)")
    minimum = settings.min_similarity
    mismatched = baseline.mismatches(settings.run_options)
    data = {"folder": baseline.folder, "min_similarity": minimum, "option_mismatches": mismatched}
    if mismatched:
        return CheckResult("baseline", FAIL, "options differ from the baseline's, maps are not "
                           f"comparable: {'; '.join(mismatched)}", data)
    images = session.usable
    present = [image for image in images if image.key in baseline.images]
    missing = [image.key for image in images if image.key not in baseline.images]
    run_keys = {image.key for image in session.images}
    not_in_run = [key for key in baseline.images if key not in run_keys]
    # Compare the maps of the class the baseline explained, even where the prediction moved.
    moved = [image for image in present
             if session.explained[image.key].target != baseline.images[image.key].target]
    current = {image.key: session.explained[image.key].map for image in present}
    if moved:
        stored_targets = [baseline.images[image.key].target for image in moved]
        for image, values in zip(moved, session.maps("guided", moved, stored_targets)):
            current[image.key] = values
    similarities, drifted, pictures, unpictured = {}, [], {}, []
    for image in present:
        stored = baseline.load_map(image.key)
        if stored.shape != current[image.key].shape:
            similarities[image.key] = None
            drifted.append(f"{image.key} (shape {current[image.key].shape}, baseline "
                           f"{stored.shape})")
            continue
        value = map_similarity(current[image.key], stored)
        similarities[image.key] = _finite_or_none(value)
        if not value >= minimum:
            drifted.append(f"{image.key} ({value:.3f})")
            if settings.diff_folder is not None:
                target = baseline.images[image.key].target
                try:
                    explained = (session.describe(image.key) if settings.target is not None
                                 and not settings.target.by_class
                                 else f"class {_class_name(session, target)}")
                    pictures[image.key] = save_diff_picture(
                        settings.diff_folder, image.key, stored, current[image.key],
                        explained,
                        f"{image.key}: Spearman {value:.3f} < {minimum:g}")
                except (ValueError, OSError) as error:  # a NaN map cannot be drawn
                    unpictured.append(f"{image.key} ({error})")
    data.update({"similarity": similarities, "drifted": drifted, "missing": missing,
                 "class_changed": [image.key for image in moved], "not_in_run": not_in_run,
                 "diff_pictures": pictures})
    problems = []
    if drifted:
        problems.append(f"{len(drifted)} of {len(present)} maps drifted (Spearman < {minimum:g}): "
                        f"{listed(drifted, 6)}")
    if pictures:
        from guidedbp.render.diff import DIFF_COLUMNS  # Pillow, only when there are pictures

        problems.append(f"diff pictures ({DIFF_COLUMNS}): {listed(list(pictures.values()), 6)}")
    if unpictured:
        problems.append(f"no diff picture of {listed(unpictured, 3)}")
    if missing:
        problems.append(f"{len(missing)} images not in the baseline: {listed(missing)}")
    if not present and not missing:
        problems.append("no image to compare")
    if problems:
        return CheckResult("baseline", FAIL, "; ".join(problems), data,
                           attachments=tuple(os.path.abspath(p) for p in pictures.values()))
    values = [v for v in similarities.values() if v is not None]
    detail = (f"{len(present)} maps match the baseline (Spearman min {min(values):.3f}, "
              f"mean {float(np.mean(values)):.3f} >= {minimum:g})")
    if moved:
        detail += f"; predicted class changed on {len(moved)}: {listed(data['class_changed'])}"
    if not_in_run:
        detail += f"; {len(not_in_run)} baseline images not in this run"
    return CheckResult("baseline", PASS, detail, data)


def _rounded(value: float):
    """``value`` to 6 decimals; ``None`` for NaN (a target with no probability)."""
    return round(value, 6) if math.isfinite(value) else None


def _finite_or_none(value: float):
    return float(value) if math.isfinite(value) else None


# -- registry and runner -----------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """A named check, the function that runs it and a one-line summary for --help."""

    name: str
    run: Callable[[CheckSession], CheckResult]
    summary: str


CHECKS = (
    Check("loads", check_loads, "the model loads and predicts on every image"),
    Check("relu-coverage", check_relu_coverage, "at least one ReLU-family op is guided"),
    Check("finite", check_finite, "guided maps have no NaN/Inf and are not all zero"),
    Check("guided-differs", check_guided_differs,
          "guided map differs from the plain gradient on every image"),
    Check("self-test", check_self_test,
          "engine map = literal grad_ys chain on one image (1e-4)"),
    Check("randomization", check_randomization,
          "maps as the top layers are re-drawn (Adebayo et al. 2018)"),
    Check("expected-classes", check_expected_classes,
          "with --expect: images are predicted as listed"),
    Check("baseline", check_baseline,
          "with --baseline: maps are similar to the stored ones"),
)
CHECK_NAMES = tuple(check.name for check in CHECKS)
#: Checks that run only when their option is given, and that option.
NEEDS_OPTION = {"expected-classes": "--expect", "baseline": "--baseline"}


def default_checks(expect: bool = False, baseline: bool = False) -> tuple[str, ...]:
    """Every check that applies: expected-classes with --expect, baseline with --baseline."""
    given = {"expected-classes": expect, "baseline": baseline}
    return tuple(name for name in CHECK_NAMES if given.get(name, True))


def run_checks(session: CheckSession, names=CHECK_NAMES) -> list[CheckResult]:
    """Run the named checks in their canonical order; a check that raises fails alone.

    >>> CHECK_NAMES[:3]
    ('loads', 'relu-coverage', 'finite')
    """
    unknown = [name for name in names if name not in CHECK_NAMES]
    if unknown:
        raise ValueError(
            f"unknown checks {', '.join(unknown)}: choose from {', '.join(CHECK_NAMES)}")
    results = []
    for check in CHECKS:
        if check.name not in names:
            continue
        start = time.perf_counter()
        try:
            result = check.run(session)
        except Exception as error:  # a broken check must not hide the others' results
            text = " ".join(str(error).split())[:300] or type(error).__name__
            result = CheckResult(check.name, FAIL, f"the check could not run: "
                                 f"{type(error).__name__}: {text}",
                                 {"error": traceback.format_exc(limit=8)})
        results.append(replace(result, seconds=time.perf_counter() - start))
    return results
