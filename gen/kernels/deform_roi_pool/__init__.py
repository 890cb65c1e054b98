"""The deform_roi_pool family's parts (README.md beside this file says what each holds)."""
