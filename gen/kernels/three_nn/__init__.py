"""The three_nn family's parts (README.md beside this file says what each holds)."""
