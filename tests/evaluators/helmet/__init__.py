"""HELMET scoring tests (evaluators/helmet: metrics, alce, judged, collect, score)."""
