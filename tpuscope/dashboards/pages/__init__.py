"""One module per page: `layout(data, run_id)` builds it, `register(app, ...)` adds its callbacks."""
