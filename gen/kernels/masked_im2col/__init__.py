"""The masked_im2col family's parts (README.md beside this file says what each holds)."""
