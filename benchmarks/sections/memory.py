"""memory: peak RSS of ``guidedbp explain`` on 100 and on 1,000 images (separate processes).
"""

from __future__ import annotations

import os

from sections.common import peak_rss, small_model, write_images

#: The section's name, as ``--only`` takes it.
NAME = "memory"


def memory(folder: str) -> None:
    model_path = small_model(folder)
    peaks = {}
    for count in (100, 1000):
        images_dir = os.path.join(folder, f"memory{count}")
        write_images(images_dir, count, size=(64, 64))
        peaks[count] = peak_rss(model_path, images_dir, os.path.join(folder, f"memory-out{count}"),
                                 "--batch-size", "16") / 2**20
    growth = peaks[1000] / peaks[100] - 1
    verdict = "met" if abs(growth) <= 0.10 else "NOT met"
    print(f"peak RSS of explain: 100 images {peaks[100]:.0f} MiB, "
          f"1,000 images {peaks[1000]:.0f} MiB ({growth:+.1%}; target within 10% {verdict})")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    memory(folder)
