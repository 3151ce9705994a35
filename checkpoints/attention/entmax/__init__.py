"""alpha-entmax attention with ASEntmax length scaling: sparse weights that
sum to one. reference.py states the formula and how tau is found."""
