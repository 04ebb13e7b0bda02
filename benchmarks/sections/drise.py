"""drise: D-RISE beside RISE on the bundled detector (``demo-det``, 96x96) and one Detection
target per image (the object's true box, 4 held-out shape scenes), 1000 masks each, 64
copies per pass, each at its default grid (D-RISE 16, RISE 7): forward passes per image,
seconds per image, D-RISE over RISE, each over the same number of plain forward passes of
the detector, and over guided backprop of the same Detection target; median of interleaved
rounds. Then both at one grid: the same maps.
"""

from __future__ import annotations

import statistics

import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "drise"


def drise_costs(rounds: int = 3, batch: int = 64, count: int = 4, masks: int = 1000) -> None:
    """D-RISE beside RISE on the bundled detector (``demo-det``), the same Detection target
    and mask count: passes per image, seconds per image, their ratio, each over as many
    plain forward passes and over guided backprop of the target; then both at one grid,
    the same maps."""
    import tensorflow as tf

    import guidedbp
    from guidedbp.demo.detection_table import mask_box
    from guidedbp.demo.shapes import make_scenes
    from guidedbp.engine.methods.blackbox import grid_of, passes_per_image
    from guidedbp.targets import Detection

    model = guidedbp.load_model("demo-det").model
    size = model.input_shape[1]
    scenes = make_scenes(count, seed=35_000, distractors=True)  # held-out scenes
    images = scenes.images.astype("float32")
    # Each scene's main object: its true box, the class the detector finds there.
    target = Detection(np.array([mask_box(mask) for mask in scenes.masks], "float32"))
    plain_batch = np.resize(images, (batch, *images.shape[1:]))
    forward = tf.function(lambda x: model(x, training=False))
    names = ("drise", "rise")
    explainers = {name: Explainer(model, name, batch_size=batch, masks=masks)
                  for name in ("guided", *names)}
    options = explainers["drise"].options.blackbox
    passes = {name: passes_per_image(name, options, size, size) for name in names}
    forward(plain_batch)
    for explainer in explainers.values():
        explainer.explain(images, target)  # traced and run once
    seconds: dict[str, list[float]] = {name: [] for name in ("guided", "forward", *names)}
    for round_index in range(rounds):
        order = ("guided", *names) if round_index % 2 == 0 else ("guided", *reversed(names))
        seconds["forward"].append(timed(lambda: forward(plain_batch)["scores"].numpy())
                                  / batch)  # one copy's forward pass
        for name in order:
            seconds[name].append(timed(explainers[name].explain, images, target) / count)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"D-RISE beside RISE: the bundled detector demo-det ({size}x{size}, "
          f"{model.output['scores'].shape[1]} proposals, {model.output['scores'].shape[2]} "
          f"classes), one Detection target per image (its object's true box), "
          f"{count} images, {masks} masks, {batch} copies per pass, median of {rounds} "
          "interleaved rounds:")
    print(f"  plain forward pass: {median['forward'] * 1000:.2f} ms per copy; guided backprop "
          f"of the target: {median['guided'] * 1000:.1f} ms per image")
    print(f"  {'method':<8}{'grid':>6}{'passes':>8}{'s/image':>10}{'vs plain passes':>17}"
          f"{'vs guided':>11}")
    for name in names:
        print(f"  {name:<8}{grid_of(options, name, size, size):>6}{passes[name]:>8}"
              f"{median[name]:>10.2f}{median[name] / (passes[name] * median['forward']):>17.2f}"
              f"{median[name] / median['guided']:>11.0f}")
    ratio = statistics.median(d / r for d, r in zip(seconds["drise"], seconds["rise"]))
    print(f"  drise / rise: {ratio:.2f} (the same passes: forward passes dominate both)")
    grid = grid_of(options, "drise", size, size)
    same = Explainer(model, "drise,rise", batch_size=batch, masks=masks, grid=grid).explain(
        images, target)
    equal = np.array_equal(same.by_method["drise"], same.by_method["rise"])
    print(f"  at one grid ({grid}), the same seed and masks: "
          f"drise {'==' if equal else '!='} rise, map for map")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    drise_costs()
