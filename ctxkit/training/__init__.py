"""Training helpers: checks that a trainer keeps packed segments apart, rank balance."""
