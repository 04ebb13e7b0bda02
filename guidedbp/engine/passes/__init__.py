"""The traced passes: the traced body, the cache of traced functions, and the
runners that compute each kind of method from them.
"""
