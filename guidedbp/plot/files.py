"""Figure files, as :mod:`guidedbp.figures.files` writes and recognises them (kept here
so that ``guidedbp.plot.files`` goes on working; the code lives in the room that the
pipeline shares).

>>> FIGURE_FORMATS
('pdf', 'svg', 'png')
"""

from guidedbp.figures.files import FIGURE_FORMATS, figure_bytes, is_own_figure, is_whole_figure

__all__ = ["FIGURE_FORMATS", "figure_bytes", "is_own_figure", "is_whole_figure"]
