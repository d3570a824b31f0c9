"""tpuscope's version, in a room of its own on the ground floor: the launcher records it in every
run's meta without importing the package face (which hands on the whole public API)."""

__version__ = "0.1.0"
