"""Simulation: ground truth, noisy feedback, fleet-learning runs and paper experiments."""
