"""`opcase power --hunt`'s candidates on every installed spec: suites.stress.channel_tail may be one
mapping or a list of them, each sizing a dim or an int param (gen.plan.channel_tail_entries), and the
hunt draws every entry's partial-block sizes, never a TypeError on the list form."""
from __future__ import annotations

import itertools

import pytest

from gen.core.registry import known_ops, spec_for
from gen.plan import channel_tail_entries, channel_tails
from harness.cli.hunt import candidates


@pytest.mark.parametrize("op", known_ops())
def test_candidates_draw_every_channel_tail_entry(op):
    spec = spec_for(op)
    plans = list(itertools.islice(candidates(spec, 0, []), 60))
    assert len(plans) == 60
    for entry in channel_tail_entries(spec.suites.get("stress") or {}):
        key = "dim" if "dim" in entry else "param"
        sizes = set(channel_tails(entry["widths"]))
        drawn = [p for p in plans if (p.dims if key == "dim" else p.params).get(entry[key]) in sizes]
        assert drawn, (entry, "no candidate has one of its partial-block sizes")
