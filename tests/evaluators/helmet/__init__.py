"""HELMET tests: the task (helmet_files: crafted files in its layouts; data, build, end to end) and its
scoring (metrics, alce, judged, collect, score)."""
