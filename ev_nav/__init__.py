"""ev-nav: energy-efficient EV navigation that learns per-segment energy with GP bandits."""

__version__ = "0.1.0"
