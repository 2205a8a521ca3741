"""Gaussian-process models: graph kernels, SVGP, independent baseline and exact GPs for BO."""
