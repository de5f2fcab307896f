"""NVIDIA GPUs (vendor key ``NVIDIA``): request parsing now; inventory, fit and annotations with scheduling."""

from __future__ import annotations

from hami.devices.nvidia.request import parse_nvidia_request, parse_pod_nvidia_requests

__all__ = ["parse_nvidia_request", "parse_pod_nvidia_requests"]
