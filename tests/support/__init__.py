"""Stand-ins the tests and the benchmarks share (bench/ scripts import them too); never
imported by product code."""
