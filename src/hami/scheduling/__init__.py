"""The scheduling decision: cluster state, ledger, fit, score and policies. Pure: no I/O."""
