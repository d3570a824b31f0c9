"""Launch a profiled program: the environment it gets, its supervision, and the end of its run."""
