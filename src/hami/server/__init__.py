"""HTTP surface: scheduler extender, admission webhook, health and metrics."""
