"""JAX collection: jit calls, compiles with their cause, steps and host syncs, read in the program."""
