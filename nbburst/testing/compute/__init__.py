"""The Compute Engine emulator: the REST subset nbburst calls, instances as local processes."""
