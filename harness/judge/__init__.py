"""The judge's side of a run: worker processes started and watched, what each call did judged, selection of cases, repeated calls, efficiency, and the baseline gate."""
