"""Offline simulation of scheduling decisions over snapshot files."""
