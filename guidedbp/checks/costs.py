"""What each method costs, measured: seconds per image relative to a reference method.

Each method runs in an explainer of its own on the same batch, after a warm-up call
(its trace), and the median of a few runs is taken, so the ratios compare the methods'
work, not their tracing.

>>> import numpy as np, keras
>>> from guidedbp.engine.explainer import Explainer
>>> model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(2, 3, activation="relu"),
...                           keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
>>> costs = relative_costs(lambda name: Explainer(model, name), np.ones((2, 8, 8, 3)),
...                        ("guided", "vanilla"), rounds=1)
>>> costs["guided"]
1.0
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from guidedbp.errors import ArgumentError


def relative_costs(make_explainer: Callable[[str], object], images: np.ndarray,
                   methods: Sequence[str], reference: str = "guided",
                   rounds: int = 3) -> dict[str, float]:
    """Each method's time on ``images`` over ``reference``'s, each alone.

    Args:
        make_explainer: Builds an explainer of one method, by name.
        images: One batch, in the model's input space.
        methods: The methods to time; ``reference`` is timed too when it is not among
            them, and comes first in the result.
        reference: The method the others are measured against.
        rounds: Timed runs per method (after one warm-up run); the median is kept.

    Returns:
        ``{method: ratio}``, ``reference`` first with 1.0.

    Raises:
        ArgumentError: For ``rounds`` below 1 or no images.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ArgumentError(f"rounds={rounds!r} must be a positive integer")
    if len(images) == 0:
        raise ArgumentError("images is empty: time the methods on at least one image")
    seconds = {}
    for name in dict.fromkeys([reference, *methods]):
        explainer = make_explainer(name)
        explainer.explain(images)  # the trace, and the first run's allocations
        runs = []
        for _ in range(rounds):
            start = time.perf_counter()
            explainer.explain(images)
            runs.append(time.perf_counter() - start)
        seconds[name] = statistics.median(runs)
    return {name: value / seconds[reference] for name, value in seconds.items()}
