"""In-memory fakes of Squall's ports, held to the same Protocols as the real adapters."""
