"""Caveats: what makes a map less meaningful, as a short code and one sentence.

A caveat travels with the maps it concerns: in :attr:`guidedbp.Explanation.caveats`
(per image), on :class:`guidedbp.ImageExplanation`, in each manifest record
(``{"code": ..., "text": ..., "method": ...}``), as a line on panels and figures, and
as a badge in the report. The engine finds those it can see in the traced model and
the maps (:data:`NO_GUIDED_ACTIVATION`, :data:`NEGLIGIBLE_MAP`, :data:`SCORECAM_CAPPED`);
model loading finds the others (:data:`UNTRAINED_WEIGHTS`, :data:`NO_RESCALING`).

Pure Python: every room may import it (the engine too, as it imports ``errors``).

>>> caveat = no_guided_activation("guided")
>>> caveat.code, caveat.method
('no-guided-activation', 'guided')
>>> caveat.text
'guided = plain gradient: the model has no guided activation'
>>> Caveat.from_record(caveat.as_record()) == caveat
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "CODES",
    "NEGLIGIBLE_EFFECT",
    "NEGLIGIBLE_MAP",
    "NO_GUIDED_ACTIVATION",
    "NO_RESCALING",
    "EMPTY_REGION",
    "MIXED_PRECISION_DRIFT",
    "NON_FINITE_SCORE",
    "NO_DETECTION",
    "SCORECAM_CAPPED",
    "UNGUIDED_ACTIVATION",
    "UNTRAINED_WEIGHTS",
    "Caveat",
    "constant_map",
    "empty_region",
    "mixed_precision_drift",
    "negligible_map",
    "non_finite_score",
    "no_detection",
    "no_guided_activation",
    "scorecam_capped",
    "unguided_activation",
    "unique",
]

UNTRAINED_WEIGHTS = "untrained-weights"
NO_GUIDED_ACTIVATION = "no-guided-activation"
NO_RESCALING = "no-rescaling"
NEGLIGIBLE_MAP = "negligible-map"
SCORECAM_CAPPED = "scorecam-capped"
EMPTY_REGION = "empty-region"
NON_FINITE_SCORE = "non-finite-score"
UNGUIDED_ACTIVATION = "unguided-activation"
MIXED_PRECISION_DRIFT = "mixed-precision-drift"
NO_DETECTION = "no-detection"
#: Every caveat code, in the order they are listed.
CODES = (UNTRAINED_WEIGHTS, NO_GUIDED_ACTIVATION, NO_RESCALING, NEGLIGIBLE_MAP, SCORECAM_CAPPED,
         EMPTY_REGION, NON_FINITE_SCORE, UNGUIDED_ACTIVATION,
         MIXED_PRECISION_DRIFT, NO_DETECTION)
#: A proposal is a detection of a Detection target's box from this IoU on (with a class
#: score of at least the target's threshold): PASCAL VOC's match.
DETECTION_IOU = 0.5

#: A gradient map is negligible when its whole first-order effect on the class score is
#: below this: float32's resolution at 1 (2**-23), the scale of a logit that moves a
#: probability. See :func:`negligible_map`.
NEGLIGIBLE_EFFECT = 2.0**-23


@dataclass(frozen=True)
class Caveat:
    """One reason to read a map with care.

    Attributes:
        code: One of :data:`CODES`.
        text: One sentence for people.
        method: The method it concerns, or ``None`` when it concerns every map.
    """

    code: str
    text: str
    method: str | None = None

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unknown caveat code {self.code!r}; expected one of "
                             f"{', '.join(CODES)}")

    def as_record(self) -> dict:
        """The manifest's form: ``code`` and ``text``, and ``method`` when it has one."""
        record = {"code": self.code, "text": self.text}
        if self.method is not None:
            record["method"] = self.method
        return record

    @classmethod
    def from_record(cls, record: dict) -> Caveat:
        """The caveat of a manifest entry (:meth:`as_record`)."""
        return cls(record["code"], record["text"], record.get("method"))

    @property
    def line(self) -> str:
        """The text as a panel or figure shows it: named by its method unless the text
        already starts with that name."""
        if self.method is None or self.text.startswith(self.method + " "):
            return self.text
        return f"{self.method}: {self.text}"

    def concerns(self, method: str) -> bool:
        """Whether it applies to ``method``'s maps."""
        return self.method is None or self.method == method


def unique(caveats: Iterable[Caveat]) -> tuple[Caveat, ...]:
    """``caveats`` without repeats, in first-seen order."""
    return tuple(dict.fromkeys(caveats))


def no_guided_activation(method: str, guide: str = "all") -> Caveat:
    """``method`` (guided backprop, deconvnet or one built on them) computed on a model
    with no activation in its rule's scope (``guide``: ``"all"`` activations or the
    ``"relu"`` family): it equals the plain gradient (times the CAM, for guided CAMs)."""
    plain = ("plain gradient x " + method.removeprefix("guided-") if "cam" in method
             else "plain gradient")
    what = "no ReLU-family activation (--guide relu)" if guide == "relu" else \
        "no guided activation"
    return Caveat(NO_GUIDED_ACTIVATION, f"{method} = {plain}: the model has {what}", method)


def unguided_activation(method: str, counts: str) -> Caveat:
    """``method``'s rule left activations in its scope (``counts``: ``"relu 1"``) with their
    plain gradient: they sit inside functions the model calls that the rule cannot reach
    (a nested ``tf.function``; any but a ReLU inside a loop or branch body).

    >>> unguided_activation("guided", "sigmoid 2").text
    "guided left sigmoid 2 with its plain gradient: inside a tf.while_loop or tf.cond body \
or a nested tf.function, out of the rule's reach (the map mixes in the plain gradient there)"
    """
    return Caveat(UNGUIDED_ACTIVATION,
                  f"{method} left {counts} with its plain gradient: inside a tf.while_loop or "
                  "tf.cond body or a nested tf.function, out of the rule's reach (the map "
                  "mixes in the plain gradient there)", method)


def mixed_precision_drift(method: str, correlation: float, least: float,
                          measured: str | None = None) -> Caveat:
    """``method``'s maps in mixed precision correlate ``correlation`` (Pearson, on the
    run's first image) with float32's, below the ``least`` promised; ``measured``: the
    one-pass method whose maps were compared, where ``method`` averages such maps.

    >>> mixed_precision_drift("vanilla", 0.9734, 0.99).text
    "mixed precision moved the maps: they correlate 0.973 with float32's on this model's \
first image (below 0.99); run in float32 for exact maps"
    """
    on = f" ({measured} maps, which it averages)" if measured else ""
    return Caveat(MIXED_PRECISION_DRIFT,
                  f"mixed precision moved the maps{on}: they correlate {correlation:.3f} with "
                  f"float32's on this model's first image (below {least:g}); run in float32 "
                  "for exact maps", method)


def negligible_map(method: str, effect: float) -> Caveat:
    """``method``'s map moves the class score by ``effect`` at most, to first order:
    below :data:`NEGLIGIBLE_EFFECT`."""
    if effect == 0.0:
        return Caveat(NEGLIGIBLE_MAP, "negligible map: it is all zero (flat in every render)",
                      method)
    return Caveat(NEGLIGIBLE_MAP,
                  f"negligible map: all of it moves the class score by {effect:.2g}, below "
                  f"float32 resolution ({NEGLIGIBLE_EFFECT:.2g}); its picture is near-zero "
                  "values scaled up", method)


def constant_map(method: str, value: float | None) -> Caveat:
    """``method``'s map holds the same value(s) at every pixel: ``value`` (``None`` when its
    channels differ from one another), so it singles out no pixel. A :data:`NEGLIGIBLE_MAP`
    caveat, with :func:`negligible_map`'s text when the map is all zero.

    >>> constant_map("layercam", 0.0).text
    'negligible map: it is all zero (flat in every render)'
    >>> constant_map("gradcam", 0.25).text
    'constant map: every pixel holds 0.25, so it singles out no pixel'
    """
    if value == 0.0:
        return negligible_map(method, 0.0)
    held = "the same values" if value is None else f"{value:.3g}"
    return Caveat(NEGLIGIBLE_MAP, f"constant map: every pixel holds {held}, so it singles "
                  "out no pixel", method)


def scorecam_capped(kept: int, channels: int, method: str = "scorecam") -> Caveat:
    """Score-CAM weighted ``kept`` of the feature map's ``channels`` channels."""
    return Caveat(SCORECAM_CAPPED,
                  f"{method} used only the {kept} most active of {channels} feature channels",
                  method)


def empty_region(label: str) -> Caveat:
    """A region target (``label``: ``region:1``) with no pixel in it: its score is 0 and
    every map of it is all zero."""
    return Caveat(EMPTY_REGION, f"{label} is empty: no pixel of the output is in the "
                  "region, so its score is 0 and its maps are zero")


def no_detection(label: str, overlap: float, score: float, threshold: float) -> Caveat:
    """A detection target (``label``: ``box:10,10,40,40``) that no proposal detects on the
    clean image: the best match has an IoU under :data:`DETECTION_IOU` or a class score
    under ``threshold``, so its maps explain a weak proposal, not a detection.

    >>> no_detection("box:0,0,8,8", 0.12, 0.9, 0.3).text
    'no detection matches box:0,0,8,8: the best proposal has IoU 0.12 and class score 0.90 \
(a detection needs IoU >= 0.5 and score >= 0.3), so its maps explain a weak proposal'
    """
    return Caveat(NO_DETECTION, f"no detection matches {label}: the best proposal has IoU "
                  f"{overlap:.2f} and class score {score:.2f} (a detection needs IoU >= "
                  f"{DETECTION_IOU:g} and score >= {threshold:g}), so its maps explain a "
                  "weak proposal")


def non_finite_score(what: str, value: float) -> Caveat:
    """A target's score or probability (``what``: ``"class:3's score"``) that is ``value``,
    infinite or NaN: the model's output overflowed, and maps of it mean nothing.

    >>> non_finite_score("unit:0's score", float("inf")).text
    "unit:0's score (inf) is not finite: the model's output overflows on this image, so its \
maps mean nothing"
    """
    return Caveat(NON_FINITE_SCORE, f"{what} ({float(value)}) is not finite: the model's output "
                  "overflows on this image, so its maps mean nothing")
