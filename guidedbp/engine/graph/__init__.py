"""The traced graph: its ops, the activations found in it, layer scopes and token
grids, the layers class activation maps read, and the low-precision copy.
"""
