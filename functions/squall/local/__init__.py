"""The embedded default: local AWS endpoint, simulated cluster and capacity, virtual clock, demo."""
