"""One of ``guidedbp check``'s checks run on a model given as the plugin's assertions take
it (a spec, a model, a ``LoadedModel`` or an Explainer) and on their images (an array,
image files, or none: generated ones), as an assertion that fails with its one line."""

from __future__ import annotations

import os


def run_check(model, images, name: str):
    """Run the ``loads`` check and check ``name``; the latter's result when both pass."""
    __tracebackhide__ = True
    from guidedbp.checks.results import PASS
    from guidedbp.checks.session import CheckSession
    from guidedbp.checks.suite import run_checks

    loaded = loaded_model(model)
    session = CheckSession(loaded, check_images(loaded, images))
    for result in run_checks(session, ("loads", name)):
        if result.status != PASS:
            raise AssertionError(f"{result.name} check {PAST[result.status]}: {result.detail}")
    return result


PAST = {"fail": "failed", "skip": "skipped", "info": "gave no verdict"}


def loaded_model(model):
    from guidedbp.api import Explainer
    from guidedbp.models.loading import load_model

    if isinstance(model, Explainer):
        return model.loaded or load_model(model.model)
    return load_model(model)


def check_images(loaded, images) -> list:
    import numpy as np

    from guidedbp.checks.images import CheckImage, generated_images, image_files

    if images is None:
        return generated_images(loaded.input_shape, loaded.preprocess)
    if isinstance(images, (str, os.PathLike)):
        images = [images]
    if isinstance(images, (list, tuple)) and all(isinstance(i, (str, os.PathLike))
                                                  for i in images):
        from guidedbp.io.inputs import collect_inputs

        items = collect_inputs([os.fspath(path) for path in images], unique_names=False).items
        return image_files(items, loaded.input_shape, loaded.channels, loaded.preprocess)
    pixels = np.asarray(images, dtype=np.float32)
    if pixels.ndim != 4:
        hint = ": add a batch axis: images[None]" if pixels.ndim == 3 else ""
        raise ValueError(f"images must be an (N, H, W, C) array or image files, got an "
                         f"array of shape {pixels.shape}{hint}")
    return [CheckImage(f"images[{index}]", None, values) for index, values in enumerate(pixels)]
