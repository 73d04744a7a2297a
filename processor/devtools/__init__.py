"""Development tools: local services for the demo, the tests and newcomers."""
