"""``hami monitor``: HAMi's vGPU monitor (HAMi-core shared regions and NVML → Prometheus, priority feedback)."""
