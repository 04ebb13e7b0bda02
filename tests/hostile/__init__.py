"""Hostile inputs, models and runs: each defect found by the hostile corpus, reproduced
at test time and shown fixed."""
