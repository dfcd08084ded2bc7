"""Daydream: predict what an optimization would do to a DNN training iteration, from its trace."""

__version__ = "0.1.0"
