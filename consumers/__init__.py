"""consumers of the dispersion processor."""
