"""The shared core of the BO families: the ask/tell shape, the maximiser, the test functions,
the registry shape, user objectives, runs on the grid executors with one result format, and the
regret plot. Import the modules directly (``ev_nav.bo.core.maximize`` needs torch; this package
itself imports nothing heavy)."""
