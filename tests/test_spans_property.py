"""Property test: the vectorised span and weight code equals a simple per-span reference."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from numlearn.losses import IGNORE_INDEX, DigitVocab, number_spans, shift_targets

VOCAB = DigitVocab(tuple(range(10)), 10)  # ids 0-9 digits, 10 ".", 11-13 other tokens, -100 masked


def reference_weights(targets: list[list[int]], float_spans: bool):
    """Per-row, per-span loop straight from METHOD.md. Returns [(flat_index, del_w, int_place)]."""
    T = len(targets[0])
    out = []
    for b, row in enumerate(targets):
        def is_member(t):
            return 0 <= t <= 9 or (float_spans and t == 10)
        t = 0
        while t < T:
            if not is_member(row[t]):
                t += 1
                continue
            s = t
            while t < T and is_member(row[t]):
                t += 1
            span = list(range(s, t))
            toks = [row[i] for i in span]
            d = next((i for i, x in enumerate(toks) if x == 10), None)
            has_point = d is not None and d > 0
            for j, i in enumerate(span):
                if toks[j] == 10:
                    continue
                if has_point:
                    w = 2.0 * (d - j) if j < d else 1.02 ** (-((j - d) + 1))
                else:
                    w = 2.0 * (len(span) - j)
                out.append([b * T + i, w])
        # DIST2 integer places: digit runs only
        t = 0
        while t < T:
            if not (0 <= row[t] <= 9):
                t += 1
                continue
            s = t
            while t < T and 0 <= row[t] <= 9:
                t += 1
            for j, i in enumerate(range(s, t)):
                for rec in out:
                    if rec[0] == b * T + i and len(rec) == 2:
                        rec.append(float(t - s - j))
    return sorted(tuple(r) for r in out)


tokens = st.sampled_from([0, 1, 2, 5, 9, 10, 10, 11, 12, IGNORE_INDEX])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda B: st.integers(1, 12).flatmap(
    lambda T: st.lists(st.lists(tokens, min_size=T, max_size=T), min_size=B, max_size=B))), st.booleans())
def test_vectorised_spans_equal_reference(rows, float_spans):
    labels = torch.tensor(rows)
    targets = shift_targets(labels)
    dt = number_spans(targets, VOCAB, float_spans=float_spans)
    got = sorted(zip(dt.rows.tolist(), dt.del_weight.tolist(), dt.int_place.tolist()))
    ref = reference_weights(targets.tolist(), float_spans)
    assert [g[0] for g in got] == [r[0] for r in ref]
    for g, r in zip(got, ref):
        assert abs(g[1] - r[1]) < 1e-5 and g[2] == r[2], (g, r)
    assert dt.values.tolist() == [targets.reshape(-1)[i].item() for i in dt.rows.tolist()]
