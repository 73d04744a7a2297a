"""The operator console (issue 14): server-rendered pages at `/console` (docs/console.md)."""
