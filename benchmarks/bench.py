"""`make bench`: speed figures measured side by side in one process.

Engine: guided vs vanilla (plain input gradient) on Keras applications with
``weights=None`` at 224x224, batch 8. The two explainers are warmed up (traced
and run once), then timed alternately, so that both see the same machine state;
the reported ratio is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from guidedbp import Explainer  # noqa: E402

APPLICATIONS = ("ResNet50", "DenseNet121", "MobileNetV2", "VGG16")
TARGET_RATIO = 1.10


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def engine_ratios(rounds: int, batch: int, size: int) -> bool:
    print(f"guided vs vanilla gradient: weights=None, {size}x{size}, batch {batch}, "
          f"median of {rounds} interleaved rounds")
    print(f"{'model':<14}{'guided s':>10}{'vanilla s':>11}{'ratio':>8}")
    images = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype(np.float32)
    worst = 0.0
    for name in APPLICATIONS:
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
        guided = Explainer(model, "guided", batch_size=batch)
        vanilla = Explainer(model, "vanilla", batch_size=batch)
        for explainer in (guided, vanilla):  # trace and warm up
            explainer(images, 0)
            explainer(images, 0)
        guided_times, vanilla_times, ratios = [], [], []
        for round_index in range(rounds):
            # Alternate which goes first so neither always runs on a warmer cache.
            pair = (guided, vanilla) if round_index % 2 == 0 else (vanilla, guided)
            times = {id(e): timed(e, images, 0) for e in pair}
            guided_times.append(times[id(guided)])
            vanilla_times.append(times[id(vanilla)])
            ratios.append(times[id(guided)] / times[id(vanilla)])
        ratio = statistics.median(ratios)
        worst = max(worst, ratio)
        print(f"{name:<14}{statistics.median(guided_times):>10.3f}"
              f"{statistics.median(vanilla_times):>11.3f}{ratio:>8.3f}", flush=True)
        assert guided.trace_count == 1 and vanilla.trace_count == 1
    verdict = "met" if worst <= TARGET_RATIO else "NOT met"
    print(f"worst ratio {worst:.3f}: target <= {TARGET_RATIO:.2f} {verdict}")
    return worst <= TARGET_RATIO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args()
    engine_ratios(args.rounds, args.batch, args.size)


if __name__ == "__main__":
    main()
