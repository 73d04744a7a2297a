"""schemas of the dispersion processor."""
