"""Softpick attention (Zuhri, Fuadi, Aji 2025, arXiv:2504.20966): rectified
softmax, no attention sink. reference.py states the formula."""
