"""What to explain, beyond a class: one output unit, a segmentation region, a similarity to
a reference, a detector's detection, any score of the model's output.

>>> from guidedbp.targets import Region, Unit
>>> Region("circle").label, Unit(2, output="box").label
('region:circle', 'unit:2')

Pass one as ``target=`` to :class:`guidedbp.Explainer` (or several to
``explain_targets``); ``output=`` picks the head of a model with several outputs, for
the explainer or for one target. :class:`guidedbp.Explainer` also takes a class name
for :class:`Region` and an image file for :class:`Similarity`, and embeds a
:class:`Text` prompt with a two-tower model's text tower. The definitions are
those of :mod:`guidedbp.engine.targets.kinds`; importing this module does not import
TensorFlow.
"""

from guidedbp.engine.targets.box_target import Detection
from guidedbp.engine.targets.kinds import Class, Region, Score, Similarity, Target, Unit
from guidedbp.engine.targets.text import Text

__all__ = ["Class", "Detection", "Region", "Score", "Similarity", "Target", "Text", "Unit"]
