"""Runtime: bootstrap, launch, symmetric heap, signal pads, barrier, diagnostics."""
