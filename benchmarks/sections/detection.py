"""detection: a :class:`~guidedbp.targets.Detection` target (D-RISE's similarity, the max over
every proposal's IoU times class score) against a class-like target of the same detector (a
``Unit``: one proposal's class score), guided and vanilla, on the bundled detector
(``demo-det``, 96x96, 144 proposals, 6 classes), 32 scenes, batch 16, median of interleaved
rounds; target <= 1.2x.
"""

from __future__ import annotations

import statistics

import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "detection"


#: The most a Detection target may cost over a Unit of the same detector's class scores.
DETECTION_RATIO = 1.2


def detection_costs(rounds: int = 7, batch: int = 16, count: int = 32) -> None:
    """A Detection target against a Unit (one proposal's class score) on ``demo-det``,
    guided and vanilla: seconds per image of each and their ratio."""
    import guidedbp
    from guidedbp.demo.detection_table import mask_box
    from guidedbp.demo.shapes import make_scenes
    from guidedbp.targets import Detection, Unit

    model = guidedbp.load_model("demo-det").model
    size = model.input_shape[1]
    proposals, classes = model.output["scores"].shape[1:]
    scenes = make_scenes(count, seed=35_000, distractors=True)  # held-out scenes
    images = scenes.images.astype("float32")
    # Each scene's main object's true box, the class the detector finds there; the Unit:
    # the class score of the proposal the first scene's box matches.
    detection = Detection(np.array([mask_box(mask) for mask in scenes.masks], "float32"))
    found = Explainer(model, "vanilla", batch_size=batch).explain(
        images[:1], Detection(detection.box[:1]))
    boxes = np.asarray(model(images[:1], training=False)["boxes"])[0]
    row = int(np.argmin(np.abs(boxes - found.detections[0, :4]).sum(axis=1)))
    unit = Unit(row * classes + int(found.targets[0]), output="scores")
    runs = {}
    for method in ("guided", "vanilla"):
        explainer = Explainer(model, method, batch_size=batch)
        runs[(method, "detection")] = lambda e=explainer: e.explain(images, detection)
        runs[(method, "unit")] = lambda e=explainer: e.explain(images, unit)
    for run in runs.values():  # trace and warm up
        run()
        run()
    times: dict[tuple, list[float]] = {key: [] for key in runs}
    for round_index in range(rounds):
        keys = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for key in keys:
            times[key].append(timed(runs[key]) / count)
    print(f"detection: demo-det ({size}x{size}, {proposals} proposals, {classes} classes), "
          f"{count} scenes, batch {batch}, median of {rounds} interleaved rounds; a "
          f"Detection target (its max over every proposal's IoU x class score) against "
          f"{unit.label} (one proposal's class score)")
    for method in ("guided", "vanilla"):
        ratio = statistics.median(d / u for d, u in zip(times[(method, "detection")],
                                                       times[(method, "unit")]))
        median = {kind: statistics.median(times[(method, kind)]) * 1000
                  for kind in ("detection", "unit")}
        print(f"  {method:<8} Detection {median['detection']:.2f} ms/image, Unit "
              f"{median['unit']:.2f} ms/image: ratio {ratio:.3f} (target <= {DETECTION_RATIO:.1f} "
              f"{'met' if ratio <= DETECTION_RATIO else 'NOT met'})")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    detection_costs()
