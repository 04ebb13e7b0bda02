"""The gradient rules: a rule is a record plus its math (guided, deconvnet).
"""
