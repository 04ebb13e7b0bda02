"""Targets: what a user may name, and how the traced pass scores it (columns,
score checks, detections).
"""
