"""producers of the dispersion processor."""
