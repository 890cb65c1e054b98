"""The ms_deform_attn family's parts (README.md beside this file says what each holds)."""
