"""Training helpers: packing checks, rank-balanced steps, frozen separator rows."""
