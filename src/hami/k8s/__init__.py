"""Kubernetes I/O: client, list+watch caches, patches, events, leases."""
