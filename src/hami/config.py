"""Configuration: HAMi's device-config.yaml and the scheduler's own settings."""
