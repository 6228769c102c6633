"""Read models: the operator's answers (Druid's coordinator API shapes) computed from the existing folds.

Nothing here folds events: every function reads a :class:`~coordinator.placement.state.PlacementState`,
a :class:`~coordinator.timeline.timelines.Timelines` or a :class:`~coordinator.locks.state.LockboxState`
that its caller keeps current (the running worker's agents, or a fold of the log), and returns plain JSON
values. ``validate`` holds the pure checks every write (CLI, HTTP, ``events validate``) runs first.
"""
