"""Judge backends: one small protocol, several providers."""
