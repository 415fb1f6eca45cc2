"""The simulator's draws: `_Choice(logits, T).draw` is `Generator.choice` with probabilities, index for index and
state for state (the goldens pin the simulator's replies, and a sampler that drifted from numpy's would move every
one)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from boe.sim.percept import _Choice


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(-30, 30), min_size=1, max_size=12),
    st.sampled_from([0.0, 0.05, 0.3, 1.0, 1.7]),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_a_draw_is_numpys_choice_and_leaves_the_generator_where_choice_does(logits, temperature, seed, data):
    x = np.array(logits)
    if len(x) > 1 and data.draw(st.booleans()):
        x[data.draw(st.integers(0, len(x) - 2))] = -np.inf  # an impossible value (a presupposed finding)
    mine, numpys = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(5):
        got = _Choice(x, temperature).draw(mine)
        if temperature <= 0:
            want = int(np.argmax(x))
        else:
            z = x / temperature
            p = np.exp(z - z.max())
            want = int(numpys.choice(len(p), p=p / p.sum()))
        assert got == want
    assert mine.random() == numpys.random()
