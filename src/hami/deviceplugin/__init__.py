"""The node agent: NVIDIA device plugin (registration and kubelet Allocate)."""
