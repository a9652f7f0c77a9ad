"""Application services: the logic each handler calls, over the ports only."""
