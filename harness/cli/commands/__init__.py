"""One module per `opcase` command; harness.cli loads a command's module only when it is asked for."""
