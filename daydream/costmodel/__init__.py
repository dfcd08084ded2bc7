"""Cost models: GPU specs, kernel time on another GPU, precision or shape, collective cost."""
