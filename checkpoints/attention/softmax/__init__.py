"""The online-softmax family: softmax, ssmax, gated, cog, intg and diff.

A row's logits are `a_ij = scale * q_i.k_j + slope_h * (j - i)` (ALiBi/NAPE
slopes, else 0), or for the signed form (cog) `|scale * q.k| + slope_h (j - i)`
with weights `sign(q.k) * softmax_j(a_ij)`. The variants only change q
(ssmax), the scale (intg), the sign (cog), the output (gated) or run two
softmaxes (diff), so one streaming loop (`chunked.py`) and one set of kernels
(`triton.py`) serve them all; `reference.py` holds the dense formula and each
variant's module its paper's own dense form and its layer."""
