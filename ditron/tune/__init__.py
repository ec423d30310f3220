"""tune."""
