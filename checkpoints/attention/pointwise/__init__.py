"""Variants whose weights are a pointwise function of each score, final as
soon as the score is known (no normaliser over the row): rela, tra and tda.
One streaming loop (chunked.stream_pointwise) and one kernel serve all three;
formulas in reference.py, layers in rela.py and threshold.py."""
