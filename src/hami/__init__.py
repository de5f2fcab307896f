"""hami: a GPU-sharing scheduler for Kubernetes, wire-compatible with HAMi."""

__version__ = "0.1.0"
