"""The built-in simulator: synthetic ledgers, synthetic scans and a simulated VLM endpoint."""
