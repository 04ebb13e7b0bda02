"""memory-big: peak RSS of ``guidedbp explain`` on one PNG of 1 megapixel and on one of 81
megapixels (9000 x 9000, a few hundred KB), same small model, default renders (separate
processes): memory must follow the batch, not the image's size.
"""

from __future__ import annotations

import os
import time

from sections.common import peak_rss, small_model

#: The section's name, as ``--only`` takes it.
NAME = "memory-big"


#: The most the 81-megapixel image may add to the peak, in bytes.
BIG_IMAGE_EXTRA = 1.5e9


def memory_big(folder: str) -> None:
    from PIL import Image, ImageDraw

    model_path = small_model(folder)
    peaks, seconds = {}, {}
    for side in (1000, 9000):
        picture = Image.new("RGB", (side, side))
        draw = ImageDraw.Draw(picture)  # flat shapes: the PNG compresses to a few 100 KB
        draw.rectangle([side // 10, side // 10, side // 3, side // 2], fill=(200, 30, 30))
        draw.ellipse([side // 2, side // 2, side * 9 // 10, side * 8 // 10], fill=(30, 200, 60))
        images_dir = os.path.join(folder, f"big{side}")
        os.makedirs(images_dir)
        picture.save(os.path.join(images_dir, "picture.png"))
        del picture, draw
        start = time.perf_counter()
        peaks[side] = peak_rss(model_path, images_dir, os.path.join(folder, f"big-out{side}"))
        seconds[side] = time.perf_counter() - start
    extra = peaks[9000] - peaks[1000]
    verdict = "met" if extra <= BIG_IMAGE_EXTRA else "NOT met"
    print(f"peak RSS of explain on one PNG: 1 megapixel {peaks[1000] / 2**20:.0f} MiB "
          f"({seconds[1000]:.1f} s), 81 megapixels {peaks[9000] / 2**20:.0f} MiB "
          f"({seconds[9000]:.1f} s): {extra / 1e9:+.2f} GB "
          f"(target <= {BIG_IMAGE_EXTRA / 1e9:.1f} GB {verdict})")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    memory_big(folder)
