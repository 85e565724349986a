"""The engine core: the event loop, the job record, the cluster, placement and the engine's capabilities."""
