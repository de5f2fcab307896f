"""Device vendors behind one interface (see ``base``). Pure: no I/O."""
