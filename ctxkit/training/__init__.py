"""Training helpers: a check that a trainer keeps packed segments apart, rank-balanced steps,
frozen separator rows."""
