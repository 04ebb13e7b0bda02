"""engine: guided vs vanilla (plain input gradient) on Keras applications with ``weights=None``
at 224x224, batch 8 — the ReLU models, then EfficientNetB0, ConvNeXtTiny and keras-hub's
ViT-B/16, guided by the generalised rule (SiLU, GELU). Both explainers are warmed up (traced
and run once), then timed alternately; the ratio is the median of per-round ratios.
"""

from __future__ import annotations

import statistics

import numpy as np

from guidedbp import Explainer
from guidedbp.engine import format_counts
from sections.common import bench_model, timed

#: The section's name, as ``--only`` takes it.
NAME = "engine"


APPLICATIONS = ("ResNet50", "DenseNet121", "MobileNetV2", "VGG16")
#: Models whose activations are not ReLUs, guided by the generalised rule (--guide all):
#: SiLU and sigmoid, GELU, and keras-hub's ViT-B/16 (GELU, attention) built from a config.
MODERN = ("EfficientNetB0", "ConvNeXtTiny", "keras-hub ViT-B16")
TARGET_RATIO = 1.10


def engine_ratios(rounds: int, batch: int, size: int) -> bool:
    print(f"guided vs vanilla gradient: weights=None, {size}x{size}, batch {batch}, "
          f"median of >= {rounds} interleaved rounds (~10 s per model)")
    print(f"{'model':<18}{'guided s':>10}{'vanilla s':>11}{'ratio':>8}")
    images = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype(np.float32)
    worst = 0.0
    for name in (*APPLICATIONS, *MODERN):
        try:
            model = bench_model(name, size)
        except ImportError as error:  # keras-hub needs Python >= 3.11
            print(f"{name:<18}skipped: {error}")
            continue
        guided = Explainer(model, "guided", batch_size=batch)
        vanilla = Explainer(model, "vanilla", batch_size=batch)
        for explainer in (guided, vanilla):  # trace and warm up
            explainer(images, 0)
            explainer(images, 0)
        # Fast models get more rounds (about 10 s of vanilla time): their medians are
        # otherwise at the mercy of a few noisy milliseconds.
        model_rounds = min(41, max(rounds, int(10.0 / max(timed(vanilla, images, 0), 1e-3))))
        guided_times, vanilla_times, ratios = [], [], []
        for round_index in range(model_rounds):
            # Alternate which goes first so neither always runs on a warmer cache.
            pair = (guided, vanilla) if round_index % 2 == 0 else (vanilla, guided)
            times = {id(e): timed(e, images, 0) for e in pair}
            guided_times.append(times[id(guided)])
            vanilla_times.append(times[id(vanilla)])
            ratios.append(times[id(guided)] / times[id(vanilla)])
        ratio = statistics.median(ratios)
        worst = max(worst, ratio)
        print(f"{name:<18}{statistics.median(guided_times):>10.3f}"
              f"{statistics.median(vanilla_times):>11.3f}{ratio:>8.3f}  ({model_rounds} rounds; "
              f"guided {format_counts(guided.report.guided_activations)})", flush=True)
        assert guided.trace_count == 1 and vanilla.trace_count == 1
    verdict = "met" if worst <= TARGET_RATIO else "NOT met"
    print(f"worst ratio {worst:.3f}: target <= {TARGET_RATIO:.2f} {verdict}")
    return worst <= TARGET_RATIO



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    engine_ratios(args.rounds, args.batch, args.size)
