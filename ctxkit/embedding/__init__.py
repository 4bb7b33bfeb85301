"""Packed embedding passes: model loading (``model``), batch ops (``ops``), the encoder."""
