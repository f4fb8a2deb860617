"""external."""
