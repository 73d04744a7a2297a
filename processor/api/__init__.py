"""HTTP surfaces over the engine: the callback API (approval link, redirect), health and metrics."""
