"""torch_xla (PyTorch/XLA) collection: counters, compiles, fallbacks and steps, read in the program."""
