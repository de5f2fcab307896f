"""HAMi wire formats: annotation keys and byte-compatible codecs. Pure functions, no I/O."""
