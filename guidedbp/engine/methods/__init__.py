"""The methods: their registry records and their maths (class activation map
weightings, averaging, perturbation and the black-box methods).
"""
