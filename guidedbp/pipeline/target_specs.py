"""How the pipeline reads a target's text: target specs, parsed (no model, no TensorFlow).

A spec is text, as ``guidedbp explain --target`` takes it and the manifest records it::

    class:C         class C, by index or name (the logit behind a softmax/sigmoid head)
    unit:I          one raw output unit: a flat index, or I,J,K one index per output axis
    region:C        class C's logits summed over a segmentation map's region of C
    similar:IMAGE   cosine similarity of the output to IMAGE's (an embedding)
    box:X0,Y0,X1,Y1[:C]  a detector's detection of that box (original image pixels), of
                    class C (index or name; default: the class it is detected as)
    text:PROMPT     a two-tower model's (CLIP, SigLIP) cosine similarity of the image's
                    embedding to PROMPT's

:func:`parse_target` turns one into a :class:`TargetSpec`;
:func:`~guidedbp.pipeline.target_plan.plan_targets` then checks a run's specs against
the loaded model's outputs.

>>> parse_target("unit:1, 2,0").text, parse_target("region:circle").value
('unit:1,2,0', 'circle')
"""

from __future__ import annotations

from dataclasses import dataclass

from guidedbp._numbers import whole_number
from guidedbp._text import did_you_mean, not_text
from guidedbp.errors import ArgumentError
from guidedbp.pipeline.boxes import BOX_FORM, Box, BoxSpecError, parse_box

#: The target kinds of a spec, in the order the help lists them.
KINDS = ("class", "unit", "region", "similar", "box", "text")
#: How each kind is written.
FORMS = {"class": "class:C", "unit": "unit:I", "region": "region:C", "similar": "similar:IMAGE",
         "box": BOX_FORM, "text": "text:PROMPT"}
_EXPECTED = ("expected class:C, unit:I (or unit:I,J,K), region:C, similar:IMAGE, "
             "box:X0,Y0,X1,Y1[:C] or text:PROMPT")
#: The kinds that explain a detector's detection: a box given, or one found (ranked).
DETECTION_KINDS = ("box", "detection")


class TargetSpecError(ArgumentError):
    """A target spec that does not parse: one line naming it and what was expected."""


@dataclass(frozen=True)
class TargetSpec:
    """One parsed target spec.

    Attributes:
        kind: One of :data:`KINDS`.
        value: A class or region class (an int index or a name), a unit (an int, or a
            tuple of ints), a reference image's path as given, or a :class:`Box`.
        text: The spec written back (``unit:1,2,0``): how manifests record it.
    """

    kind: str
    value: int | str | tuple[int, ...] | Box
    text: str

    def as_target(self):
        """This spec as :class:`guidedbp.Explainer` takes it: an int or a class name for
        ``class:``, a :class:`~guidedbp.targets.Unit`, :class:`~guidedbp.targets.Region`
        (index or name), :class:`~guidedbp.targets.Similarity` (the image file, which
        the explainer decodes and stretches to the model's size) or
        :class:`~guidedbp.targets.Detection` (its box in the pixels of the model's input:
        ``guidedbp explain`` maps each file's box through its resizing).

        >>> parse_target("unit:2").as_target().label
        'unit:2'
        >>> parse_target("box:1,2,5,6:0").as_target().label
        'box:1,2,5,6:0'
        """
        from guidedbp.targets import Detection, Region, Similarity, Unit

        if self.kind == "class":
            return self.value
        if self.kind == "unit":
            return Unit(self.value)
        if self.kind == "region":
            return Region(self.value)
        if self.kind == "box":
            return Detection(self.value.corners, label=self.value.label)
        if self.kind == "text":
            from guidedbp.targets import Text

            return Text(self.value)
        return Similarity(self.value)


def parse_target(text: str) -> TargetSpec:
    """A target spec (``class:C``, ``unit:I``, ``unit:I,J,K``, ``region:C``,
    ``similar:IMAGE``, ``box:X0,Y0,X1,Y1[:C]``) as a :class:`TargetSpec`.

    Raises:
        TargetSpecError: One line naming the spec, what was expected, and a close kind
            for a misspelt one.

    >>> parse_target("class:3"), parse_target("similar:refs/a.jpg").value
    (TargetSpec(kind='class', value=3, text='class:3'), 'refs/a.jpg')
    >>> parse_target("regoin:1")
    Traceback (most recent call last):
    ...
    guidedbp.pipeline.target_specs.TargetSpecError: unknown target kind 'regoin' in 'regoin:1' \
(did you mean 'region'?): expected class:C, unit:I (or unit:I,J,K), region:C, similar:IMAGE, \
box:X0,Y0,X1,Y1[:C] or text:PROMPT
    >>> parse_target("box:10, 20,40.5,60:circle").value
    Box(corners=(10.0, 20.0, 40.5, 60.0), label='circle')
    """
    if isinstance(text, TargetSpec):
        return text
    if not isinstance(text, str):
        raise TargetSpecError(f"target {text!r} is not a spec: {_EXPECTED}")
    kind, colon, value = text.strip().partition(":")
    kind = kind.strip().lower()
    if not colon:
        hint = f" (did you mean 'class:{kind}'?)" if whole_number(kind) is not None else ""
        raise TargetSpecError(f"target {text!r} is not KIND:VALUE{hint}: {_EXPECTED}")
    if kind not in KINDS:
        hint = did_you_mean(kind, KINDS)
        raise TargetSpecError(f"unknown target kind {kind!r} in {text!r}"
                              + (f" ({hint})" if hint else "") + f": {_EXPECTED}")
    value = value.strip() if kind != "similar" else value
    if not value.strip():
        raise TargetSpecError(f"target {text!r} names no {kind}: expected {FORMS[kind]}")
    if kind == "text":  # a prompt as written, its outer spaces dropped
        reason = not_text(value)
        if reason is not None:
            raise TargetSpecError(f"target {text!r} is no text: {reason}; give the "
                                  "prompt in UTF-8")
        return TargetSpec("text", value, f"text:{value}")
    if kind == "box":
        try:
            box = parse_box(value)
        except BoxSpecError as error:
            raise TargetSpecError(f"target {text!r}{error.joined}{error}") from None
        return TargetSpec("box", box, f"box:{box.text}")
    if kind == "unit":
        index = tuple(whole_number(part) for part in value.split(","))
        if None in index:
            raise TargetSpecError(
                f"target {text!r}: a unit is a non-negative index (unit:2) or one index per "
                "output axis (unit:4,7,1)")
        unit = index[0] if len(index) == 1 else index
        return TargetSpec("unit", unit, f"unit:{','.join(map(str, index))}")
    if kind in ("class", "region"):
        parsed = whole_number(value)
        parsed = value if parsed is None else parsed
        return TargetSpec(kind, parsed, f"{kind}:{parsed}")
    return TargetSpec("similar", value, f"similar:{value}")
