"""Model-side helpers: input preprocessing, resizing with placement, and class labels.

Nothing is imported eagerly: import the submodule you need, e.g.
``from guidedbp.models.preprocess import preprocess``.
"""
