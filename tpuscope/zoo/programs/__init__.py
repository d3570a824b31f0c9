"""The scenario programs a zoo cell runs under `tpuscope run`: copied into the cell's folder and
run as the user's script, so findings point at their lines and transformers stays the library."""
