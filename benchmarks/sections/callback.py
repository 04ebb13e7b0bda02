"""callback: ``guidedbp.keras.SaliencyCallback`` at one epoch's end on the bundled demo CNN (16
images, guided and Grad-CAM): the time training waits (the explain pass) and the whole work
(with the drawing, PNG encoding and logging done in the background), each against one plain
``Explainer`` call on the same images; median of alternating rounds.
"""

from __future__ import annotations

import os
import statistics

import numpy as np

from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "callback"


#: The most the callback's epoch may cost, over one plain Explainer call.
CALLBACK_TARGET = 1.2


def callback_cost(folder: str, rounds: int = 15, count: int = 16) -> None:
    import guidedbp
    from guidedbp.engine.explainer import Explainer as EngineExplainer
    from guidedbp.keras import SaliencyCallback

    model = guidedbp.load_model("demo").model  # the bundled shapes CNN, 96x96
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (count, 96, 96, 3)).astype("float32")
    methods = ("guided", "gradcam")
    callback = SaliencyCallback(images, methods, log_dir=os.path.join(folder, "logs"))
    callback.set_model(model)
    callback.on_train_begin()
    plain = EngineExplainer(model, methods)
    plain.explain(images)  # both warmed up: traced and run once
    callback.on_epoch_end(0)
    callback.wait()
    blocking, total, plain_times = [], [], []
    for epoch in range(1, rounds + 1):
        blocking.append(timed(callback.on_epoch_end, epoch))  # what training waits for
        total.append(blocking[-1] + timed(callback.wait))  # + drawing and writing
        plain_times.append(timed(plain.explain, images))
    callback.on_train_end()
    ratio = statistics.median(b / p for b, p in zip(blocking, plain_times))
    work = statistics.median(t / p for t, p in zip(total, plain_times))
    verdict = "met" if ratio <= CALLBACK_TARGET else "NOT met"
    print(f"SaliencyCallback, demo CNN 96x96, {count} images, {','.join(methods)}: training "
          f"waits {statistics.median(blocking) * 1000:.0f} ms per epoch vs one Explainer call "
          f"{statistics.median(plain_times) * 1000:.0f} ms: {ratio:.2f}x (target <= "
          f"{CALLBACK_TARGET} {verdict}); with the background drawing and writing "
          f"{work:.2f}x; traces: {callback.explainer.trace_count}")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    callback_cost(folder)
