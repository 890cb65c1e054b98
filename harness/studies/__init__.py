"""Studies of a suite rather than a run: its power against mutants and planted bugs, calibration against trusted implementations, and explaining a failure by the variant it matches."""
