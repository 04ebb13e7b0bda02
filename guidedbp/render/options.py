"""How maps are drawn: one frozen, picklable options object, defaults declared once.

>>> from guidedbp.render.options import RenderOptions
>>> RenderOptions().renders, RenderOptions().cmap
(('color', 'overlay'), 'inferno')
"""

from __future__ import annotations

from dataclasses import dataclass

from guidedbp._text import did_you_mean
from guidedbp.errors import ArgumentError
from guidedbp.render.colormaps import COLORMAPS, DEFAULT_COLORMAP
from guidedbp.render.maps import DEFAULT_ALPHA, DEFAULT_CLIP, DEFAULT_RENDERS, RENDERS
from guidedbp.render.panel import DEFAULT_TILE, MAX_TILE, MIN_TILE

#: Where maps are drawn: at the image's own size, or at the model's input size.
OUTPUT_SIZES = ("original", "model")


@dataclass(frozen=True)
class RenderOptions:
    """How each map becomes pictures.

    Attributes:
        renders: Renders to write, from :data:`~guidedbp.render.RENDERS`.
        cmap: Colormap for heatmap and overlay, from :data:`~guidedbp.render.COLORMAPS`.
        clip: Magnitude percentile shown as full intensity, in (0, 100].
        alpha: Heatmap weight in the overlay, in [0, 1].
        output_size: ``"original"`` (the image's size) or ``"model"`` (its input size).
        tile: Pixels on the longer side of each picture in a panel (small pictures are
            enlarged, nearest-neighbour; large ones reduced), from
            :data:`~guidedbp.render.MIN_TILE` to :data:`~guidedbp.render.MAX_TILE`.
    """

    renders: tuple[str, ...] = DEFAULT_RENDERS
    cmap: str = DEFAULT_COLORMAP
    clip: float = DEFAULT_CLIP
    alpha: float = DEFAULT_ALPHA
    output_size: str = "original"
    tile: int = DEFAULT_TILE

    def __post_init__(self):
        if isinstance(self.renders, str):
            object.__setattr__(self, "renders", tuple(
                name.strip() for name in self.renders.split(",") if name.strip()))
        else:
            object.__setattr__(self, "renders", tuple(self.renders))
        unknown = [name for name in self.renders if name not in RENDERS]
        if unknown or not self.renders:
            hint = did_you_mean(unknown[0], RENDERS) if unknown else ""
            raise ArgumentError(f"renders={self.renders!r}: choose from {', '.join(RENDERS)}"
                                + (f" ({hint})" if hint else ""))
        if self.cmap not in COLORMAPS:
            hint = did_you_mean(self.cmap, COLORMAPS)
            raise ArgumentError(f"cmap={self.cmap!r} is not one of {', '.join(COLORMAPS)}"
                                + (f" ({hint})" if hint else ""))
        if isinstance(self.clip, bool) or not isinstance(self.clip, (int, float)) \
                or not 0 < self.clip <= 100:
            raise ArgumentError(f"clip={self.clip!r} must be a percentile in (0, 100]")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) \
                or not 0 <= self.alpha <= 1:
            raise ArgumentError(f"alpha={self.alpha!r} must be in [0, 1]")
        if self.output_size not in OUTPUT_SIZES:
            raise ArgumentError(
                f"output_size={self.output_size!r} is not one of {', '.join(OUTPUT_SIZES)}")
        if isinstance(self.tile, bool) or not isinstance(self.tile, int) \
                or not MIN_TILE <= self.tile <= MAX_TILE:
            raise ArgumentError(f"tile={self.tile!r} must be a whole number of pixels from "
                                f"{MIN_TILE} to {MAX_TILE}")

    @property
    def style(self) -> dict:
        """The keyword arguments :func:`~guidedbp.render.render` takes for the look."""
        return {"cmap": self.cmap, "clip": self.clip, "alpha": self.alpha}

    @property
    def panel_style(self) -> dict:
        """:attr:`style` with the panels' tile size."""
        return {**self.style, "tile": self.tile}
