"""The event table (one columnar table of calls, GPU tasks and ranges) and the facts read straight off it."""
