"""Bayesian optimisation on the shared GP core: cost-varying subsets, PTR robustness, BOKE."""
