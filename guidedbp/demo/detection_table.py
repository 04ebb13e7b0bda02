"""How well each method explains one detection of the bundled detector: pointing and
energy in the box, measured on held-out shape scenes.

Each scene holds two shapes of different classes (:func:`guidedbp.demo.shapes.make_scenes`
with distractors), each with its exact box (the tight box of its mask). For every object
the detector finds (a proposal of the object's class with IoU >= 0.5 and class score >=
0.3), each method explains the :class:`~guidedbp.targets.Detection` of the object's box
and class, and the table gives, over those detections:

- **pointing**: the share of maps whose highest pixel lies inside the object's box (the
  pointing game of Zhang et al., 2016, with no tolerance);
- **energy in box**: the mean share of the map's magnitude inside the object's box;
- **energy in other**: the same inside the *other* object's box: a map that explains
  one detection should not light up the other object (lower is better).

Magnitudes are ``|map|`` summed over channels. A map that is constant (every pixel
alike) is left out and counted, as ``guidedbp evaluate`` does.

    python -m guidedbp.demo.detection_table --scenes 40 --masks 1000

prints the table in Markdown (the one in the documentation's Detectors page).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from guidedbp.demo.detection import mask_boxes
from guidedbp.demo.shapes import CLASS_NAMES, make_scenes

#: The methods measured, in the table's order, and their options.
METHODS = ("guided", "vanilla", "guided-gradcam", "integrated-gradients", "gradcam",
           "gradcam++", "layercam", "occlusion", "rise", "drise")
#: The held-out scenes' seed (the detector trained on other seeds).
SEED = 35_000


def box_mask(box, shape: tuple[int, int]) -> np.ndarray:
    """Bool ``shape`` mask of the pixels whose centres lie inside ``box``.

    >>> box_mask((1, 0, 3, 2), (3, 4)).astype(int).tolist()
    [[0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    """
    x0, y0, x1, y1 = box
    ys, xs = np.mgrid[: shape[0], : shape[1]] + 0.5
    return (xs >= x0) & (xs < x1) & (ys >= y0) & (ys < y1)


def objects(count: int, seed: int = SEED):
    """The scenes and, per object, ``(scene index, box, class, other object's box)``."""
    scenes = make_scenes(count, seed=seed, distractors=True)
    found = []
    for index in range(count):
        if scenes.distractor_labels[index] < 0 or not scenes.distractor_masks[index].any():
            continue
        target, other = (tuple(box) for box in mask_boxes(
            np.stack([scenes.masks[index], scenes.distractor_masks[index]])).tolist())
        found.append((index, target, int(scenes.labels[index]), other))
        found.append((index, other, int(scenes.distractor_labels[index]), target))
    return scenes, found


def measure(model, count: int = 40, masks: int = 1000, methods=METHODS,
            seed: int = SEED) -> dict:
    """Per method: ``pointing``, ``energy``, ``other`` (means over detected objects),
    ``maps`` (how many), ``constant`` (left out) and ``seconds``; and ``objects``,
    ``detected`` overall."""
    from guidedbp import Explainer
    from guidedbp.targets import Detection

    scenes, found = objects(count, seed)
    images = scenes.images.astype(np.float32)
    probe = Explainer(model, method="vanilla")
    detected = []
    for index, box, label, other in found:
        explanation = probe.explain(images[index : index + 1], Detection(box, label=label))
        overlap, score = explanation.detections[0, 4:]
        if overlap >= 0.5 and score >= 0.3:
            detected.append((index, box, label, other))
    results = {"objects": len(found), "detected": len(detected)}
    shape = images.shape[1:3]
    for method in methods:
        options = {"masks": masks} if method in ("rise", "drise") else {}
        explainer = Explainer(model, method=method, **options)
        start = time.perf_counter()
        points, energy, other_energy, constant = [], [], [], 0
        for index, box, label, other in detected:
            explanation = explainer.explain(images[index : index + 1],
                                            Detection(box, label=label))
            magnitude = np.abs(explanation.maps[0]).sum(axis=-1)
            if np.all(magnitude == magnitude.flat[0]):
                constant += 1
                continue
            inside, elsewhere = box_mask(box, shape), box_mask(other, shape)
            row, col = np.unravel_index(np.argmax(magnitude), shape)
            points.append(bool(inside[row, col]))
            total = magnitude.sum()
            energy.append(float(magnitude[inside].sum() / total))
            other_energy.append(float(magnitude[elsewhere].sum() / total))
        results[method] = {
            "pointing": float(np.mean(points)) if points else float("nan"),
            "energy": float(np.mean(energy)) if energy else float("nan"),
            "other": float(np.mean(other_energy)) if other_energy else float("nan"),
            "maps": len(points), "constant": constant,
            "seconds": time.perf_counter() - start,
        }
    return results


def markdown(results: dict, methods=METHODS) -> str:
    """The table, in Markdown, best value of each column in bold."""
    rows = [m for m in methods if m in results]
    best = {
        "pointing": max(results[m]["pointing"] for m in rows),
        "energy": max(results[m]["energy"] for m in rows),
        "other": min(results[m]["other"] for m in rows),
    }

    def cell(method: str, key: str) -> str:
        value = results[method][key]
        text = f"{value:.3f}"
        return f"**{text}**" if value == best[key] else text

    lines = ["| method | pointing ↑ | energy in box ↑ | energy in other ↓ | maps | s/map |",
             "|---|---:|---:|---:|---:|---:|"]
    for method in rows:
        found = results[method]
        per_map = found["seconds"] / max(1, found["maps"] + found["constant"])
        lines.append(f"| {method} | {cell(method, 'pointing')} | {cell(method, 'energy')} | "
                     f"{cell(method, 'other')} | {found['maps']}"
                     + (f" (+{found['constant']} constant)" if found["constant"] else "")
                     + f" | {per_map:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo-det", help="a detector (default: demo-det)")
    parser.add_argument("--scenes", type=int, default=40)
    parser.add_argument("--masks", type=int, default=1000, help="RISE's and D-RISE's masks")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    from guidedbp.models.loading import load_model

    methods = tuple(args.methods.split(","))
    model = load_model(args.model).model
    results = measure(model, args.scenes, args.masks, methods)
    print(f"{results['detected']} of {results['objects']} objects detected "
          f"(IoU >= 0.5, class score >= 0.3) in {args.scenes} held-out scenes; "
          f"{', '.join(CLASS_NAMES)}")
    print(markdown(results, methods))


if __name__ == "__main__":
    main()
