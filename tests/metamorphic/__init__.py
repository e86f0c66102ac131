"""The metamorphic suite: meaning-preserving rewrites of the fixtures (issue 34)."""
