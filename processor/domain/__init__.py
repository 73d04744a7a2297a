"""Pure domain logic: imports nothing else of ours and no I/O library."""
