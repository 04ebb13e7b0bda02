"""end-to-end: the pipeline at engine speed. MobileNetV2 and ResNet50 (``keras:NAME``,
``weights=None``), 320x240 JPEGs, batch 16, guided, renders color+overlay: the marginal rate
(``(256 - 64) / (t256 - t64)``, so start-up cancels) of the explain job (``run_local`` and
the report, what ``explain_files`` runs after loading and tracing) against the engine alone
on the same decoded, preprocessed batches, same explainer, same process; median of
interleaved rounds.
"""

from __future__ import annotations

import os
import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed, write_images

#: The section's name, as ``--only`` takes it.
NAME = "end-to-end"


#: The explain job's marginal rate over the engine's, at least (issue 22).
END_TO_END_TARGETS = {"MobileNetV2": 0.75, "ResNet50": 0.92}


def end_to_end(folder: str, rounds: int = 3, count: int = 256, few: int = 64,
               batch: int = 16) -> bool:
    """The explain job against the engine alone, per model: marginal rates from ``count``
    and ``few`` images (start-up cancels), median of interleaved rounds."""
    import shutil

    from guidedbp.io.inputs import collect_inputs
    from guidedbp.io.report import write_report
    from guidedbp.models.loading import load_model
    from guidedbp.pipeline import stages
    from guidedbp.pipeline.local import run_local
    from guidedbp.pipeline.options import RunOptions

    images_dir = os.path.join(folder, "e2e-images")
    write_images(images_dir, count)
    items = collect_inputs([images_dir]).items
    options = RunOptions.of(methods="guided", batch_size=batch, renders=("color", "overlay"))
    print(f"explain job vs engine alone: weights=None, {count} vs {few} JPEGs 320x240, batch "
          f"{batch}, guided, renders color+overlay, marginal images/s, median of {rounds} "
          f"interleaved rounds, {os.cpu_count()} CPUs")
    print(f"{'model':<14}{'engine':>9}{'job':>9}{'ratio':>8}  target")
    met = True
    for name, target in END_TO_END_TARGETS.items():
        keras.utils.set_random_seed(0)
        loaded = load_model(f"keras:{name}", weights="none")
        explainer = Explainer(loaded, "guided", batch_size=batch)
        plan = stages.Plan("", options, stages.Feed.of(loaded),
                           guided=explainer.report.as_dict()["by_rule"])
        # The engine's inputs, decoded and preprocessed as the job does, outside the timing.
        inputs = np.stack([stages.prepare(plan, item).model_input for item in items])
        explainer.explain_top_k(inputs[:batch], 1)  # traced and warmed up

        def engine(n: int) -> None:
            for start in range(0, n, batch):
                explainer.explain_top_k(inputs[start : start + batch], 1)

        def job(n: int) -> None:
            output = os.path.join(folder, f"e2e-{name}-{n}")
            shutil.rmtree(output, ignore_errors=True)
            os.makedirs(output)
            job_plan = stages.Plan(output, options, plan.feed, guided=plan.guided)
            summary = run_local(job_plan, explainer, items[:n])
            write_report(output, options.manifest)
            assert summary.done == n, summary

        job(few)  # the first job's threads and imports, outside the timing
        rates: dict[str, list[float]] = {"engine": [], "job": []}
        ratios = []
        for round_index in range(rounds):
            seconds: dict[tuple, float] = {}
            # Alternate the order so neither side always runs on a warmer machine.
            order = [(kind, n) for n in (few, count) for kind in ("engine", "job")]
            for kind, n in order if round_index % 2 == 0 else reversed(order):
                seconds[kind, n] = timed(engine if kind == "engine" else job, n)
            for kind in rates:
                rates[kind].append((count - few) / (seconds[kind, count] - seconds[kind, few]))
            ratios.append(rates["job"][-1] / rates["engine"][-1])
        ratio = statistics.median(ratios)
        met = met and ratio >= target
        print(f"{name:<14}{statistics.median(rates['engine']):>9.1f}"
              f"{statistics.median(rates['job']):>9.1f}{ratio:>8.2f}  >= {target:.2f} "
              f"{'met' if ratio >= target else 'NOT met'}  (per round: "
              f"{', '.join(f'{r:.2f}' for r in ratios)})", flush=True)
    return met



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    end_to_end(folder)
