"""The one spelling of names a client gives (checkpoints, schedules, plots): the API's
patterns, the settings and `service.core.paths.child` read it. A leaf, so that the settings
and the paths, which reads the settings, need not import each other."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
