"""The explain pipeline: list inputs -> decode and prepare -> explain -> render -> write
-> manifest, as plain stages (:mod:`~guidedbp.pipeline.stages`) that the local runner
(:mod:`~guidedbp.pipeline.local`) and the Ray runner
(:mod:`~guidedbp.pipeline.ray_runner`) share; :mod:`~guidedbp.pipeline.run` is its
public face (:func:`guidedbp.explain_files`, :func:`guidedbp.explain_image`)."""
