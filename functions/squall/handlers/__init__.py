"""Lambda entry points. Each parses its event, calls one service, and returns."""
