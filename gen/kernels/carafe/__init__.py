"""The carafe family's parts (README.md beside this file says what each holds)."""
