"""Live, in-process collection: one subpackage per backend, the session that writes their rows."""
