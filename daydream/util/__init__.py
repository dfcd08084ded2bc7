"""Helpers under every stage: numpy array helpers, the optional numba tier, terminal-safe display, interning."""
