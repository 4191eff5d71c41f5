"""Pure analyses over rows and arrays, no I/O."""
