"""multikueue."""
